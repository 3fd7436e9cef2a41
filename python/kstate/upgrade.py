"""Store-format upgrades (KIP-258): plain key-value stores to the timestamped format.

A key-value store written in the plain format (values in RocksDB's ``default`` column family, as a
plain ``RocksDBStore`` or Kafka Streams before 2.3 wrote it) opens as a timestamped store in
upgrade mode and moves values over lazily, one access at a time. Two more paths:

- Offline, ``upgrade_store``: converts every value at once; legacy values get timestamp -1, as
  Kafka's ``convertToTimestampedFormat`` gives them. Each batch is atomic, so an interrupted
  upgrade leaves a store that still reads right (in upgrade mode) and finishes when run again.
- Roll-over, ``build_standby`` then ``take_over``: a timestamped standby is built beside the
  store from its changelog (values get their records' timestamps, as a Kafka restore gives
  them) while the old store keeps serving, untouched; once the old store is closed, the standby
  catches up and takes its place. Both resume after a crash at any point.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from kstate import _core
from kstate.errors import InvalidArgumentError, InvalidStateStoreError
from kstate.log.files import read_log
from kstate.store_lifecycle import RestoreProgress, now_ms, task_partition

if TYPE_CHECKING:
    from kstate.stores import StoreBuilder

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


class RollOver(NamedTuple):
    """Where a roll-over upgrade of one store works: the live store, its standby, the old store
    while it is being replaced, and the changelog partition the standby is built from."""

    name: str
    live: Path
    standby: Path
    old: Path
    changelog: Path
    offset_key: str

    @classmethod
    def of(cls, builder: StoreBuilder, task_dir: Path, partition: int | None, application_id: str | None) -> RollOver:
        supplier = builder.supplier
        if not (supplier.persistent and supplier.timestamped and builder.logging is not None):
            raise InvalidArgumentError(
                f"{builder.name}: a roll-over upgrade builds a persistent timestamped key-value store from its "
                "changelog: use Stores.timestamped_key_value_store_builder(...).with_logging_enabled(...)"
            )
        store = builder.build()
        if store.changelog_config.remote:
            raise InvalidArgumentError(f"{builder.name}: roll-over upgrades read a local changelog.dir")
        if partition is None:
            partition = task_partition(task_dir.name) or 0
        app = application_id or task_dir.resolve().parent.name
        topic = f"{app}-{builder.name}-changelog"
        log_dir = Path(store.changelog_config.changelog_dir or task_dir.resolve().parent.parent / "changelog")
        rocksdb = task_dir / "rocksdb"
        return cls(
            builder.name,
            rocksdb / builder.name,
            rocksdb / f".{builder.name}.standby",
            rocksdb / f".{builder.name}.old",
            log_dir / f"{topic}-{partition}",
            f"{topic}-{partition}",
        )

    def open(self, path: Path, timestamped: bool = True) -> Any:
        """The native store at ``path`` (the live store or the standby), opened unlogged."""
        # The store's spill directory, as KeyValueStore names it: ``.<dir name>.uncommitted``.
        spill = path.with_name(f".{path.name.lstrip('.')}.uncommitted")
        native, _ = _core.KeyValueStore.open_rocksdb(
            self.name, str(path), str(spill), timestamped, True, 1 << 30, 0, self.offset_key
        )
        return native

    def standby_offset(self) -> int:
        """The changelog offset the standby reached; -1 without a standby."""
        if not self.standby.exists():
            return -1
        native = self.open(self.standby)
        try:
            offset = native.committed_offset()
        finally:
            native.close()
        return -1 if offset is None else offset

    def catch_up(self) -> int:
        """Restores what the changelog has beyond the standby (creating it); returns how many."""
        start = self.standby_offset() + 1
        native = self.open(self.standby)
        restored = 0
        try:
            with RestoreProgress(f"building standby {self.name}") as progress:
                for batch in read_log(self.changelog, start):
                    if not batch.num_rows:
                        continue
                    timestamps = batch.column("timestamp").to_pylist()
                    values = [
                        None if v is None else struct.pack(">q", t) + v
                        for v, t in zip(batch.column("value").to_pylist(), timestamps)
                    ]
                    native.put_all(batch.column("key").to_pylist(), values)
                    native.commit(batch.column("offset")[-1].as_py(), now_ms())
                    restored += batch.num_rows
                    progress(restored, restored)
        finally:
            native.close()
        return restored


def build_standby(
    builder: StoreBuilder,
    task_dir: str | os.PathLike,
    *,
    partition: int | None = None,
    application_id: str | None = None,
) -> int:
    """Builds (or brings up to date) the timestamped standby of the store ``builder`` names in
    ``task_dir``, at ``<task_dir>/rocksdb/.<name>.standby``, from the store's changelog, with a
    progress bar; the store itself is not touched and may keep serving in another process.
    Returns the records restored."""
    roll = RollOver.of(builder, Path(task_dir), partition, application_id)
    restored = roll.catch_up()
    log.info("Standby of %s: %d changelog records restored from %s", roll.name, restored, roll.changelog)
    return restored


def take_over(
    builder: StoreBuilder,
    task_dir: str | os.PathLike,
    *,
    partition: int | None = None,
    application_id: str | None = None,
) -> int:
    """Replaces the (closed) store with its standby: catches the standby up with the changelog,
    moves the old store to ``.<name>.old``, the standby into its place, and deletes the old one.
    Run again after a crash, it finishes where it stopped. Returns the records restored."""
    roll = RollOver.of(builder, Path(task_dir), partition, application_id)
    if roll.old.exists():  # a takeover a crash interrupted
        if not roll.live.exists():
            roll.standby.rename(roll.live)
        shutil.rmtree(roll.old)
        log.info("Store %s: finished an interrupted takeover by its standby", roll.name)
        return 0
    if roll.live.exists():
        _check_closed(roll)
    restored = roll.catch_up()
    if roll.live.exists():
        roll.live.rename(roll.old)
    roll.standby.rename(roll.live)
    shutil.rmtree(roll.old, ignore_errors=True)
    log.info("Store %s: its timestamped standby took over (%d records caught up)", roll.name, restored)
    return restored


def _check_closed(roll: RollOver) -> None:
    """The live store must be closed: opening it takes RocksDB's lock, which fails while another
    process has it open."""
    timestamped = inspect_store(roll.live).format in ("timestamped", "upgrading")
    try:
        native = roll.open(roll.live, timestamped)
    except Exception as error:
        raise InvalidStateStoreError(
            f"store {roll.name} is still open elsewhere; close it before its standby takes over ({error})"
        ) from error
    native.close()
