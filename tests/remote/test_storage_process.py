"""The storage process (``kstate.log.storage_process``): a child that uploads a snapshot's files
and compacts remote changelogs, so that their Python work does not share the committing process's
GIL. It answers as the work done in the caller would (the result, or the same exception) and its
log records reach the caller's logs; a child that dies fails what it held and the next request
starts another; it ends with its parent, leaving its work unfinished."""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import socket
import threading
from pathlib import Path

import pytest

from kstate.errors import RemoteStorageError
from kstate.log import storage_process
from kstate.log.object_store import ObjectStore, RetryPolicy

from .locations import builder, s3_remote

ONE_TRY = RetryPolicy(attempts=1)


def storage_children(pid: int) -> list[int]:
    """The pids of ``pid``'s storage processes (children running ``kstate.log.storage_process``)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(child) for child in (task / "children").read_text().split()]
    return [child for child in children if b"kstate.log.storage_process" in Path(f"/proc/{child}/cmdline").read_bytes()]


def exited(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie (a container's init may not reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class SilentEndpoint:
    """An S3 endpoint that takes connections and never answers: an upload to it waits."""

    def __init__(self, server: socket.socket):
        self.server = server
        self.url = f"http://127.0.0.1:{server.getsockname()[1]}"
        self.storage_options = {"endpoint_url": self.url, "key": "testing", "secret": "testing"}

    def wait_for_a_request(self) -> None:
        self.server.settimeout(30)
        self.server.accept()


@pytest.fixture
def silent_endpoint():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield SilentEndpoint(server)


def test_uploads_answer_as_the_object_store_does(s3_endpoint, tmp_path):
    remote = s3_remote(s3_endpoint)
    uploads = storage_process.shared()
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_bytes(os.urandom(3 << 20))
    second.write_bytes(b"other bytes")
    place = (remote.url, remote.storage_options, ONE_TRY)

    uploads.upload(*place, "files/a", str(first), exclusive=True)
    uploads.upload(*place, "files/a", str(first), exclusive=True)  # the same bytes: this create's own
    with pytest.raises(FileExistsError):
        uploads.upload(*place, "files/a", str(second), exclusive=True)
    uploads.upload(*place, "files/b", str(second), exclusive=False)
    uploads.upload(*place, "files/b", str(first), exclusive=False)
    with pytest.raises(RemoteStorageError):
        uploads.upload(*place, "files/c", str(tmp_path / "missing"), exclusive=False)

    store = ObjectStore(remote.url, remote.storage_options)
    assert store.list("files") == {"a": 3 << 20, "b": 3 << 20}
    store.fetch("files/b", str(tmp_path / "back"))
    assert (tmp_path / "back").read_bytes() == first.read_bytes()


def test_the_work_is_done_by_the_child_not_the_caller(s3_endpoint, tmp_path, monkeypatch):
    remote = s3_remote(s3_endpoint)
    file = tmp_path / "file"
    file.write_bytes(b"bytes")

    def not_here(*_):
        raise AssertionError("uploaded by the calling process")

    monkeypatch.setattr(ObjectStore, "create", not_here)
    monkeypatch.setattr(ObjectStore, "replace", not_here)
    storage_process.shared().upload(remote.url, remote.storage_options, ONE_TRY, "files/a", str(file), exclusive=True)
    assert ObjectStore(remote.url, remote.storage_options).list("files") == {"a": 5}


def test_a_compaction_in_the_child_answers_its_report_and_logs_in_the_caller(s3_endpoint, tmp_path, caplog):
    remote = s3_remote(s3_endpoint)
    task = tmp_path / "state" / "app" / "0_0"
    with builder(remote).build().init(task) as store:
        for n in range(4):
            store.put_all([(f"k{i}", n) for i in range(20)])
            store.commit()
        expected = list(store.all_with_timestamp())
    caplog.set_level(logging.INFO, logger="kstate")
    compactions = storage_process.shared()
    topic = "app-counts-changelog"
    report = compactions.compact(remote.url, remote.storage_options, topic, 0, {}, 2, str(tmp_path), 1)
    assert report.objects_merged == 3 and report.objects_written == 1 and report.distinct_keys == 20
    assert f"Compacting {remote.url}/{topic}-0" in caplog.text, "the child's log record, logged by the caller"
    with builder(remote).build().init(tmp_path / "elsewhere" / "app" / "0_0") as restored:
        assert list(restored.all_with_timestamp()) == expected


def test_a_killed_storage_process_fails_what_it_held_and_the_next_upload_starts_another(
    s3_endpoint, silent_endpoint, tmp_path
):
    remote = s3_remote(s3_endpoint)
    uploads = storage_process.StorageProcess()
    file = tmp_path / "file"
    file.write_bytes(b"bytes")
    failures: list[BaseException] = []

    def upload_to_silence() -> None:
        try:
            storage_options = silent_endpoint.storage_options
            uploads.upload("s3://bucket/x", storage_options, ONE_TRY, "files/a", str(file), exclusive=True)
        except BaseException as error:
            failures.append(error)

    others = set(storage_children(os.getpid()))  # the shared one, if an earlier test started it
    waiting = threading.Thread(target=upload_to_silence)
    waiting.start()
    silent_endpoint.wait_for_a_request()
    (child,) = set(storage_children(os.getpid())) - others
    os.kill(child, signal.SIGKILL)
    waiting.join(30)
    assert not waiting.is_alive()
    assert len(failures) == 1 and isinstance(failures[0], RemoteStorageError)
    assert "exited" in str(failures[0])

    uploads.upload(remote.url, remote.storage_options, ONE_TRY, "files/a", str(file), exclusive=True)
    assert ObjectStore(remote.url, remote.storage_options).list("files") == {"a": 5}


PARENT = """
import json, sys, threading, time
from kstate.log import storage_process
from kstate.log.object_store import RetryPolicy

