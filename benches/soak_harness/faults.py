"""The soak's faults: a seeded schedule of kinds per file, and the actions that inflict them on
real processes, disks and the object store's proxy. Each fault is counted when it took effect."""

from __future__ import annotations

import collections
import logging
import os
import random
import signal
import threading

from .cluster import Cluster, TmpfsStateDirs, is_python_worker
from .fault_proxy import FaultProxy

log = logging.getLogger("soak.faults")

KILL_EXECUTOR = "kill_executor"
KILL_WORKER_PUBLISHING = "kill_worker_publishing"
KILL_WORKER_COMMITTING = "kill_worker_committing"
RESTART_QUERIES = "restart_queries"
FULL_STATE_DIR = "full_state_dir"
STORAGE_OUTAGE = "storage_outage"
KINDS = (KILL_EXECUTOR, KILL_WORKER_PUBLISHING, KILL_WORKER_COMMITTING, RESTART_QUERIES, FULL_STATE_DIR, STORAGE_OUTAGE)


def schedule(
    files: int, seed: int, block: int = 100, warmup: int = 3, extra_rate: float = 0.03
) -> dict[int, list[str]]:
    """Faults per file index: every kind once in each block of ``block`` files (the first
    starting after ``warmup``), at seeded random files, plus each file an extra fault of a random
    kind with probability ``extra_rate`` (so faults overlap now and then)."""
    rng = random.Random(seed)
    out: dict[int, list[str]] = collections.defaultdict(list)
    for start in range(warmup, files, block):
        end = min(files, start + block)
        if end - start < len(KINDS):
            break
        for index, kind in zip(rng.sample(range(start, end), len(KINDS)), rng.sample(KINDS, len(KINDS))):
            out[index].append(kind)
    for index in range(warmup, files):
        if rng.random() < extra_rate:
            out[index].append(rng.choice(KINDS))
    return dict(out)


class Faults:
    """Inflicts faults on the cluster, its state disks and the object store's proxy."""

    def __init__(
        self, cluster: Cluster, disks: TmpfsStateDirs, proxy: FaultProxy, seed: int, outage_seconds: tuple[float, ...]
    ):
        self.cluster, self.disks, self.proxy = cluster, disks, proxy
        self.rng = random.Random(seed + 1)
        self.outage_seconds = outage_seconds
        self.happened: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def _count(self, kind: str) -> None:
        with self._lock:
            self.happened[kind] += 1
        log.info("fault: %s", kind)

    def later(self, action) -> None:
        """Runs ``action`` 0.2-1.5 s from now, so that it lands in the middle of a batch."""
        timer = threading.Timer(self.rng.uniform(0.2, 1.5), action)
        timer.daemon = True
        timer.start()

    def kill_executor(self) -> None:
        executors = self.cluster.executors()
        if not executors:
            log.warning("no executor to kill")
            return
        victim = self.rng.choice(executors)
        os.kill(victim.pid, signal.SIGKILL)
        self._count(KILL_EXECUTOR)

    def kill_worker_at(self, kind: str) -> None:
        """SIGKILLs the Python worker that makes the next matching request to the object store:
        a changelog object's upload (publishing) or, once the store answered, the batch log
        entry's (the commit's publication point, before RocksDB's commit)."""
        marker, after = ("-changelog-", False) if kind == KILL_WORKER_PUBLISHING else ("kstate-batches-", True)

        def matches(method: str, path: str) -> bool:
            return method == "PUT" and marker in path

        def kill(pid: int | None) -> None:
            if pid is None or not is_python_worker(pid):
                log.info("%s: request from pid %s, not a Python worker; waiting for the next", kind, pid)
                self.proxy.intercept(matches, kill, after_forward=after)
                return
            os.kill(pid, signal.SIGKILL)
            self._count(kind)

        self.proxy.intercept(matches, kill, after_forward=after)

    def fill_state_dir(self, release_after: float) -> None:
        """Fills one live executor's state disk for ``release_after`` seconds."""
        live = {e.id for e in self.cluster.executors()}
        candidates = [e for e in self.disks.mounted if e in live]
        if not candidates:
            log.warning("no executor state disk to fill")
            return
        ballast = self.disks.fill(self.rng.choice(candidates))
        self._count(FULL_STATE_DIR)
        timer = threading.Timer(release_after, lambda: ballast.unlink(missing_ok=True))
        timer.daemon = True
        timer.start()

    def storage_outage(self) -> None:
        self.proxy.outage(self.outage_seconds[self.happened[STORAGE_OUTAGE] % len(self.outage_seconds)])
        self._count(STORAGE_OUTAGE)

    def restarted(self) -> None:
        self._count(RESTART_QUERIES)
