"""An object store that fails now and then: moto's S3 server behind a fault-injecting proxy (500
InternalError, 503 SlowDown, connections reset mid-request and mid-response, outages, an answer
lost after the server applied the request). ``ObjectStore`` retries what is transient, gives up
with ``RemoteStorageError`` naming its attempts, counts a create whose answer was lost as done,
and a changelogged store committing through it keeps every record exactly once. What the tests
check is read back through the server's own endpoint, around the proxy."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from kstate.errors import RemoteStorageError
from kstate.log.object_store import ObjectStore, RetryPolicy, is_precondition_failed, is_transient
from kstate.log.remote import RemoteChangelog, resolve

from .locations import Remote, builder, s3_remote

# The fault proxy belongs to the soak harness (benches/soak_harness), which is not part of the
# installed package the tests run against: it is imported from the checkout's benches/ (last on
# the path, so that nothing there shadows another module).
sys.path.append(str(Path(__file__).resolve().parents[2] / "benches"))
from soak_harness.fault_proxy import FaultProxy, pid_of_peer  # noqa: E402

QUICK = RetryPolicy(attempts=10, first_delay=0.01, max_delay=0.1)
"""Retries enough for 30% faults (all ten fail one time in 170,000), sleeping little."""


def no_botocore_retries() -> dict:
    """Storage options turning botocore's own retries off (``max_attempts`` would count retries
    after the first; botocore rewrites the dict it gets, so a new one each time): failures reach
    s3fs, which still retries resets and SlowDown itself, then kstate."""
    return {"config_kwargs": {"retries": {"total_max_attempts": 1}}}


LOGGER = "kstate.log.object_store"


@pytest.fixture
def proxy(s3_endpoint):
    proxy = FaultProxy(s3_endpoint, seed=20260917, max_delay=0.05)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def bucket(s3_endpoint) -> Remote:
    """A fresh bucket, reached directly (no faults)."""
    return s3_remote(s3_endpoint)


def through(proxy: FaultProxy, remote: Remote, **options) -> Remote:
    """``remote`` reached through the proxy."""
    return Remote("s3", remote.url, {**remote.storage_options, "endpoint_url": proxy.endpoint, **options})


def files(directory: Path, count: int) -> dict[str, Path]:
    """``count`` local files of different sizes and contents, by name."""
    directory.mkdir(parents=True, exist_ok=True)
    made = {}
    for i in range(count):
        path = directory / f"o{i:02d}"
        path.write_bytes(f"{i}:".encode() + os.urandom(100 * i + 1))
        made[path.name] = path
    return made


def fetched(store: ObjectStore, key: str, scratch: Path) -> bytes:
    path = scratch / "fetched"
    store.fetch(key, str(path))
    return path.read_bytes()


def retry_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_every_operation_succeeds_through_500s_503s_and_resets(bucket, proxy, tmp_path, caplog):
    store = ObjectStore(bucket.url, through(proxy, bucket, **no_botocore_retries()).storage_options, QUICK)
    direct = ObjectStore(bucket.url, bucket.storage_options)
    local = files(tmp_path / "local", 24)
    proxy.set_shares(error_share=0.1, slowdown_share=0.1, reset_share=0.1)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for name, path in local.items():
            store.create(f"dir/{name}", str(path))
            store.create(f"other/{name}", str(path))
        assert store.list("dir") == {name: path.stat().st_size for name, path in local.items()}
        assert store.list("missing") == {}
        assert sorted(store.directories()) == ["dir", "other"]
        for name, path in local.items():
            assert fetched(store, f"dir/{name}", tmp_path) == path.read_bytes()
        kept = dict(list(local.items())[::2])
        for name in local.keys() - kept.keys():
            store.delete(f"dir/{name}")
        store.delete_directory("other")
        assert store.list("dir") == {name: path.stat().st_size for name, path in kept.items()}
    proxy.set_shares(error_share=0, slowdown_share=0, reset_share=0)

    assert direct.list("dir") == {name: path.stat().st_size for name, path in kept.items()}
    assert direct.list("other") == {}
    assert all(fetched(direct, f"dir/{name}", tmp_path) == path.read_bytes() for name, path in kept.items())
    faults = {kind: proxy.counts[kind] for kind in ("error500", "slowdown503", "reset_request", "reset_response")}
    assert all(faults.values()), f"every kind of fault happened: {faults}"
    warnings = retry_warnings(caplog)
    assert warnings, "kstate's own retries ran"
    assert all("attempt" in w and " of 10 failed, retrying in " in w for w in warnings), warnings[:3]
    assert any(w.startswith("creating s3://") for w in warnings), warnings
    assert any("InternalError" in w or "internal error" in w for w in warnings), warnings
    assert "an earlier attempt had created it" in caplog.text, (
        "a create's answer was lost (reset) and s3fs sent it again"
    )


def test_an_outage_longer_than_the_retries_fails_naming_the_attempts_then_the_store_works(bucket, proxy, tmp_path):
    store = ObjectStore(
        bucket.url, through(proxy, bucket, **no_botocore_retries()).storage_options, RetryPolicy(2, 0.01, 0.01)
    )
    local = files(tmp_path / "local", 1)["o00"]
    proxy.outage(600)
    with pytest.raises(RemoteStorageError, match=r"^listing s3://.*/dir: failed 2 attempts, the last with OSError: "):
        store.list("dir")
    assert proxy.counts["outage503"] == 2 * 5, "s3fs tried 5 times in each of kstate's 2 attempts"
    assert proxy.counts["forwarded"] == 0
    proxy.outage(0)
    store.create("dir/o00", str(local))
    assert store.list("dir") == {"o00": local.stat().st_size}


def test_what_is_not_transient_is_not_retried(bucket, proxy, tmp_path, caplog):
    local = files(tmp_path / "local", 1)["o00"]
    store = ObjectStore(bucket.url, through(proxy, bucket).storage_options, QUICK)
    nowhere = ObjectStore("s3://no-such-bucket-here/x", through(proxy, bucket).storage_options, QUICK)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        with pytest.raises(FileNotFoundError):
            store.fetch("dir/absent", str(tmp_path / "absent"))
        with pytest.raises(RemoteStorageError, match="bucket 'no-such-bucket-here' does not exist"):
            nowhere.list("dir")
        with pytest.raises(RemoteStorageError, match="^creating .*: FileNotFoundError"):
            nowhere.create("dir/o00", str(local))
    assert retry_warnings(caplog) == []


@pytest.mark.parametrize(
    ("code", "status", "transient"),
    [
        ("InternalError", 500, True),
        ("SlowDown", 503, True),
        ("ServiceUnavailable", 503, True),
        ("Throttling", 400, True),
        ("RequestTimeout", 400, True),
        ("TooManyRequests", 429, True),
        ("AccessDenied", 403, False),
        ("NoSuchBucket", 404, False),
        ("InvalidArgument", 400, False),
    ],
)
def test_which_s3_errors_are_transient_as_s3fs_raises_them(code, status, transient):
    """S3 codes the proxy does not answer with, as s3fs turns botocore's error into its own."""
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    answer = {"Error": {"Code": code, "Message": "..."}, "ResponseMetadata": {"HTTPStatusCode": status}}
    assert is_transient(translate_boto_error(ClientError(answer, "PutObject"))) == transient


