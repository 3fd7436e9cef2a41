"""What a state directory holds (``kstate inspect``): every store, its partition, committed
offsets and size, read without opening anything for writing; and what a changelog location
holds (``kstate inspect --history``): every store's changelog partitions, their snapshots and
the state their history gives.

Stores are found by Kafka Streams' layout: key-value stores at ``<task>/rocksdb/<store>``, window
and session stores as segments ``<task>/<store>/<store>.<segment>``; the task directory is
``<state.dir>/<application.id>/<subtopology>_<partition>``. RocksDB's read-only mode takes no
lock, so the stores of a running job can be inspected (they show their last flush and WAL).

A changelog partition is ``<changelog location>/<topic>-<partition>`` with a topic ending in
``-changelog`` (a directory, or objects under a URL); its state is rebuilt in a temporary
directory from the newest usable snapshot and the changelog after it (``kstate.log.history``),
as a restore on a new machine would build it, and its entries are counted."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kstate import _core
from kstate.errors import ChangelogTruncatedError
from kstate.log.history import StoreHistory, rebuild_state
from kstate.log.object_store import ObjectStore, is_url
from kstate.memory import disk_bytes
from kstate.store_lifecycle import task_partition

_CHANGELOG_PARTITION = re.compile(r"^(.+-changelog)-(\d+)$")


@dataclass
class StoreReport:
    """One store of a task directory."""

    task_dir: Path
    name: str
    kind: str
    """``key-value``, or ``segmented`` (a window or session store)."""
    partition: int | None
    segments: int = 0
    approximate_entries: int = 0
    entries: int | None = None
    """Counted one by one (``inspect_state(..., count_entries=True)``), else ``None``."""
    disk_bytes: int = 0
    offsets: dict[str, int] = field(default_factory=dict)
    """The ``offsets`` column family: ``<changelog topic>-<partition>`` -> committed offset (the
    latest over a segmented store's segments), and kstate's own entries."""

    @property
    def application_id(self) -> str:
        return self.task_dir.parent.name


def _partition(task_dir: Path) -> int | None:
    return task_partition(task_dir.name)


def _store_dirs(root: Path) -> list[Path]:
    """RocksDB directories under ``root`` (kstate's hidden spills and standbys left out)."""
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        if "CURRENT" in files:
            found.append(Path(directory))
            subdirs.clear()
    return found


def inspect_state(path: str | os.PathLike, count_entries: bool = False) -> list[StoreReport]:
    """Every store under ``path`` (a state directory, an application's or a task's), in path
    order; ``count_entries``: their entries counted by a scan too (exact, where RocksDB's estimate
    counts overwrites and deletes not yet compacted)."""
    reports: dict[tuple[Path, str], StoreReport] = {}
    for store_dir in _store_dirs(Path(path)):
        if store_dir.parent.name == "rocksdb":
            task_dir, name, kind = store_dir.parent.parent, store_dir.name, "key-value"
            spills = [task_dir / "rocksdb" / f".{name}.uncommitted"]
        else:
            task_dir, name, kind = store_dir.parent.parent, store_dir.parent.name, "segmented"
            spills = [task_dir / f".{name}.commit", *task_dir.glob(f".{name}.*.uncommitted")]
        report = reports.get((task_dir, name))
        if report is None:
            report = reports[(task_dir, name)] = StoreReport(task_dir, name, kind, _partition(task_dir))
            report.disk_bytes = disk_bytes(spills)
        offsets, approximate, entries = _core.summarize_store(os.fspath(store_dir), count_entries)
        report.approximate_entries += approximate
        if entries is not None:
            report.entries = (report.entries or 0) + entries
        report.disk_bytes += disk_bytes([store_dir])
        if kind == "segmented":
            report.segments += 1
        for key, value in offsets.items():
            report.offsets[key] = max(value, report.offsets.get(key, value))
    return sorted(reports.values(), key=lambda r: (str(r.task_dir), r.name))


@dataclass
class HistoryReport:
    """One changelog partition of a changelog location, and the state its history gives."""

    topic: str
    partition: int
    log_start_offset: int | None
    """The first offset the changelog holds (``None``: it holds none)."""
    log_end_offset: int
    snapshots: list[int]
    """The offsets of the snapshots beside it, oldest first."""
    offset: int | None = None
    """The offset of the rebuilt state (the last the changelog published; ``None``: empty)."""
    snapshot_offset: int | None = None
    """The snapshot the state was rebuilt from (``None``: the changelog from its start)."""
    snapshot_batch: int | None = None
    replayed_records: int = 0
    """Changelog records replayed after the snapshot."""
    entries: int | None = None
    """The rebuilt state's entries (``None``: it could not be rebuilt)."""
    error: str | None = None
    """Why the state could not be rebuilt (``ChangelogTruncatedError``'s message)."""


def changelog_partitions(location: str, storage_options: Mapping[str, Any] | None = None) -> list[tuple[str, int]]:
    """``(topic, partition)`` of every store changelog partition at ``location`` (a directory or
    an object-store URL), in name order."""
    if is_url(location):
        names = ObjectStore(location, storage_options).directories()
    else:
        names = [p.name for p in Path(location).iterdir() if p.is_dir()] if Path(location).is_dir() else []
    found = [m for m in map(_CHANGELOG_PARTITION.match, sorted(names)) if m]
    return [(m.group(1), int(m.group(2))) for m in found]


def inspect_history(location: str, storage_options: Mapping[str, Any] | None = None) -> list[HistoryReport]:
    """Every store changelog partition at ``location`` (a changelog directory or URL) with its
    snapshots and the state its history gives, rebuilt from the newest usable snapshot and the
    changelog after it (``kstate.log.history``) and counted; a partition whose history cannot
    give it says why (``error``). Reads only; the rebuilt states are temporary."""
    reports = []
    for topic, partition in changelog_partitions(location, storage_options):
        history = StoreHistory(location, topic, partition, storage_options)
        report = HistoryReport(
            topic, partition, history.log_start_offset(), history.log_end_offset(), history.snapshots.offsets()
        )
        with tempfile.TemporaryDirectory(prefix="kstate-inspect-") as scratch:
            try:
                rebuilt = rebuild_state(history, os.path.join(scratch, "store"))
            except ChangelogTruncatedError as missing:
                report.error = str(missing)
            else:
                report.offset, report.replayed_records = rebuilt.offset, rebuilt.replayed
                if rebuilt.snapshot is not None:
                    report.snapshot_offset, report.snapshot_batch = rebuilt.snapshot.offset, rebuilt.snapshot.batch_id
                report.entries = _core.summarize_store(rebuilt.directory, True)[2]
        reports.append(report)
    return reports
