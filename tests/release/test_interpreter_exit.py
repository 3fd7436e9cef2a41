"""The interpreter's exit with a kstate call in flight on a daemon thread: no crash, no panic.

A native call runs with the interpreter released; a daemon thread can be inside one while the
main thread exits. The call's error must become a Python exception only once the thread is
attached again (CPython then ends the thread): made from the detached thread, it attached to a
finalized interpreter, and the process panicked or died of a segmentation fault."""

import os
import subprocess
import sys
import time

import pytest

EXIT_WITH_A_CALL_IN_FLIGHT = """
import ctypes, sys, threading
from kstate.upgrade import inspect_store

def fail():
    try:
        inspect_store(sys.argv[1])  # blocks reading the store's CURRENT, a FIFO, then fails
    except Exception:
        pass

threading.Thread(target=fail, daemon=True).start()
# The interpreter's last step calls this: the process, finalized, waits for stdin to close.
ctypes.pythonapi.Py_AtExit(ctypes.CDLL(None).getchar)
print("exiting", flush=True)
"""

READ_OF_STDIN = "0 0x0 "  # /proc/<pid>/syscall of a thread in read(0, ...)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and FIFOs")
def test_a_daemon_thread_failing_in_a_native_call_after_the_exit_does_not_crash(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    current = store / "CURRENT"
    os.mkfifo(current)
    script = tmp_path / "exit.py"
    script.write_text(EXIT_WITH_A_CALL_IN_FLIGHT)
    child = subprocess.Popen(
        [sys.executable, str(script), str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert child.stdout.readline() == b"exiting\n"
        deadline = time.monotonic() + 60
        while True:
            with open(f"/proc/{child.pid}/syscall") as syscall:
                if syscall.read().startswith(READ_OF_STDIN):
                    break  # finalized, in the exit function
            assert time.monotonic() < deadline, "the child never reached its exit function"
            time.sleep(0.01)
        with open(current, "w") as fifo:
            fifo.write("not a manifest name\n")  # the daemon thread's call fails now
        time.sleep(0.5)
        _, stderr = child.communicate(b"", timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0
    assert stderr.decode() == ""