@pytest.mark.parametrize(
    ("answer", "taken"),
    [
        ({"Code": "PreconditionFailed", "Condition": "If-None-Match"}, True),  # AWS, moto
        ({"Code": "PreconditionFailed"}, True),  # s3s: no Condition, s3fs raises a plain OSError
        ({"Code": "AccessDenied"}, False),
        ({"Code": "InternalError"}, False),
    ],
)
def test_a_conditional_puts_412_is_a_taken_name_whether_or_not_it_names_the_condition(answer, taken):
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    status = 412 if answer["Code"] == "PreconditionFailed" else 500
    raised = translate_boto_error(ClientError({"Error": answer, "ResponseMetadata": {"HTTPStatusCode": status}}, "Put"))
    assert is_precondition_failed(raised) == taken
    assert not is_transient(raised) or not taken


def test_a_create_whose_answer_was_lost_succeeds_and_a_different_file_still_conflicts(bucket, proxy, tmp_path, caplog):
    store = ObjectStore(bucket.url, through(proxy, bucket).storage_options, QUICK)
    direct = ObjectStore(bucket.url, bucket.storage_options)
    local = files(tmp_path / "local", 2)
    # The server creates the object; its answer never reaches the client (the connection is
    # reset). s3fs sends the conditional PUT again by itself and gets 412 PreconditionFailed.
    proxy.intercept(
        lambda method, path: method == "PUT" and path.endswith("/dir/lost"), lambda pid: None, after_forward=True
    )
    with caplog.at_level(logging.INFO, logger=LOGGER):
        store.create("dir/lost", str(local["o00"]))
    assert proxy.counts["intercept_after_forward"] == 1
    assert "an earlier attempt had created it" in caplog.text
    assert fetched(direct, "dir/lost", tmp_path) == local["o00"].read_bytes()
    with pytest.raises(FileExistsError):
        store.create("dir/lost", str(local["o01"]))
    assert fetched(direct, "dir/lost", tmp_path) == local["o00"].read_bytes()

    # A changelog's publication likewise: before, the lost answer was a CommitConflictError.
    changelog = RemoteChangelog(bucket.url, "app-counts-changelog", 0, through(proxy, bucket).storage_options)
    proxy.intercept(
        lambda method, path: method == "PUT" and path.endswith(".log"), lambda pid: None, after_forward=True
    )
    changelog.publish(0, 0, str(local["o01"]))
    assert proxy.counts["intercept_after_forward"] == 2
    assert [o.name for o in changelog.list()] == ["00000000000000000000.log"]


