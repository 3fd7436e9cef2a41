"""When and where a store's snapshots are taken: after a commit, once ``minDeltasForSnapshot``
commits or ``minDeltaBytesForSnapshot`` changelog bytes have gathered since the last snapshot
(whichever comes first; Spark's option name for the count), on a thread of its own, so the next
commit never waits for an upload: it waits at most for the capture itself (a RocksDB
checkpoint: hard links, after a flush that runs before the commit lock is taken).

One snapshot at a time per store: a commit that finds the previous one still running leaves it
be, and when it ends it takes the next at once if the commits since made one due. A snapshot
that fails is logged and the counts start again; the commit it followed stands. ``close`` waits
for the running one.

The counts since the last snapshot are kept in a small file beside the store's local state
(``<capture dir>.due``), rewritten after each commit: in Spark a partition's next micro-batch
often runs in another Python worker of the executor, which opens the store anew, and counts kept
in memory alone would start again at every such move and never reach ``minDeltasForSnapshot``.
They drop only when a snapshot ends (published, or failed and logged): one that dies with its
process (a Python worker Spark stops) leaves them due, so the next commit on this machine takes
it. A machine without the file (new local state) counts from zero.

After each snapshot it publishes, the same thread collects what retention no longer keeps
(``kstate.log.snapshot_retention``, ``minBatchesToRetain``) and hands the offset the changelog
may now start at to ``on_history``; a failed collection is logged and the next one tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kstate.config import DEFAULT_MIN_BATCHES_TO_RETAIN
from kstate.log import snapshot_retention
from kstate.log.snapshots import Published, Snapshots, remove_tree

log = logging.getLogger("kstate.log.snapshots")

_BATCHES_KEPT = 64
"""Recent commits whose micro-batch a writer remembers."""


class SnapshotWriter:
    """Takes the snapshots of one store into ``snapshots``, capturing at ``capture_dir`` (a
    path on the store's file system that only this writer uses)."""

    def __init__(
        self,
        store_name: str,
        snapshots: Snapshots,
        capture_dir: str,
        kind: str,
        min_deltas: int | None,
        min_delta_bytes: int | None,
        min_batches_to_retain: int = DEFAULT_MIN_BATCHES_TO_RETAIN,
        on_history: Callable[[int], None] | None = None,
    ):
        self.store_name = store_name
        self.snapshots = snapshots
        self.capture_dir = capture_dir
        self.kind = kind
        self.min_deltas = min_deltas
        self.min_delta_bytes = min_delta_bytes
        self.last_published: Published | None = None
        """What the last snapshot this writer published copied."""
        self.failures = 0
        """Snapshots that failed (each logged)."""
        self.min_batches_to_retain = min_batches_to_retain
        self.on_history = on_history
        self.delete_delay = snapshot_retention.DELETE_DELAY_SECONDS
        """Seconds a file no kept snapshot names stays before a collection deletes it."""
        self.last_collected: snapshot_retention.Collected | None = None
        """What the last collection did."""
        self._manifests: dict[int, Any] = {}  # manifests read by collections, by offset
        self._counts_path = capture_dir + ".due"
        self._commits, self._bytes = _read_counts(self._counts_path)
        self._counts_lock = threading.Lock()  # the counts: commits add, a snapshot's end takes off
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one snapshot at a time, background or asked for
        self._earlier: Any = None  # the newest manifest published, once known
        self._earlier_read = False
        self._files: Any = None  # the native store's committed files (remembers table hashes)
        self._files_of: Any = None
        # The micro-batch of each recent commit by offset: a snapshot in the background
        # captures whatever commit is the last by then, not always the one that started it.
        self._batches: dict[int, int] = {}

    def _committed_files(self, native: Any) -> Any:
        # Made on the committing thread (the native store is not called from another one) and
        # kept while the native store is the same, so its table files are hashed once.
        if self._files_of is not native:
            self._files, self._files_of = native.committed_files(), native
        return self._files

    def committed(self, native: Any, changelog_bytes: int, batch_id: int | None = None) -> None:
        """Counts a commit of ``native`` (of micro-batch ``batch_id``, if any) that appended
        ``changelog_bytes`` to the changelog and starts a snapshot in the background when one is
        due."""
        if batch_id is not None:
            offset = native.committed_offset()
            if offset is not None:
                self._batches[offset] = batch_id
                if len(self._batches) > _BATCHES_KEPT:
                    del self._batches[min(self._batches)]
        with self._counts_lock:
            self._commits += 1
            self._bytes += changelog_bytes
            _write_counts(self._counts_path, self._commits, self._bytes)
            counted = (self._commits, self._bytes)
        if not self._due(*counted) or (self._thread is not None and self._thread.is_alive()):
            return
        files = self._committed_files(native)
        self._thread = threading.Thread(
            target=self._take_logged,
            args=(files, counted),
            name=f"kstate-snapshot-{self.store_name}",
            daemon=True,  # a process that exits leaves an unfinished upload, which no restore reads
        )
        self._thread.start()

    def _due(self, commits: int, changelog_bytes: int) -> bool:
        return (self.min_deltas is not None and commits >= self.min_deltas) or (
            self.min_delta_bytes is not None and changelog_bytes >= self.min_delta_bytes
        )

    def take(self, native: Any, batch_id: int | None = None) -> Published | None:
        """Takes and publishes a snapshot now, after one running finishes; ``None`` when there
        is nothing to publish (no commit yet, or the last snapshot holds this offset)."""
        files = self._committed_files(native)
        self.wait()
        return self._take(files, batch_id)

    def wait(self) -> None:
        """Waits for the snapshot running in the background, if any."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def _take_logged(self, files: Any, counted: tuple[int, int]) -> None:
        """Snapshots in the background; ``counted``: the counts that made one due, taken off
        when it ends. The commits made while it ran may make the next one due at once: it takes
        that one too (of the newest commit by then), so a query's last batches are not left to a
        commit that may never come."""
        while True:
            failed = False
            try:
                self._take(files, None)
            except Exception as error:  # a failed snapshot must not end the process: logged, retried later
                failed = True
                self.failures += 1
                log.warning(
                    "Store %s: snapshot to %s failed; the next one is taken after more commits: %s: %s",
                    self.store_name,
                    self.snapshots.location,
                    type(error).__name__,
                    error,
                )
            with self._counts_lock:
                self._commits = 0 if failed else max(self._commits - counted[0], 0)
                self._bytes = 0 if failed else max(self._bytes - counted[1], 0)
                _write_counts(self._counts_path, self._commits, self._bytes)
                counted = (self._commits, self._bytes)
            if failed or not self._due(*counted):
                return

    def _take(self, files: Any, batch_id: int | None) -> Published | None:
        """Captures and publishes; ``batch_id``: the micro-batch of the commit captured, else
        looked up by the offset captured."""
        with self._lock:
            started = time.monotonic()
            remove_tree(self.capture_dir)  # left by a process killed while capturing
            try:
                offset = files.capture(self.capture_dir)
                if offset is None:
                    return None
                earlier = self._earlier_manifest()
                if earlier is not None and earlier.offset == offset:
                    return None
                if batch_id is None:
                    batch_id = self._batches.get(offset)
                manifest, described = files.manifest(
                    self.capture_dir, offset, batch_id, self.kind, time.time_ns() // 1_000_000
                )
                published = self.snapshots.publish(self.capture_dir, manifest, earlier, self.delete_delay)
            finally:
                remove_tree(self.capture_dir)
            if published is None:
                location = self.snapshots.location
                log.info("Store %s: %s held a snapshot at offset %d already", self.store_name, location, offset)
                self._earlier = self.snapshots.read(offset)
                return None
            self._earlier = manifest
            self.last_published = published
            log.info(
                "Store %s: snapshot at offset %d%s published to %s in %.2f s: %d files, %.1f MiB, of which %d "
                "new (%.1f MiB; %.1f MiB hashed)",
                self.store_name,
                offset,
                "" if batch_id is None else f" (batch {batch_id})",
                self.snapshots.location,
                time.monotonic() - started,
                published.files,
                published.bytes / 2**20,
                published.files_copied,
                published.bytes_copied / 2**20,
                described["bytes_hashed"] / 2**20,
            )
            self._manifests[offset] = manifest
            self._collect()
            return published

    def _collect(self) -> None:
        """Deletes what retention no longer keeps, then passes on where the changelog may start."""
        try:
            collected = snapshot_retention.collect(
                self.snapshots, self.min_batches_to_retain, self.delete_delay, self._manifests
            )
            self.last_collected = collected
            if collected.history_start is not None and self.on_history is not None:
                self.on_history(collected.history_start)
        except Exception as error:  # a failed collection must not fail the snapshot: the next one tries again
            log.warning(
                "Store %s: collecting old snapshots and history at %s failed; the next snapshot tries again: %s: %s",
                self.store_name,
                self.snapshots.location,
                type(error).__name__,
                error,
            )

    def _earlier_manifest(self) -> Any:
        """The newest manifest published: this writer's last, or read once from the location."""
        if not self._earlier_read:
            self._earlier_read = True
            if self._earlier is None:
                self._earlier = self.snapshots.newest()
        return self._earlier


def _read_counts(path: str) -> tuple[int, int]:
    """``(commits, changelog bytes)`` since the last snapshot, as the last writer of this local
    state left them; ``(0, 0)`` without a readable file (a hint, not state: never an error)."""
    try:
        with open(path, encoding="ascii") as file:
            commits, changelog_bytes = file.read().split()
        return max(int(commits), 0), max(int(changelog_bytes), 0)
    except (OSError, ValueError):
        return 0, 0


def _write_counts(path: str, commits: int, changelog_bytes: int) -> None:
    """Rewrites the counts (no fsync: after a crash the counts may be a few commits behind)."""
    try:
        with open(path, "w", encoding="ascii") as file:
            file.write(f"{commits} {changelog_bytes}\n")
    except OSError as error:  # a full or read-only disk: the counts restart; the commit stands
        log.debug("Snapshot counts not kept at %s: %s", path, error)
