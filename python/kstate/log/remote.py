"""A changelog partition kept on an object store: ``changelog.dir`` given as a URL
(``s3://bucket/prefix``, ``file:///mnt/shared``, anything fsspec reaches). The remote log is the
source of truth, shared by every machine; a store's local changelog directory is a cache of it.

Layout: ``<url>/<topic>-<partition>/`` holds immutable objects, each a Kafka v1 segment file
(message sets with their offsets) named by 20-digit offsets:

- ``<first>.log`` holds one commit: offsets from ``first`` up to the next object's first - 1 (the
  newest: up to its last record). It is created exclusively, and ``first`` is the only thing two
  attempts of the same commit surely agree on (their record counts may differ), so the first
  writer wins and the second gets ``CommitConflictError``.
- ``<first>-<last>.log`` holds what compaction kept of the objects covering ``first..=last``.

Reading (:func:`resolve`) starts at the lowest offset and, at each offset, takes the compacted
object covering it that reaches furthest, else the commit object starting there. Compaction
writes its objects before deleting what they replace, so a reader at any moment, or after a
crash part-way, finds the same records: never a gap, never a record twice. An object the walk
does not take is covered by a compacted one and is garbage that the next compaction deletes.

A commit object a writer creates where compaction had already deleted the real one (a writer so
far behind that its offset was compacted away) is such garbage: publishing checks, after the
create, that the walk takes the new object, and raises ``CommitConflictError`` if not.

History that snapshots hold (``kstate.log.snapshot_retention``) is deleted from the start
(:meth:`RemoteChangelog.delete_before`), oldest first, garbage below the new start before the
log's own objects, so that the walk from the lowest remaining offset is the log at every moment.
The log then starts past offset 0, which nothing else does to a remote log: a store that needs
records below the start cannot catch up from it (``ChangelogTruncatedError``).
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kstate import _core
from kstate.errors import ChangelogTruncatedError, CommitConflictError, CorruptedDataError, RemoteStorageError
from kstate.log.object_store import ObjectStore

log = logging.getLogger("kstate.log.remote")

_NAME = re.compile(r"^(\d{20})(?:-(\d{20}))?\.log$")
# A concurrent compaction may delete objects a reader listed a moment ago: list again.
_FETCH_ATTEMPTS = 3
COMPACT_AFTER_COMMITS = 100
"""Commit objects a changelog gathers after its last compacted one before a commit compacts it."""
MIN_OBJECTS_TO_MERGE = 2
"""Objects a compaction must merge to run at all (without garbage to delete): one alone merges
into itself."""
KEEP_NEWEST_COMMITS = 4
"""Commit objects a commit's compaction leaves whole: kstate.spark reads the records of the
batches just before one it replays after a restart (Spark's watermarks of that batch), so those
must keep every record, not only each key's latest."""


def object_name(first: int, last: int | None = None) -> str:
    """``<first>.log`` for a commit, ``<first>-<last>.log`` for a compacted object."""
    return f"{first:020d}.log" if last is None else f"{first:020d}-{last:020d}.log"


@dataclass(frozen=True)
class LogObject:
    """An object of the remote log: ``last`` is ``None`` for a commit object (its end follows
    from the next object) and the named last offset for a compacted one."""

    name: str
    first: int
    last: int | None
    size: int

    @classmethod
    def parse(cls, name: str, size: int) -> LogObject | None:
        """The object a file name denotes; ``None`` for any other file."""
        match = _NAME.match(name)
        if match is None:
            return None
        first, last = int(match.group(1)), None if match.group(2) is None else int(match.group(2))
        if last is not None and last < first:
            return None
        return cls(name, first, last, size)


@dataclass(frozen=True)
class Link:
    """An object as part of the log: offsets ``first..=last`` (``last`` is ``None`` for the
    newest commit object, which ends at its last record)."""

    object: LogObject
    first: int
    last: int | None

    def compacted_over(self, offset: int) -> bool:
        """Whether this is a compacted object that ``offset`` lies inside: a state at ``offset``
        cannot continue with its records (the compaction may have dropped tombstones of keys
        that state holds)."""
        return self.object.last is not None and self.first <= offset < self.object.last


def resolve(objects: Iterable[LogObject]) -> list[Link]:
    """The objects that make up the log, oldest first (see the module docstring). Raises
    ``CorruptedDataError`` when an object lies past an offset no object holds (a hole)."""
    objects = list(objects)
    commits = {o.first: o for o in objects if o.last is None}
    compacted = [o for o in objects if o.last is not None]
    starts = sorted({o.first for o in objects})
    chain: list[Link] = []
    position = starts[0] if starts else 0
    while True:
        covering = [o for o in compacted if o.first <= position <= o.last]  # type: ignore[operator]
        if covering:
            best = max(covering, key=lambda o: (o.last, o.first))
            chain.append(Link(best, best.first, best.last))
            position = best.last + 1  # type: ignore[operator]
            continue
        commit = commits.get(position)
        if commit is None:
            break
        later = bisect.bisect_right(starts, position)
        last = starts[later] - 1 if later < len(starts) else None
        chain.append(Link(commit, position, last))
        if last is None:
            return chain
        position = last + 1
    stray = [o.name for o in objects if o.first >= position]
    if stray:
        raise CorruptedDataError(f"changelog objects {stray} lie past offset {position}, which no object holds")
    return chain


class StoreBehindCompaction(Exception):
    """:meth:`RemoteChangelog.sync` found that the store holds part of what a compacted object
    replaced. It cannot catch up record by record (compaction may have dropped tombstones of
    keys it holds), so it must be restored from scratch."""


class CacheOfRemote(Protocol):
    """What syncing needs from the store with the local cache (the native store)."""

    def changelog_range(self) -> tuple[int, int | None]: ...

    def committed_offset(self) -> int | None: ...

    def add_published(self, segment_path: str, first: int, last: int | None, now_ms: int) -> tuple[int, int, int]: ...


@dataclass(frozen=True)
class SyncReport:
    """What :meth:`RemoteChangelog.sync` fetched."""

    objects: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class CompactionReport:
    """What :meth:`RemoteChangelog.compact` did."""

    objects_before: int
    objects_after: int
    objects_merged: int
    objects_written: int
    objects_deleted: int
    distinct_keys: int = 0
    records_read: int = 0
    superseded_removed: int = 0
    tombstones_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    seconds: float = 0.0


class RemoteChangelog:
    """One changelog partition at ``<url>/<topic>-<partition>/``."""

    def __init__(self, url: str, topic: str, partition: int, storage_options: Mapping[str, Any] | None = None):
        self.store = ObjectStore(url, storage_options)
        self.topic = topic
        self.partition = partition
        self.directory = f"{topic}-{partition}"
        self.location = f"{self.store.url}/{self.directory}"
        self._published_chain: list[Link] = []  # the log as the last publish found it

    def list(self) -> list[LogObject]:
        """The objects there are now, by first offset."""
        listed = self.store.list(self.directory)
        found = (LogObject.parse(name, size) for name, size in listed.items())
        return sorted((o for o in found if o is not None), key=lambda o: (o.first, o.last is not None, o.last))

    def object_key(self, name: str) -> str:
        return f"{self.directory}/{name}"

    # -- writing ---------------------------------------------------------------------------------

    def publish(self, first: int, last: int, segment_path: str) -> None:
        """Publishes one commit (offsets ``first..=last``, the segment file at
        ``segment_path``) as ``<first>.log``; the store's commit calls this. Raises
        ``CommitConflictError`` if another writer published at ``first``."""
        name = object_name(first)
        try:
            self.store.create(self.object_key(name), segment_path)
        except FileExistsError:
            raise CommitConflictError(
                f"changelog {self.location}: another writer published offset {first} first"
            ) from None
        chain = resolve(self.list())
        if not any(link.object.name == name for link in chain):
            self.store.delete(self.object_key(name))
            raise CommitConflictError(
                f"changelog {self.location}: offset {first} was published and compacted before this "
                f"commit; the writer is behind"
            )
        self._published_chain = chain
        log.debug("published offsets %d..%d to %s/%s", first, last, self.location, name)

    def wants_compaction(self, config: Mapping[str, Any] | None = None) -> bool:
        """Whether the log, as the last publish found it, is due for :meth:`compact`, by Kafka's
        cleaner rule: the commit objects since the last compacted one (the ``KEEP_NEWEST_COMMITS``
        newest aside, which it leaves whole) hold at least ``min.cleanable.dirty.ratio`` (default 0.5) of
        the bytes that would merge, and there are at least ``COMPACT_AFTER_COMMITS`` of them (as
        Kafka cleans only segments no longer written). So the log stays within about twice its
        compacted size plus that many commits, and each byte is rewritten a bounded number of
        times."""
        chain = self._published_chain[:-KEEP_NEWEST_COMMITS]
        compacted = [i for i, link in enumerate(chain) if link.object.last is not None]
        dirty = chain[compacted[-1] + 1 :] if compacted else chain
        if len(dirty) < COMPACT_AFTER_COMMITS:
            return False
        ratio = float((config or {}).get("min.cleanable.dirty.ratio", 0.5))
        return sum(link.object.size for link in dirty) >= ratio * sum(link.object.size for link in chain)

    def retract_after(self, offset: int | None) -> list[str]:
        """Deletes the commit objects starting after ``offset`` (``None``: all of them): commits
        published but never recorded (kstate.spark voids their batch position first, so no
        attempt can record them any more). Returns the names deleted."""
        floor = -1 if offset is None else offset
        doomed = [o.name for o in self.list() if o.last is None and o.first > floor]
        for name in doomed:
            self.store.delete(self.object_key(name))
        if doomed:
            log.warning(
                "changelog %s: retracted %d unrecorded commit objects after offset %s",
                self.location,
                len(doomed),
                offset,
            )
        return doomed

    def delete_before(self, offset: int) -> list[str]:
        """Deletes the objects holding only offsets below ``offset`` (history that snapshots
        hold), never the newest: first the garbage starting below the new start, then the log's
        objects oldest first, so a crash part-way leaves a log that starts later, never one with
        a hole or one a garbage object starts. Returns the names deleted."""
        objects = self.list()
        chain = resolve(objects)
        below = [link for link in chain if link.last is not None and link.last < offset]
        if not below:
            return []
        start = chain[len(below)].first
        taken = {link.object.name for link in chain}
        garbage = [o.name for o in objects if o.name not in taken and o.first < start]
        self.store.delete_many([self.object_key(name) for name in garbage])
        for link in below:
            self.store.delete(self.object_key(link.object.name))
        return [*garbage, *(link.object.name for link in below)]

    # -- reading ---------------------------------------------------------------------------------

    def sync(self, cache: CacheOfRemote, fetch_path: str | os.PathLike[str], until: int | None = None) -> SyncReport:
        """Adds to the store's local cache every object it and the store lack, downloading
        each to ``fetch_path`` first. Afterwards the cache holds the remote log's end, or with
        ``until`` the objects starting at or before that offset (kstate.spark: what a batch log
        entry recorded; later objects may be a live attempt's that will not count)."""
        started = time.monotonic()
        objects = fetched_bytes = 0
        for attempt in range(_FETCH_ATTEMPTS):
            needed = [link for link in self._needed(cache) if until is None or link.first <= until]
            try:
                for link, size in self._fetch_each(needed, fetch_path):
                    cache.add_published(str(fetch_path), link.first, link.last, _now_ms())
                    objects += 1
                    fetched_bytes += size
                break
            except FileNotFoundError:
                if attempt + 1 == _FETCH_ATTEMPTS:
                    raise RemoteStorageError(
                        f"changelog {self.location}: objects kept disappearing while fetching"
                    ) from None
                log.info("changelog %s changed while fetching (a compaction ran); listing again", self.location)
            finally:
                Path(fetch_path).unlink(missing_ok=True)
        seconds = time.monotonic() - started
        if objects:
            log.info(
                "Changelog %s: fetched %d objects (%d bytes) in %.2f s",
                self.location,
                objects,
                fetched_bytes,
                seconds,
            )
        return SyncReport(objects, fetched_bytes, seconds)

    def _needed(self, cache: CacheOfRemote) -> list[Link]:
        """The links holding offsets past what the cache and the store have. The cache holds
        whole objects; it serves the store only if it starts at or below the store's next
        offset (else it restarts where the first needed object starts)."""
        start, published = cache.changelog_range()
        committed = cache.committed_offset()
        store_end = -1 if committed is None else committed
        cache_end = -1 if published is None else published
        if store_end + 1 < start:
            cache_end = -1
        have = max(cache_end, store_end)
        chain = resolve(self.list())
        if not chain and have >= 0:
            raise CorruptedDataError(
                f"changelog {self.location} is empty but the store has offsets up to {have}; "
                "delete the store's state to start over"
            )
        if chain and chain[0].first > have + 1:
            raise ChangelogTruncatedError(
                f"changelog {self.location} starts at offset {chain[0].first}: its history before it was deleted "
                f"because snapshots hold it, and the store has offsets only up to {have}; it must start from a "
                "snapshot (none could be loaded)"
            )
        needed = [link for link in chain if (link.last > have if link.last is not None else link.first > cache_end)]
        for link in needed:
            if link.compacted_over(store_end):
                raise StoreBehindCompaction(
                    f"it is at offset {store_end}, inside the compacted object {link.object.name} of {self.location}"
                )
        return needed

    def _fetch_each(self, links: list[Link], fetch_path: str | os.PathLike[str]) -> Iterable[tuple[Link, int]]:
        total = sum(link.object.size for link in links)
        bar = None
        if total > 0:
            from tqdm import tqdm

            bar = tqdm(total=total, desc=f"fetching {self.directory}", unit="B", unit_scale=True, disable=None)
        try:
            for link in links:
                self.store.fetch(self.object_key(link.object.name), str(fetch_path))
                if bar is not None:
                    bar.update(link.object.size)
                yield link, link.object.size
        finally:
            if bar is not None:
                bar.close()

    # -- compaction ------------------------------------------------------------------------------

    def compact(
        self,
        config: Mapping[str, str] | None = None,
        *,
        min_objects: int = MIN_OBJECTS_TO_MERGE,
        work_dir: str | os.PathLike[str] | None = None,
        now_ms: int | None = None,
        keep_newest: int = 1,
    ) -> CompactionReport:
        """Merges every object but the ``keep_newest`` newest into compacted objects (the latest
        record per key, counting the newest too; tombstones kept ``delete.retention.ms``, offsets
        kept, groups up to ``segment.bytes``), then deletes what they replace and any garbage.
        Safe to run while writers commit, and to crash part-way (see the module docstring). Does
        nothing while fewer than ``min_objects`` objects would merge and there is no garbage."""
        started = time.monotonic()
        now_ms = _now_ms() if now_ms is None else now_ms
        config = {str(k): str(v) for k, v in (config or {}).items()}
        objects = self.list()
        chain = resolve(objects)
        taken = {link.object.name for link in chain}
        garbage = [o for o in objects if o.name not in taken]
        keep = max(keep_newest, 1)
        inputs, newest = chain[:-keep], chain[-keep:]
        log.info(
            "Compacting %s: %d objects, %d in the log, %d garbage",
            self.location,
            len(objects),
            len(chain),
            len(garbage),
        )
        merging = len(inputs) >= max(min_objects, 1)
        found: dict[str, int] = {}
        written: list[str] = []
        deleting = [o.name for o in garbage]
        if merging:
            with tempfile.TemporaryDirectory(dir=work_dir, prefix="kstate-compaction-") as scratch:
                outputs, found = self._merge(inputs, newest, config, now_ms, Path(scratch))
                names = {o.name for o in objects}
                for first, last, path, _ in outputs:
                    name = object_name(first, last)
                    if name not in names:
                        try:
                            self.store.create(self.object_key(name), path)
                            written.append(name)
                        except FileExistsError:
                            pass  # a concurrent compaction wrote the same range
                    names.add(name)
                kept = {object_name(first, last) for first, last, _, _ in outputs}
                deleting += [link.object.name for link in inputs if link.object.name not in kept]
        for name in deleting:
            self.store.delete(self.object_key(name))
        report = CompactionReport(
            objects_before=len(objects),
            objects_after=len(objects) + len(written) - len(deleting),
            objects_merged=len(inputs) if merging else 0,
            objects_written=len(written),
            objects_deleted=len(deleting),
            distinct_keys=found.get("distinct_keys", 0),
            records_read=found.get("records_read", 0),
            superseded_removed=found.get("superseded_removed", 0),
            tombstones_removed=found.get("tombstones_removed", 0),
            bytes_before=found.get("bytes_before", 0),
            bytes_after=found.get("bytes_after", 0),
            seconds=time.monotonic() - started,
        )
        log.info("Compacted %s: %s", self.location, report)
        return report

    def _merge(
        self, inputs: list[Link], newest: list[Link], config: Mapping[str, str], now_ms: int, scratch: Path
    ) -> tuple[list[tuple[int, int, str, int]], dict[str, int]]:
        downloads = scratch / "objects"
        downloads.mkdir()
        merged = scratch / "compacted"
        merged.mkdir()

        def fetched(links: list[Link]) -> list[tuple[int, int | None, str]]:
            out = []
            for link in links:
                path = downloads / link.object.name
                self.store.fetch(self.object_key(link.object.name), str(path))
                out.append((link.first, link.last, str(path)))
            return out

        try:
            sources, newer = fetched(inputs), fetched(newest)
        except FileNotFoundError:
            raise RemoteStorageError(
                f"changelog {self.location}: objects disappeared during compaction (another one ran?)"
            ) from None
        log.info("Compacting %s: fetched %d objects, merging", self.location, len(sources) + len(newer))
        return _core.compact_changelog_objects(
            sources, newer, config, now_ms, str(merged), _progress_logger(f"compacting {self.location}")
        )


def compact(
    url: str,
    topic: str,
    partition: int,
    config: Mapping[str, Any] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    min_objects: int = MIN_OBJECTS_TO_MERGE,
    work_dir: str | os.PathLike[str] | None = None,
) -> CompactionReport:
    """Compacts the changelog partition ``<url>/<topic>-<partition>/`` (see
    :meth:`RemoteChangelog.compact`). ``config`` holds the topic configs that apply
    (``segment.bytes``, ``delete.retention.ms``)."""
    remote = RemoteChangelog(url, topic, partition, storage_options)
    return remote.compact(config, min_objects=min_objects, work_dir=work_dir)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


_LONG_COMPACTION_BYTES = 64 * 1024 * 1024
"""Compactions reading this much log their progress every 10%."""


def _progress_logger(what: str) -> Any:
    reported = [-1]

    def report(done: int, total: int) -> None:
        decile = (10 * done) // max(total, 1)
        if total >= _LONG_COMPACTION_BYTES and decile != reported[0]:
            reported[0] = decile
            log.info("%s: %d of %d bytes read", what, done, total)

    return report