def records_of(remote: Remote, topic: str, scratch: Path) -> list[tuple[int, bytes, bytes | None]]:
    """The records of the remote log ``topic``-0 in order: (offset, key, value)."""
    changelog = RemoteChangelog(remote.url, topic, 0, remote.storage_options)
    out = []
    for link in resolve(changelog.list()):
        path = scratch / link.object.name
        changelog.store.fetch(changelog.object_key(link.object.name), str(path))
        records = MemoryRecords(path.read_bytes())
        while records.has_next():
            out.extend((r.offset, r.key, r.value) for r in records.next_batch())
    return out


def test_a_logged_store_committing_through_faults_keeps_every_record_once(bucket, proxy, tmp_path, caplog):
    faulty = through(proxy, bucket, **no_botocore_retries())
    expected = []
    proxy.set_shares(error_share=0.1, slowdown_share=0.1, reset_share=0.1, delay_share=0.1)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with builder(faulty).build().init(tmp_path / "a" / "state" / "app" / "0_0") as store:
            for n in range(12):
                batch = [(f"k{n:02d}-{i}", n * 100 + i) for i in range(8)]
                store.put_all(batch)
                assert store.commit() == len(expected) + len(batch) - 1
                expected += batch
    proxy.set_shares(error_share=0, slowdown_share=0, reset_share=0, delay_share=0)
    assert retry_warnings(caplog), "kstate's own retries ran"

    records = records_of(bucket, "app-counts-changelog", tmp_path)
    assert [offset for offset, _, _ in records] == list(range(len(expected)))
    assert [(key.decode(), int.from_bytes(value, "big")) for _, key, value in records] == expected
    with builder(bucket).build().init(tmp_path / "b" / "state" / "app" / "0_0") as restored:
        assert [(key, value) for key, value in restored.all()] == sorted(expected)


_CLIENT = """\
import sys, urllib.request
print("connecting", flush=True)
try:
    urllib.request.urlopen(sys.argv[1] + "/peer-probe", timeout=300)
except Exception as error:
    print(type(error).__name__, flush=True)
"""


def test_pid_of_peer_finds_the_client_process_which_the_action_can_kill(proxy):
    port = int(proxy.endpoint.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as ours:
        assert pid_of_peer(ours.getsockname()[1]) == os.getpid()
    killed = []

    def kill(pid):
        killed.append(pid)
        os.kill(pid, signal.SIGKILL)

    proxy.intercept(lambda method, path: path == "/peer-probe", kill)
    client = subprocess.Popen([sys.executable, "-c", _CLIENT, proxy.endpoint], stdout=subprocess.PIPE, text=True)
    try:
        out, _ = client.communicate(timeout=300)
    finally:
        client.kill()
    assert killed == [client.pid]
    assert client.returncode == -signal.SIGKILL
    assert out == "connecting\n", "killed before it saw an answer"
    assert proxy.counts["intercept"] == 1


def test_a_failed_bucket_check_is_retried_not_taken_for_a_missing_bucket(bucket, proxy):
    """Listing a directory that does not exist asks whether the bucket does. s3fs's ``exists``
    answers False on any failure, so a dropped connection there read as "bucket does not
    exist", which is not retried; the check now fails as the storage's failure, and is retried."""
    store = ObjectStore(bucket.url, through(proxy, bucket, **no_botocore_retries()).storage_options, QUICK)
    bucket_path = "/" + bucket.url.split("/")[2]
    drops = []

    def is_bucket_check(method: str, path: str) -> bool:
        return method == "HEAD" and path.split("?")[0].rstrip("/") == bucket_path

    def drop(pid: int | None) -> None:
        drops.append(pid)
        if len(drops) < 6:  # more than s3fs's own retries of one call
            proxy.intercept(is_bucket_check, drop)

    proxy.intercept(is_bucket_check, drop)
    assert store.list("missing") == {}
    assert len(drops) == 6
