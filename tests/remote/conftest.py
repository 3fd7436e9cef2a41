"""Remote changelog locations: a real S3 API server (moto's server mode, started here on
127.0.0.1 with a free port and stopped at the end, reached through s3fs) and a local ``file://``
directory. Every test gets a fresh bucket or directory."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from .locations import Remote, s3_remote

LOOPBACK = "127.0.0.1"
# Credentials are always given, but botocore must never look for instance credentials, and no
# request may go through a proxy: nothing leaves the loopback interface.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
os.environ["NO_PROXY"] = os.environ["no_proxy"] = LOOPBACK


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint():
    """A moto S3 server on loopback for the session; its URL."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://{LOOPBACK}:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start on {endpoint}") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(params=["file", "s3"])
def remote(request, tmp_path) -> Remote:
    """A fresh remote changelog location: a ``file://`` directory, or a bucket on moto's S3."""
    if request.param == "file":
        return Remote("file", (tmp_path / "remote").as_uri())
    return s3_remote(request.getfixturevalue("s3_endpoint"))


@pytest.fixture
def s3(s3_endpoint) -> Remote:
    return s3_remote(s3_endpoint)
