"""Bounded history: which of a store's snapshots stay beside its changelog, and the deletion of
the rest (``kstate.log.snapshots``' layout). ``SnapshotWriter`` collects after each snapshot it
publishes, on its own thread.

Retention, ``minBatchesToRetain`` (Spark's name and meaning: that many of the latest micro-batches
stay recoverable; Spark's RocksDB file manager and HDFS state store keep the same): with ``b`` the
batch of the newest snapshot, the newest snapshot taken at or before batch
``b - minBatchesToRetain + 1`` and every newer one are kept; with no such snapshot, all are. A
store outside Spark writes no batch into its manifests: there the newest ``minBatchesToRetain``
snapshots are kept (it counts snapshots, not commits). Always kept, whatever the count: the
newest snapshot and the one before it (a restore falls back to it when the newest fails its
check). The oldest kept snapshot is the one the changelog's history may be deleted below, so it
must be whole: if a file it names is missing (by the one listing of the files), the newest older
snapshot that is whole is kept instead, and with none nothing is deleted.

Deleted, in this order: the files that no kept manifest names and that are at least
``delete_delay`` seconds old, then the manifests older than the oldest kept. Files first, so that a
collection killed part-way leaves manifests that the next one deletes (with whatever files of
theirs remain), never files of no manifest that would wait for their delay.

The delay covers a writer still uploading: a file named by no manifest may be a leftover of a
killed upload, of a writer whose manifest lost the exclusive create, or of a collected snapshot,
but it may also be one a writer wrote and whose manifest it has not created yet. Writers write
every file their earlier manifest does not hold (replacing one already there, which restarts its
delay) and create their manifest within half the delay (``Snapshots.publish``). Ages are taken
on the storage's clock: a file's modification time (S3's ``LastModified``; a local file's later
of modification and change time, a hard link moving only the latter) against the newest
modification time the listings show, so a machine's wrong clock cannot make a file look old.
Spark's RocksDB file manager instead deletes an unreferenced file only when it is older than
every file a kept version references; with files shared by content over many snapshots that
could keep a leftover for as long as the oldest table file lives.

The result, :attr:`Collected.history_start`, is where the changelog may start: one past the
offset of the oldest kept snapshot, which is whole. The caller bounds it by what else reads the
history (kstate.spark's batch log) and deletes the history below it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from kstate.errors import CorruptedDataError
from kstate.log.snapshots import Snapshots, manifest_name, manifest_offsets

log = logging.getLogger("kstate.log.snapshots")

DELETE_DELAY_SECONDS = 600.0
"""How old a snapshot file no kept manifest names must be before a collection deletes it: longer
than any writer takes from writing a file to creating the manifest that names it (a writer that
takes over half of it writes its older files again)."""

KEPT_AT_LEAST = 2
"""The newest snapshot and one older fallback are always kept."""


@dataclass(frozen=True)
class Collected:
    """What :func:`collect` did. ``history_start``: the changelog may go below this offset (one
    past the oldest kept snapshot, whose files are all there); ``None``: keep all of it."""

    kept: int
    manifests_deleted: int
    files_deleted: int
    bytes_deleted: int
    history_start: int | None
    seconds: float


def oldest_kept(batches: list[int | None], min_batches_to_retain: int) -> int | None:
    """The index of the oldest snapshot retention keeps among snapshots oldest first, given by
    their batch ids (``None``: none written): Spark's rule when the newest has a batch, else the
    newest ``min_batches_to_retain``; never past the one before the newest. ``None`` when no
    snapshot is old enough for the rule: everything is kept, the changelog's history too (as
    Spark deletes nothing then)."""
    newest = batches[-1] if batches else None
    if newest is None:
        index = len(batches) - min_batches_to_retain
    else:
        threshold = newest - min_batches_to_retain + 1
        index = max((i for i, batch in enumerate(batches) if batch is not None and batch <= threshold), default=-1)
    if index < 0:
        return None
    return max(0, min(index, len(batches) - KEPT_AT_LEAST))


def collect(
    snapshots: Snapshots,
    min_batches_to_retain: int,
    delete_delay: float = DELETE_DELAY_SECONDS,
    manifests: dict[int, Any] | None = None,
) -> Collected:
    """Deletes what retention no longer keeps at ``snapshots``' location (see the module
    docstring). ``manifests``: manifests already read, by offset (they never change), extended
    with those this collection reads and cleared of those it deletes."""
    started = time.monotonic()
    known = {} if manifests is None else manifests
    manifest_times = snapshots.files.list_detailed(snapshots.key("manifests"))
    offsets = manifest_offsets(manifest_times)
    readable: list[tuple[int, Any]] = []
    for offset in offsets:
        manifest = known.get(offset)
        if manifest is None:
            try:
                manifest = known[offset] = snapshots.read(offset)
            except FileNotFoundError:
                continue  # deleted since listed (another collection)
            except CorruptedDataError as error:
                log.warning(
                    "Snapshots %s: the manifest at offset %d is unreadable: %s", snapshots.location, offset, error
                )
                continue
        readable.append((offset, manifest))
    files = snapshots.files.list_detailed(snapshots.key("files"))
    chosen = keep = oldest_kept([manifest.batch_id for _, manifest in readable], min_batches_to_retain)
    # History never goes below a snapshot missing a file: the newest older whole one is kept.
    while keep is not None and snapshots.missing(readable[keep][1], files):
        keep = keep - 1 if keep > 0 else None
    if chosen is not None and keep is None:
        log.warning(
            "Snapshots %s: no snapshot old enough to collect below has all its files; keeping every one",
            snapshots.location,
        )
    floor = -1 if keep is None else readable[keep][0]
    named = {name for offset, manifest in readable if offset >= floor for _, _, name in manifest.files}
    now = max(
        (modified for _, modified in [*files.values(), *manifest_times.values()] if modified is not None), default=None
    )
    doomed_files = [
        name for name, (_, modified) in files.items() if name not in named and _older_than(modified, now, delete_delay)
    ]
    doomed_manifests = [offset for offset in offsets if offset < floor]
    snapshots.files.delete_many([snapshots.key("files", name) for name in doomed_files])
    snapshots.files.delete_many([snapshots.key("manifests", manifest_name(offset)) for offset in doomed_manifests])
    for offset in doomed_manifests:
        known.pop(offset, None)
    collected = Collected(
        kept=len(offsets) - len(doomed_manifests),
        manifests_deleted=len(doomed_manifests),
        files_deleted=len(doomed_files),
        bytes_deleted=sum(files[name][0] for name in doomed_files),
        history_start=None if keep is None else floor + 1,
        seconds=time.monotonic() - started,
    )
    if doomed_files or doomed_manifests:
        log.info(
            "Snapshots %s: deleted %d snapshots below offset %d and %d files (%.1f MiB) in %.2f s; %d kept",
            snapshots.location,
            collected.manifests_deleted,
            max(floor, 0),
            collected.files_deleted,
            collected.bytes_deleted / 2**20,
            collected.seconds,
            collected.kept,
        )
    return collected


def _older_than(modified: float | None, now: float | None, delay: float) -> bool:
    """Whether a file modified at ``modified`` is at least ``delay`` seconds older than ``now``
    (both on the storage's clock); a file of unknown age never is."""
    return modified is not None and now is not None and now - modified >= delay
