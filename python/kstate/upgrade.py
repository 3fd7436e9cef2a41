"""Offline store-format upgrades (KIP-258).

A key-value store written in the plain format (values in RocksDB's ``default`` column family, as a
plain ``RocksDBStore`` or Kafka Streams before 2.3 wrote it) opens as a timestamped store in
upgrade mode and moves values over lazily, one access at a time. ``upgrade_store`` moves them all
at once, offline: legacy values get timestamp -1, as Kafka's ``convertToTimestampedFormat`` gives
them. Each batch is atomic, so an interrupted upgrade leaves a store that still reads right (in
upgrade mode) and finishes when run again.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple

from kstate import _core
from kstate.store_lifecycle import RestoreProgress

log = logging.getLogger("kstate.upgrade")


class StoreInspection(NamedTuple):
    """What a store directory holds."""

    path: Path
    format: str
    """``missing``, ``plain`` (values in ``default``), ``upgrading`` (both) or ``timestamped``."""
    legacy_entries: int
    """Values in the plain format: what an upgrade converts."""
    timestamped_entries: int


def inspect_store(path: str | os.PathLike) -> StoreInspection:
    """The format and entry counts of the RocksDB store at ``path`` (opened read-only)."""
    fmt, legacy, timestamped = _core.inspect_store(os.fspath(path))
    return StoreInspection(Path(path), fmt, legacy, timestamped)


def find_stores(path: str | os.PathLike) -> list[Path]:
    """``path`` itself if it is a store directory, else the key-value stores under it in Kafka's
    layout (``<task dir>/rocksdb/<store>``), e.g. every store of a state directory."""
    path = Path(path)
    if (path / "CURRENT").exists():
        return [path]
    return sorted(p.parent for p in path.glob("**/rocksdb/*/CURRENT") if not p.parent.name.startswith("."))


def upgrade_store(path: str | os.PathLike, dry_run: bool = False) -> StoreInspection:
    """Convert the store at ``path`` to the timestamped format (with a progress bar); with
    ``dry_run``, only say what would be converted. Returns the store as found before."""
    found = inspect_store(path)
    if dry_run or found.legacy_entries == 0:
        return found
    log.info("Upgrading %s: %d plain values to the timestamped format", path, found.legacy_entries)
    with RestoreProgress(f"upgrading {Path(path).name}") as progress:
        converted = _core.upgrade_store_to_timestamped(os.fspath(path), progress)
    log.info("Upgraded %s: %d values converted", path, converted)
    return found
