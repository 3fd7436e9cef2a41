"""Following one partition: keeping its copy at the state its batch log publishes.

Each refresh reads the partition's batch log head (without its lock) and picks the entry to
stand on: the head, or with an aligned replica the newest entry of a batch every partition has
finished (see ``kstate.spark.serving.replica``). The copy then catches up: the records each
store's changelog published after the copy's offset, up to the entry's, are staged and, under the
replica's write lock, committed together (``PartitionCopy``). Rollbacks need nothing special: a
rolled-back batch's undo is published as new records, and the entry restating the batch before
names offsets past them.

A store read from scratch (a new copy, a store the query added) starts from its newest usable
snapshot at or below the head's offset (``kstate.log.history``; with none, from the changelog's
start, which is ``ChangelogTruncatedError`` once history below the snapshots was deleted), then
reads the changelog after it up to the head, never to an older entry: a compaction keeps each
key's latest record as of when it ran, so what it kept holds the state at the head it ran after,
not at the offsets of an older entry. An aligned copy that stands on an older entry then takes
the head's state back to it with the undo files of the entries in between, as a rollback does.

A copy that fell behind what is kept is rebuilt from scratch in a new directory while the old one
keeps serving (its state is still exactly the batch it names), and replaces it once complete,
with a warning saying why: records after its offsets were compacted or deleted (by retention,
or below the snapshots that hold them: ``BehindHistory``), or the batch log no longer holds the
entry it stands on (trimmed, or the log was started over), so nothing vouches for it being a
prefix of the current history. A read that raced a compaction or the query's progress
(``ChangelogMoved``) is dropped and redone against a newer head.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kstate.errors import ProcessorStateError
from kstate.spark.protocol.batch_log import EMPTY_STATE, BatchEntry, BatchLogReader, RemoteBatchLog, peek_head
from kstate.spark.protocol.exactly_once import StateLayout
from kstate.spark.protocol.published_changelog import (
    BehindHistory,
    ChangelogMoved,
    published_changelog,
    store_history,
)
from kstate.spark.protocol.undo import RemoteUndoFiles, UndoFiles
from kstate.spark.serving.partition_copy import (
    PartitionCopy,
    delete_copy,
    next_copy_directory,
    served_copy_directory,
)

log = logging.getLogger("kstate.serving")

MOVED_ATTEMPTS = 5
"""Reads of a partition that raced a compaction before a refresh gives up on it (compactions
are rare: each one makes the next race less likely, the log being smaller)."""


@dataclass
class Update:
    """What a refresh prepared for a partition: ``copy`` (``None``: nothing to commit) holds the
    state of ``entry`` once committed; ``through`` is the newest batch that state is known to be
    the partition's; ``rebuilt``: ``copy`` is a new copy, committed, that replaces the old."""

    copy: PartitionCopy | None
    entry: BatchEntry | None
    through: int
    rebuilt: bool = False


