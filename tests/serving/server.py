"""``kstate serve`` in a process of its own on loopback, and an HTTP client of it (httpx)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(changelog_dir, application_id, local_dir, follow_interval=0.1) -> Iterator[httpx.Client]:
    """Runs ``kstate serve`` until the block ends; yields a client once it answers ``/health``."""
    port = free_port()
    command = [sys.executable, "-m", "kstate.cli", "serve", str(changelog_dir), "--application-id", application_id]
    command += ["--port", str(port), "--local-dir", str(local_dir), "--follow-interval", str(follow_interval)]
    server = subprocess.Popen(command, env=os.environ.copy(), stderr=subprocess.PIPE, text=True)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, f"kstate serve exited: {server.stderr.read()}"
            try:
                if client.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "kstate serve did not answer within 60 s"
            time.sleep(0.1)
        yield client
    finally:
        client.close()
        server.terminate()
        server.wait(30)
        server.stderr.close()
