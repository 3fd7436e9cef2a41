"""Following one partition: keeping its copy at the state its batch log publishes.

Each refresh reads the partition's batch log head (without its lock) and picks the entry to
stand on: the head, or with an aligned replica the newest entry of a batch every partition has
finished (see ``kstate.spark.serving.replica``). The copy then catches up: the records each
store's changelog published after the copy's offset, up to the entry's, are staged and, under the
replica's write lock, committed together (``PartitionCopy``). Rollbacks need nothing special: a
rolled-back batch's undo is published as new records, and the entry restating the batch before
names offsets past them.

A copy that fell behind what is kept is rebuilt from scratch in a new directory while the old one
keeps serving (its state is still exactly the batch it names), and replaces it once complete,
with a warning saying why: records after its offsets were compacted or deleted
(``BehindHistory``), or the batch log no longer holds the entry it stands on (trimmed, or the
log was started over), so nothing vouches for it being a prefix of the current history. A read
that raced a compaction (``ChangelogMoved``) is dropped and redone against a newer head.
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
from kstate.spark.protocol.published_changelog import BehindHistory, ChangelogMoved, published_changelog
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

    def prepare(self, published: int, aligned: bool) -> Update:
        """Reads the head and stages what takes the copy to the entry to stand on (rebuilding
        the copy if it fell behind). ``published``: the newest batch id any partition had
        published before this read (every earlier batch is finished everywhere)."""
        for _ in range(MOVED_ATTEMPTS):
            changelogs = {name: published_changelog(self.layout, name, self.partition) for name in self._stores}
            watched = {name: changelog.watch() for name, changelog in changelogs.items()}
            entries = self._batch_log()
            head = entries.head()
            self.head_batch = EMPTY_STATE if head is None else head.batch_id
            target = self._target(entries, head, published, aligned)
            if target is None:
                return Update(None, self.copy.entry, self.through)
            entry, through = target
            try:
                return self._catch_up(entries, entry, through, changelogs, watched)
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
        raise ChangelogMoved(
            f"partition {self.partition}: the changelogs kept being compacted while read ({MOVED_ATTEMPTS} attempts)"
        )

    def _target(
        self, entries: BatchLogReader | RemoteBatchLog, head: BatchEntry | None, published: int, aligned: bool
    ) -> tuple[BatchEntry | None, int] | None:
        """``(entry to stand on, through)``; ``None``: no entry to stand on now (aligned, its
        entry trimmed or never published: a rescale's history)."""
        if not aligned:
            return head, max(EMPTY_STATE if head is None else head.batch_id, published - 1)
        finished = published - 1
        entry, later = head, None
        while entry is not None and entry.batch_id > finished:
            later = entry
            try:
                entry = None if entry.previous is None else entries.entry(entry.previous)
            except ProcessorStateError:
                return None  # trimmed: the next refresh stands on a newer batch
        if entry is not None and not entry.holds_state:
            return None
        through = max(EMPTY_STATE if entry is None else entry.batch_id, finished)
        return entry, through if later is None else later.batch_id - 1

    def _catch_up(
        self,
        entries: BatchLogReader | RemoteBatchLog,
        target: BatchEntry | None,
        through: int,
        changelogs: Mapping[str, Any],
        watched: Mapping[str, Any],
    ) -> Update:
        copy = self.copy
        if copy.entry is not None:
            try:
                still = entries.entry(copy.entry.position)
            except ProcessorStateError:
                still = None
            if still != copy.entry:
                raise BehindHistory(f"the batch log no longer holds the entry at {copy.entry.position}")
        if copy.complete and _position(target) <= _position(copy.entry):
            return Update(None, copy.entry, through if target == copy.entry else self.through)
        offsets = {} if target is None else target.offsets
        for name, changelog in changelogs.items():
            after, until = copy.offset(name), offsets.get(name)
            if until is None or (after is not None and after >= until):
                if after != until:  # the store is past the target: a newer one comes
                    copy.discard()
                    return Update(None, copy.entry, self.through)
                continue
            copy.stage(name, changelog.records(after, until, watched[name]))
        return Update(copy, target, through)

    def _rebuild(self, published: int, aligned: bool) -> Update:
        """A new copy, from scratch, committed at the entry to stand on (the old one serves
        meanwhile)."""
        directory = next_copy_directory(self.directory)
        for _ in range(MOVED_ATTEMPTS):
            copy = self._open_copy(directory)
            try:
                changelogs = {name: published_changelog(self.layout, name, self.partition) for name in self._stores}
                watched = {name: changelog.watch() for name, changelog in changelogs.items()}
                entries = self._batch_log()
                target = self._target(entries, entries.head(), published, aligned)
                if target is None:
                    copy.close()
                    delete_copy(directory)
                    return Update(None, self.copy.entry, self.through)
                entry, through = target
                for name, changelog in changelogs.items():
                    until = None if entry is None else entry.offsets.get(name)
                    if until is not None:
                        copy.stage(name, changelog.records(None, until, watched[name]))
                copy.commit(entry)
                return Update(copy, entry, through, rebuilt=True)
            except ChangelogMoved as moved:
                log.info("partition %d: %s; rebuilding again", self.partition, moved)
                copy.close()
                delete_copy(directory)
            except BaseException:
                copy.close()
                delete_copy(directory)
                raise
        raise ChangelogMoved(
            f"partition {self.partition}: the changelogs kept being compacted while read ({MOVED_ATTEMPTS} attempts)"
        )

    # -- applying (under the replica's write lock) -----------------------------------------------

    def apply(self, update: Update) -> Path | None:
        """Makes ``update`` what the partition serves; returns the directory of a copy it
        replaced, to delete once reads no longer use it."""
        replaced = None
        if update.rebuilt and update.copy is not None:
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

    def close(self) -> None:
        self.copy.close()


def _position(entry: BatchEntry | None) -> int:
    return -1 if entry is None else entry.position
