"""The processes and directories of a ``local-cluster`` application, read from ``/proc``: its
executor JVMs, their Python workers, each executor's working directory; and executor-local state
directories on small tmpfs mounts, so that a full disk is a real ``ENOSPC``."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("soak.cluster")

PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Executor:
    id: str
    pid: int
    directory: Path


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except OSError:
        return 0


def is_python_worker(pid: int) -> bool:
    """A PySpark worker: forked by ``pyspark.daemon``, so its parent runs the daemon too."""
    parents = _parents()
    parent = parents.get(pid)
    return parent is not None and any("pyspark.daemon" in part for part in _cmdline(parent))


class Cluster:
    """The executors of application ``app_id`` started from ``spark_home``'s ``work`` directory."""

    def __init__(self, spark_home: Path, app_id: str):
        self.app_id = app_id
        self.work = spark_home / "work" / app_id

    def executors(self) -> list[Executor]:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            argv = _cmdline(int(entry))
            if not any("CoarseGrainedExecutorBackend" in a for a in argv) or self.app_id not in argv:
                continue
            executor_id = argv[argv.index("--executor-id") + 1]
            found.append(Executor(executor_id, int(entry), self.work / executor_id))
        return sorted(found, key=lambda e: int(e.id))

    def rss_per_executor(self) -> dict[str, tuple[int, int, int]]:
        """Each live executor's resident memory: ``(all, python, worker)``. ``all`` is its JVM
        and every process below it; ``python`` those processes alone (PySpark's daemons and
        their workers); ``worker`` the largest worker, the process where kstate runs. The
        daemons are PySpark's fork servers, ~48 MiB each, one per kind of Python task that has
        run on the executor so far (UDFs, the tick source), so ``python`` steps by a daemon as
        an executor ages; ``worker`` does not."""
        parents = _parents()
        children: dict[int, list[int]] = {}
        for pid, parent in parents.items():
            children.setdefault(parent, []).append(pid)
        out = {}
        for executor in self.executors():
            python, worker, stack = 0, 0, list(children.get(executor.pid, []))
            while stack:
                pid = stack.pop()
                rss = rss_bytes(pid)
                python += rss
                if parents.get(parents.get(pid, 0), 0) == executor.pid:  # a daemon's child
                    worker = max(worker, rss)
                stack.extend(children.get(pid, []))
            out[executor.id] = (rss_bytes(executor.pid) + python, python, worker)
        return out


class TmpfsStateDirs:
    """Mounts a tmpfs of ``size_mb`` at ``kstate-state`` in each new executor's working directory
    before its first task (a JVM takes seconds to start), so each executor's state lives on a
    small disk of its own; unmounts it when the executor is gone (its machine is gone)."""

    BALLAST = ".ballast"

    def __init__(self, cluster: Cluster, size_mb: int):
        self.cluster, self.size_mb = cluster, size_mb
        self.mounted: dict[str, Path] = {}
        self.skipped: set[str] = set()
        self._seen_alive: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="soak-tmpfs", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for directory in list(self.mounted.values()):
            self._unmount(directory)
        self.mounted.clear()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self._mount_new()
                self._unmount_gone()
            except Exception:  # a racing executor exit: look again next round
                log.exception("tmpfs watcher")
            self._stop.wait(0.05)

    def _mount_new(self) -> None:
        if not self.cluster.work.exists():
            return
        for directory in self.cluster.work.iterdir():
            executor_id = directory.name
            if not executor_id.isdigit() or executor_id in self.mounted or executor_id in self.skipped:
                continue
            target = directory / "kstate-state"
            if target.exists():
                self.skipped.add(executor_id)  # lost the race: its first task was faster
                log.warning("executor %s's state directory existed before the tmpfs was mounted", executor_id)
                continue
            target.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs", str(target)], check=True)
            self.mounted[executor_id] = target
            log.info("executor %s: state on a %d MiB tmpfs", executor_id, self.size_mb)

    def _unmount_gone(self) -> None:
        live = {e.id for e in self.cluster.executors()}
        self._seen_alive |= live
        for executor_id in [e for e in self.mounted if e in self._seen_alive and e not in live]:
            self._unmount(self.mounted.pop(executor_id))
            self.skipped.add(executor_id)

    @staticmethod
    def _unmount(directory: Path) -> None:
        subprocess.run(["umount", "-l", str(directory)], check=False)

    def used_bytes(self) -> dict[str, int]:
        """Bytes of state on each live executor's tmpfs, ballast excluded."""
        out = {}
        for executor_id, directory in list(self.mounted.items()):
            try:
                usage = shutil.disk_usage(directory)
                ballast = directory / self.BALLAST
                out[executor_id] = usage.used - (ballast.stat().st_blocks * 512 if ballast.exists() else 0)
            except OSError:
                continue
        return out

    def fill(self, executor_id: str) -> Path:
        """Fills executor ``executor_id``'s state disk to the last 16 KiB; returns the ballast."""
        ballast = self.mounted[executor_id] / self.BALLAST
        with open(ballast, "wb") as file:
            for _ in range(20):  # the executor writes meanwhile: ask for less until it fits
                try:
                    os.posix_fallocate(file.fileno(), 0, max(0, shutil.disk_usage(ballast.parent).free - 16 * 1024))
                    break
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
        return ballast


def wait_until(condition, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not in {timeout} s")
        time.sleep(0.1)