silent, path = json.loads(sys.argv[1]), sys.argv[2]
uploads = storage_process.shared()
threading.Thread(
    target=uploads.upload,
    args=("s3://bucket/x", silent, RetryPolicy(attempts=1), "files/a", path),
    kwargs={"exclusive": True},
    daemon=True,
).start()
while uploads._child is None:
    time.sleep(0.01)
print("uploading", uploads._child.process.pid, flush=True)
threading.Event().wait()
"""


def test_the_storage_process_ends_with_its_parent(kill_writer, silent_endpoint, tmp_path, wait_until):
    file = tmp_path / "file"
    file.write_bytes(b"bytes")
    lines = kill_writer(PARENT, [json.dumps(silent_endpoint.storage_options), file], "uploading")
    child = int(lines[-1][1])
    wait_until(lambda: exited(child), "the storage process exited after its parent was killed")


def test_storage_options_that_do_not_pickle_are_not_sent():
    assert storage_process.can_send({"endpoint_url": "http://127.0.0.1:1", "config_kwargs": {"retries": {}}})
    assert not storage_process.can_send({"session": lambda: None})


def test_an_answer_that_does_not_read_kills_the_child_and_fails_what_it_held(s3_endpoint, tmp_path, monkeypatch):
    remote = s3_remote(s3_endpoint)
    file = tmp_path / "file"
    file.write_bytes(b"bytes")
    uploads = storage_process.StorageProcess()
    read, garbled = storage_process._read_frame, []

    def garbled_once(stream):
        if not garbled:
            garbled.append(stream)
            raise pickle.UnpicklingError("garbled")
        return read(stream)

    monkeypatch.setattr(storage_process, "_read_frame", garbled_once)
    place = (remote.url, remote.storage_options, ONE_TRY)
    with pytest.raises(RemoteStorageError):
        uploads.upload(*place, "files/a", str(file), exclusive=True)
    uploads.upload(*place, "files/a", str(file), exclusive=True)  # another child
    assert ObjectStore(remote.url, remote.storage_options).list("files") == {"a": 5}