class PartitionFollower:
    """The copy of partition ``partition`` (in ``directory``) of the state ``layout`` locates."""

    def __init__(
        self,
        layout: StateLayout,
        partition: int,
        directory: Path,
        stores: Mapping[str, Mapping[str, Any]],
        serdes: Mapping[str, tuple[Any, Any]],
    ):
        self.layout = layout
        self.partition = partition
        self.directory = directory
        self._stores = dict(stores)
        self._serdes = serdes
        self.copy = self._open_copy(served_copy_directory(directory))
        self.through = EMPTY_STATE
        """The newest batch whose state the copy is known to hold (meaningful once ``servable``)."""
        self.servable = False
        """Whether the copy holds the state of the entry it names: after the first update."""
        self.head_batch: int | None = None
        """The batch id of the head the last refresh read (``None``: none read yet)."""

    def _open_copy(self, directory: Path) -> PartitionCopy:
        return PartitionCopy.open(directory, self.partition, self.layout.application_id, self._stores, self._serdes)

    def add_stores(self, stores: Mapping[str, Mapping[str, Any]]) -> None:
        """Stores the partitioning record names now and the copy lacks (a query that added
        some): opened empty, caught up by the next refresh."""
        self._stores.update(stores)
        self.copy.add_stores(stores, self._serdes)

    def _batch_log(self) -> BatchLogReader | RemoteBatchLog:
        name = self.layout.batch_log_name(self.partition)
        if self.layout.changelog_url is not None:
            return RemoteBatchLog(self.layout.changelog_url, name, self.layout.storage_options)
        return BatchLogReader(self.layout.batch_log_dir(self.partition))

    def published_batch_hint(self) -> int | None:
        """A batch the partition has published, cheaply: a directory's ``.head`` hint (a lower
        bound, written after each append); ``None`` where there is none."""
        if self.layout.changelog_url is not None:
            return None
        hint = peek_head(self.layout.batch_log_dir(self.partition))
        return None if hint is None else hint[1]

    def published_batch(self) -> int:
        """The batch id of the partition's head now (``EMPTY_STATE`` before any)."""
        head = self._batch_log().head()
        return EMPTY_STATE if head is None else head.batch_id

    # -- preparing (no lock: reads keep being served) ---------------------------------------------

    def prepare(self, published: int, aligned: bool) -> Update | None:
        """Reads the head and stages what takes the copy to the entry to stand on (rebuilding
        the copy if it fell behind); ``None``: the copy stays as it is (no entry to stand on
        now, or the copy is past it). ``published``: the newest batch id any partition had
        published before this read (every earlier batch is finished everywhere)."""
        for _ in range(MOVED_ATTEMPTS):
            reading = self._start_reading(published, aligned)
            if reading is None:
                return None
            try:
                return self._catch_up(reading)
            except ChangelogMoved as moved:
                self.copy.discard()
                log.info("partition %d: %s; reading again", self.partition, moved)
            except BehindHistory as behind:
                self.copy.discard()
                log.warning(
                    "partition %d (%s): the copy at batch %s fell behind what the changelogs keep (%s); "
                    "rebuilding it from scratch",
                    self.partition,
                    self.layout.application_id,
                    "(none)" if self.copy.entry is None else self.copy.entry.batch_id,
                    behind,
                )
                return self._rebuild(published, aligned)
            except BaseException:
                self.copy.discard()  # the copy keeps serving the entry it holds, nothing staged
                raise
        raise self._kept_moving()

    def _start_reading(self, published: int, aligned: bool) -> _Reading | None:
        """The changelogs (watched first), the head and the entry to stand on; ``None``: none
        to stand on now (aligned, and its entry trimmed or a rescale's history)."""
        changelogs = {name: published_changelog(self.layout, name, self.partition) for name in self._stores}
        watched = {name: changelog.watch() for name, changelog in changelogs.items()}
        entries = self._batch_log()
        head = entries.head()
        self.head_batch = EMPTY_STATE if head is None else head.batch_id
        if not aligned:
            through = max(self.head_batch, published - 1)
            return _Reading(entries, head, head, through, [], changelogs, watched)
        finished = published - 1
        entry, newer = head, []
        while entry is not None and entry.batch_id > finished:
            newer.append(entry)
            try:
                entry = None if entry.previous is None else entries.entry(entry.previous)
            except ProcessorStateError:
                return None  # trimmed: the next refresh stands on a newer batch
        if entry is not None and not entry.holds_state:
            return None
        through = newer[-1].batch_id - 1 if newer else max(EMPTY_STATE if entry is None else entry.batch_id, finished)
        return _Reading(entries, head, entry, through, newer, changelogs, watched)

    def _catch_up(self, reading: _Reading) -> Update | None:
        copy, target = self.copy, reading.target
        if copy.entry is not None:
            try:
                still = reading.entries.entry(copy.entry.position)
            except ProcessorStateError:
                still = None
            if still != copy.entry:
                raise BehindHistory(f"the batch log no longer holds the entry at {copy.entry.position}")
        if copy.complete and target == copy.entry:
            return Update(None, copy.entry, reading.through)
        if (copy.complete and _position(target) < _position(copy.entry)) or not self._stage(copy, reading):
            copy.discard()  # the copy (or a store, after a crash between commits) is past the target
            return None
        return Update(copy, target, reading.through)

    def _stage(self, copy: PartitionCopy, reading: _Reading) -> bool:
        """Stages each store's records up to the target (see the module docstring); ``False``
        if a store already stands past it."""
        offsets = {} if reading.target is None else reading.target.offsets
        for name, changelog in reading.changelogs.items():
            after = copy.offset(name)
            if after is None:
                head_offset = None if reading.head is None else reading.head.offsets.get(name)
                if head_offset is not None:
                    history = store_history(self.layout, name, self.partition)
                    snapshot = copy.stage_snapshot(name, history, head_offset)
                    copy.stage(name, changelog.records(None, head_offset, reading.watched[name], snapshot))
                for entry in reading.newer:  # newest first, back to the target's state
                    if name in entry.undo:
                        copy.stage_stored(name, self._undo(entry.undo[name]))
                continue
            until = offsets.get(name)
            if until is None or after >= until:
                if after != until:
                    return False
                continue
            copy.stage(name, changelog.records(after, until, reading.watched[name]))
        return True

    def _undo(self, name: str) -> Any:
        undo = (
            RemoteUndoFiles(
                self.layout.changelog_url, self.layout.undo_name(self.partition), [], self.layout.storage_options
            )
            if self.layout.changelog_url is not None
            else UndoFiles(self.layout.undo_dir(self.partition))
        )
        try:
            return undo.read(name)
        except ProcessorStateError as gone:
            raise ChangelogMoved(f"the query moved on: {gone}") from None

    def _rebuild(self, published: int, aligned: bool) -> Update | None:
        """A new copy, from scratch, committed at the entry to stand on (the old one serves
        meanwhile)."""
        directory = next_copy_directory(self.directory)
        for _ in range(MOVED_ATTEMPTS):
            copy = self._open_copy(directory)
            try:
                reading = self._start_reading(published, aligned)
                if reading is None:
                    copy.close()
                    delete_copy(directory)
                    return None
                self._stage(copy, reading)
                copy.commit(reading.target)
                return Update(copy, reading.target, reading.through, rebuilt=True)
            except ChangelogMoved as moved:
                log.info("partition %d: %s; rebuilding again", self.partition, moved)
                copy.close()
                delete_copy(directory)
            except BaseException:
                copy.close()
                delete_copy(directory)
                raise
        raise self._kept_moving()

    def _kept_moving(self) -> ChangelogMoved:
        return ChangelogMoved(
            f"partition {self.partition}: the changelogs kept changing while read ({MOVED_ATTEMPTS} attempts)"
        )

    # -- applying (under the replica's write lock) -----------------------------------------------

    def apply(self, update: Update | None) -> Path | None:
        """Makes ``update`` what the partition serves (``None``: nothing changes); returns the
        directory of a copy it replaced, to delete once reads no longer use it."""
        replaced = None
        if update is None:
            return None
        if update.rebuilt:
            assert update.copy is not None
            old, self.copy = self.copy, update.copy
            old.close()
            replaced = old.directory
            log.warning(
                "partition %d (%s): serving the rebuilt copy at batch %s",
                self.partition,
                self.layout.application_id,
                EMPTY_STATE if update.entry is None else update.entry.batch_id,
            )
        elif update.copy is not None:
            update.copy.commit(update.entry)
        self.through = update.through
        self.servable = self.copy.complete
        return replaced

    def drop(self, update: Update | None) -> None:
        """Undoes ``update`` when it will not be applied (another partition's refresh failed):
        what it staged is dropped, a copy it rebuilt deleted."""
        if update is None or update.copy is None:
            return
        if update.rebuilt:
            update.copy.close()
            delete_copy(update.copy.directory)
        else:
            update.copy.discard()

    def close(self) -> None:
        self.copy.close()


@dataclass
class _Reading:
    """One attempt at catching a partition up: its batch log, the head read, the entry to stand
    on (``None``: the empty state), the newest batch that state is known to be the partition's
    (``through``), the entries after it up to the head (newest first), and the changelogs with
    what ``watch()`` noted of each before the head was read."""

    entries: BatchLogReader | RemoteBatchLog
    head: BatchEntry | None
    target: BatchEntry | None
    through: int
    newer: list[BatchEntry]
    changelogs: dict[str, Any]
    watched: dict[str, Any]


def _position(entry: BatchEntry | None) -> int:
    return -1 if entry is None else entry.position
