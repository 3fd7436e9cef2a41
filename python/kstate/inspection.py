"""What a state directory holds (``kstate inspect``): every store, its partition, committed
offsets and size, read without opening anything for writing.

Stores are found by Kafka Streams' layout: key-value stores at ``<task>/rocksdb/<store>``, window
and session stores as segments ``<task>/<store>/<store>.<segment>``; the task directory is
``<state.dir>/<application.id>/<subtopology>_<partition>``. RocksDB's read-only mode takes no
lock, so the stores of a running job can be inspected (they show their last flush and WAL)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kstate import _core
from kstate.memory import disk_bytes
from kstate.store_lifecycle import task_partition


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


def inspect_state(path: str | os.PathLike) -> list[StoreReport]:
    """Every store under ``path`` (a state directory, an application's or a task's), in path order."""
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
        offsets, entries = _core.summarize_store(os.fspath(store_dir))
        report.approximate_entries += entries
        report.disk_bytes += disk_bytes([store_dir])
        if kind == "segmented":
            report.segments += 1
        for key, value in offsets.items():
            report.offsets[key] = max(value, report.offsets.get(key, value))
    return sorted(reports.values(), key=lambda r: (str(r.task_dir), r.name))
