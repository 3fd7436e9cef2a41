import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest
from hypothesis import HealthCheck, settings

from kstate import Stores

# Hypothesis times its own data generation and fails a test whose draws are slow ("too_slow"):
# on a busy machine every draw is. Each test's settings start from this profile.
settings.register_profile("any-machine", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("any-machine")


@pytest.fixture(autouse=True)
def parked_stores_released():
    """Tests that run kstate.spark's protocol in this process leave its stores parked, as a Spark
    worker would; each test gives them back, so the suite's process holds no descriptors of tests
    that are done (py4j's callback server, which foreachBatch needs, stops past 1024)."""
    yield
    idle = sys.modules.get("kstate.spark.protocol.idle")
    if idle is not None:
        idle.IDLE.release_all()


@pytest.fixture
def task_dir(tmp_path):
    """A Kafka-layout task directory: <state.dir>/<application.id>/<subtopology>_<partition>."""
    return tmp_path / "app" / "0_3"


@pytest.fixture
def open_store(task_dir):
    """Builds and opens a store; closes every store it opened at the end of the test."""
    opened = []

    def make(kind="persistent", timestamped=False, key="bytes", value="bytes", config=None, directory=None):
        factory = {
            ("persistent", False): Stores.persistent_key_value_store,
            ("persistent", True): Stores.persistent_timestamped_key_value_store,
            ("memory", False): Stores.in_memory_key_value_store,
            ("memory", True): Stores.in_memory_timestamped_key_value_store,
        }[(kind, timestamped)]
        builder_of = Stores.timestamped_key_value_store_builder if timestamped else Stores.key_value_store_builder
        builder = builder_of(factory("store"), key, value)
        if config:
            builder = builder.with_config(config)
        store = builder.build().init(directory or task_dir)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def column_families():
    """Reads a RocksDB directory read-only with rocksdict (an independent RocksDB binding):
    ``{column family: {key: value}}``."""
    from rocksdict import AccessType, Options, Rdict

    def read(path):
        opts = Options(raw_mode=True)
        names = Rdict.list_cf(str(path), opts)
        db = Rdict(str(path), opts, column_families={n: opts for n in names}, access_type=AccessType.read_only())
        try:
            return {n: dict(db.get_column_family(n).items()) for n in names}
        finally:
            db.close()

    return read


@pytest.fixture
def filter_entries():
    """The keys the Bloom filters of a RocksDB directory's tables hold, in its default column
    family, as rocksdict (an independent RocksDB binding) reads their table properties."""
    from rocksdict import AccessType, Options, Rdict

    def read(path):
        db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
        try:
            properties = db.property_value("rocksdb.aggregated-table-properties")
        finally:
            db.close()
        fields = dict(field.strip().split("=", 1) for field in properties.split(";") if "=" in field)
        return int(fields["# entries for filter"])

    return read


WAIT_SECONDS = 300
"""How long a test waits for something before it fails: a deadline for a machine far slower
than this one, never a measure of speed."""


@pytest.fixture
def wait_until():
    """``wait_until(condition, what)`` polls ``condition()`` until it holds; fails saying ``what``
    did not happen if it does not within ``WAIT_SECONDS``."""

    def wait(condition, what):
        deadline = time.monotonic() + WAIT_SECONDS
        while not condition():
            assert time.monotonic() < deadline, f"{what}: not within {WAIT_SECONDS} s"
            time.sleep(0.05)

    return wait


@pytest.fixture
def kill_writer():
    """Runs a Python ``script`` with ``args`` in a real process, waits until it prints a line
    starting with ``wait_for`` (failing after ``WAIT_SECONDS``), waits ``delay`` seconds more and
    kills it with SIGKILL. Returns every line it printed, split into words."""

    def run(script, args, wait_for, delay=0.0):
        command = [sys.executable, "-c", script, *map(str, args)]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        lines = []
        try:
            deadline = time.monotonic() + WAIT_SECONDS
            while True:
                line = proc.stdout.readline()
                assert line, f"writer exited early with {proc.wait()}"
                lines.append(line.split())
                if line.startswith(wait_for):
                    break
                assert time.monotonic() < deadline, f"writer printed no {wait_for!r} line within {WAIT_SECONDS} s"
            time.sleep(delay)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        return lines

    return run


_COUNTING_WRITER = """\
import json, sys, time
from kstate import Stores

task_dir, pause_at, *args = sys.argv[1:]
{opening}

def stage(name):
    print(name, flush=True)
    if name == pause_at:
        time.sleep(60)

count_once()
store.commit()
print("first commit done", flush=True)
count_once()
if pause_at == "staged":
    print("staged", flush=True)
    time.sleep(60)
if pause_at == "loop":
    while True:
        store.commit()
        print("committed", store.committed_offset(), flush=True)
        count_once()
store.commit(on_stage=stage)
time.sleep(60)
"""


@pytest.fixture
def counting_writer():
    """The script of a writer process for ``kill_writer`` (args: task dir, ``pause_at``, then
    the opening's own). ``opening`` is Python source that opens ``store`` and defines
    ``count_once()``, adding 1 to every key's count (so a lost or doubled commit shows); it sees
    ``task_dir`` and ``args``. The writer commits one count and stages another, then pauses
    where ``pause_at`` says: ``"staged"``, or a stage ``commit(on_stage=...)`` reports; or with
    ``"loop"`` commits and counts forever, printing ``committed <offset>`` each time."""

    def script(opening):
        return _COUNTING_WRITER.format(opening=textwrap.dedent(opening).strip())

    return script


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
    """A moto S3 server (moto's server mode) on 127.0.0.1 with a free port for the session;
    its URL. Stopped at the end."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://{LOOPBACK}:{port}"
    try:
        deadline = time.monotonic() + WAIT_SECONDS
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
