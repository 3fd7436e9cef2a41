"""Stores parked between a worker's tasks (``kstate.spark.protocol.idle``) stay bounded: how
many partitions one process keeps, for how long, and not past their task directory."""

import os
import shutil
import subprocess
import sys

from kstate import Stores
from kstate.spark import StateBackend, TaskInfo
from kstate.spark.protocol import idle
from kstate.spark.protocol.idle import IDLE, MAX_PARKED


def backend_in(tmp_path):
    counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
    return StateBackend([counts], tmp_path / "state", tmp_path / "changelog", "app", lock_timeout=5)


def count(backend, batch, partition, key="a"):
    """One task of ``partition``: adds 1 to ``key``; returns its count after the batch."""

    def fn(stores):
        store = stores["counts"]
        store.put(key, (store.get(key) or 0) + 1)
        yield store.get(key)

    return list(backend.run(fn, TaskInfo(partition, batch, 0)))[0]


def open_descriptors():
    return len(os.listdir("/proc/self/fd"))


def descriptors_under(path):
    """This process's open descriptors of files under ``path`` (deleted ones too)."""
    paths = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # closed meanwhile (the listing's own descriptor)
    return [p for p in paths if p.startswith(f"{path}/")]


def test_a_process_keeps_the_stores_of_at_most_max_parked_partitions(tmp_path):
    backend = backend_in(tmp_path)
    for partition in range(MAX_PARKED):
        count(backend, 0, partition)
    parked_full = open_descriptors()
    for partition in range(MAX_PARKED, 4 * MAX_PARKED):
        count(backend, 0, partition)
    task_dir = backend.layout.task_dir
    assert not any(IDLE.holds(task_dir(p)) for p in range(3 * MAX_PARKED))
    assert all(IDLE.holds(task_dir(p)) for p in range(3 * MAX_PARKED, 4 * MAX_PARKED))
    # Before the bound, each partition parked kept its files open: 48 more partitions held
    # hundreds of descriptors more.
    assert open_descriptors() <= parked_full + 8
    assert count(backend, 1, 0) == 2, "a released partition reopens where it was"


def test_parked_stores_left_idle_are_released(tmp_path, monkeypatch, wait_until):
    monkeypatch.setattr(idle, "IDLE_SECONDS", 0.5)
    backend = backend_in(tmp_path)
    count(backend, 0, 0)
    assert IDLE.holds(backend.layout.task_dir(0))
    wait_until(lambda: not IDLE.holds(backend.layout.task_dir(0)), "the idle stores released")
    assert count(backend, 1, 0) == 2


def test_parked_stores_whose_task_directory_was_deleted_are_released(tmp_path, wait_until):
    backend = backend_in(tmp_path)
    count(backend, 0, 0)
    assert descriptors_under(tmp_path / "state"), "the parked stores hold their files open"
    shutil.rmtree(tmp_path / "state")
    wait_until(lambda: not IDLE.holds(backend.layout.task_dir(0)), "the deleted stores released")
    # The thread takes them out of the parked set before it closes them, so their descriptors go a
    # moment later. Their own descriptors, not the process's count: another thread may open one.
    wait_until(lambda: descriptors_under(tmp_path / "state") == [], "their descriptors closed")


def test_another_process_asking_for_parked_stores_gets_them_without_polling(tmp_path, monkeypatch):
    """The thread waits on the parked task directories (``_core.FileWatch``, inotify) and
    releases stores as soon as another process asks for them: with the sweep an hour away and
    no polling, another worker's task of the partition still opens it within its lock timeout."""
    monkeypatch.setattr(idle, "_SWEEP_SECONDS", 3600.0)
    IDLE.stop()  # a thread of an earlier test may be between sweeps; the next park starts one
    backend = backend_in(tmp_path)
    assert count(backend, 0, 0) == 1
    assert IDLE.holds(backend.layout.task_dir(0)) and IDLE._requests is not None
    script = f"""
import time
from kstate import Stores
from kstate.spark import StateBackend, TaskInfo
counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
backend = StateBackend([counts], {str(tmp_path / "state")!r}, {str(tmp_path / "changelog")!r}, "app", lock_timeout=20)
def fn(stores):
    store = stores["counts"]
    store.put("a", (store.get("a") or 0) + 1)
    yield store.get("a")
started = time.monotonic()
print(list(backend.run(fn, TaskInfo(0, 1, 0)))[0], time.monotonic() - started)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    total, seconds = done.stdout.split()
    assert total == "2", "the other process continued from this one's commit"
    assert not IDLE.holds(backend.layout.task_dir(0))
    assert float(seconds) < 15, "released on the request, not at a sweep"
    IDLE.stop()


def test_the_exit_stops_the_thread_and_closes_the_parked_stores_on_the_exiting_thread(tmp_path):
    # A parked store closed by the daemon thread while the interpreter finalizes cannot take the GIL
    # back: the native binding panicked. The exit handlers close them first, on the exiting thread.
    script = f"""
import atexit, threading
from kstate import Stores
from kstate.spark import StateBackend, TaskInfo
from kstate.spark.protocol.idle import IDLE
counts = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), "string", "int64")
backend = StateBackend([counts], {str(tmp_path / "state")!r}, {str(tmp_path / "changelog")!r}, "app")
def fn(stores):
    stores["counts"].put("a", 1)
    yield 1
list(backend.run(fn, TaskInfo(0, 0, 0)))
task_dir = backend.layout.task_dir(0)
parked = IDLE.take(task_dir)
closed_on = []
for name, store in list(parked.stores.items()):
    class Observed:
        def __init__(self, store):
            self.store = store
        def close(self):
            closed_on.append(threading.current_thread().name)
            self.store.close()
    parked.stores[name] = Observed(store)
IDLE.park(task_dir, parked)
atexit._run_exitfuncs()
assert not IDLE.holds(task_dir), "released at exit"
assert closed_on == ["MainThread"], closed_on
assert not any(t.name == "kstate-idle-stores" and t.is_alive() for t in threading.enumerate()), "stopped"
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
    assert "panicked" not in done.stderr
