"""In-place store-format upgrade in Spark (KIP-258 ``upgrade.mode=in_place``).

With ``upgrade.from`` set and ``upgrade.mode=in_place``, the timestamped key-value stores of a
``StateBackend`` keep serving from their old plain-format directories (timestamped stores read
those in upgrade mode) while each partition builds a new-format standby beside them
(``rocksdb/.<store>.standby``, 2x disk) from its changelog, in a background thread after each
commit. The switch is coordinated as Kafka Streams coordinates versions, with its metadata bytes:

- at each commit a task writes its partition's ``SubscriptionInfo`` to
  ``<changelog_dir>/<application_id>-kstate-upgrade/subscription-<p>``: version 3, and latest
  supported version 4 once its standbys have caught up with the state it opened at, else 3;
- at each batch boundary the driver (a query listener) reads them all and runs the group
  leader's version logic: once every partition supports version 4, the ``AssignmentInfo`` it
  writes to ``assignment`` advertises 4 as commonly supported;
- a task that finds that assignment replaces each old store with its standby
  (``kstate.upgrade.take_over``: catch up, two renames, the old directory deleted) before it
  opens the stores.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from kstate.errors import InvalidArgumentError
from kstate.rebalance import AssignmentInfo, Leader, SubscriptionInfo, TaskId, TaskOffsetSum, UpgradeConfig, UpgradeMode
from kstate.spark.protocol.progress import batch_listener
from kstate.stores import StoreBuilder
from kstate.suppliers import KeyValueBytesStoreSupplier
from kstate.upgrade import RollOver, inspect_store, take_over

log = logging.getLogger("kstate.spark")

OLD_FORMAT_VERSION = 3
"""Metadata version a member supports while its stores are in the old format."""
NEW_FORMAT_VERSION = 4
"""Metadata version a member supports once its new-format standbys are ready."""

_BUILDS: dict[Path, threading.Thread] = {}
_BUILDS_LOCK = threading.Lock()


class InPlaceUpgrade:
    """The in-place upgrade of a backend's timestamped key-value stores."""

    def __init__(self, config: UpgradeConfig, builders: list[StoreBuilder], changelog_dir: Path, app: str):
        if config.upgrade_from is None or config.upgrade_mode is not UpgradeMode.IN_PLACE:
            raise InvalidArgumentError("an in-place upgrade needs upgrade.from and upgrade.mode=in_place")
        self.builders = [b for b in builders if b.timestamped and isinstance(b.supplier, KeyValueBytesStoreSupplier)]
        self.directory = changelog_dir / f"{app}-kstate-upgrade"
        self.app = app

    # -- executor side ---------------------------------------------------------------------------

    def switch_ordered(self) -> bool:
        """Whether the driver's last assignment lets the new format take over."""
        try:
            assignment = AssignmentInfo.decode((self.directory / "assignment").read_bytes())
        except FileNotFoundError:
            return False
        return assignment.commonly_supported_version >= NEW_FORMAT_VERSION

    def needs_switch(self, task_dir: Path) -> bool:
        """Whether some store of the partition is still in the old format."""
        return any(inspect_store(task_dir / "rocksdb" / b.name).format in ("plain", "upgrading") for b in self.builders)

    def switch(self, logged: dict[str, StoreBuilder], task_dir: Path, partition: int) -> None:
        """Replaces every old-format store of the partition with its standby (stores closed)."""
        wait_for_build(task_dir)
        for builder in self.builders:
            if inspect_store(task_dir / "rocksdb" / builder.name).format in ("plain", "upgrading"):
                caught_up = take_over(logged[builder.name], task_dir, partition=partition, application_id=self.app)
                log.info(
                    "partition %d: %s switched to the timestamped format (%d records caught up)",
                    partition,
                    builder.name,
                    caught_up,
                )

    def report(
        self, logged: dict[str, StoreBuilder], task_dir: Path, partition: int, opened_at: dict[str, int | None]
    ) -> None:
        """Writes the partition's subscription (ready or not) and, while not ready, builds the
        standbys in the background up to the state this task committed."""
        pending = self.needs_switch(task_dir)
        ready = not pending or all(
            _standby_offset(task_dir, logged[b.name], partition, self.app) >= _offset(opened_at.get(b.name))
            for b in self.builders
        )
        latest = NEW_FORMAT_VERSION if ready else OLD_FORMAT_VERSION
        subscription = SubscriptionInfo(
            OLD_FORMAT_VERSION,
            latest,
            task_offset_sums=(TaskOffsetSum(TaskId(0, partition), sum(max(o or 0, 0) for o in opened_at.values())),),
        )
        self.directory.mkdir(parents=True, exist_ok=True)
        _write_atomically(self.directory / f"subscription-{partition}", subscription.encode())
        if pending:
            start_build([logged[b.name] for b in self.builders], task_dir, partition, self.app)

    # -- driver side -----------------------------------------------------------------------------

    def coordinate(self, partitions: int) -> AssignmentInfo:
        """Reads every partition's subscription, decides the versions as the group leader does,
        and writes the assignment; a partition not heard from yet counts as not ready."""
        subscriptions = []
        for p in range(partitions):
            try:
                subscriptions.append(SubscriptionInfo.decode((self.directory / f"subscription-{p}").read_bytes()))
            except FileNotFoundError:
                subscriptions.append(SubscriptionInfo(OLD_FORMAT_VERSION, OLD_FORMAT_VERSION))
        plan = Leader(NEW_FORMAT_VERSION).plan(subscriptions)
        assignment = AssignmentInfo(plan.assignment_version, plan.commonly_supported_version)
        self.directory.mkdir(parents=True, exist_ok=True)
        _write_atomically(self.directory / "assignment", assignment.encode())
        return assignment


def _standby_offset(task_dir: Path, builder: StoreBuilder, partition: int, app: str) -> int:
    """The changelog offset the store's standby reached: -1 without one, or while this process
    is still building it."""
    with _BUILDS_LOCK:
        running = _BUILDS.get(task_dir)
        if running is not None and running.is_alive():
            return -1
    return RollOver.of(builder, task_dir, partition, app).standby_offset()


def start_build(builders: list[StoreBuilder], task_dir: Path, partition: int, app: str) -> None:
    """Catches the standbys of ``builders`` up with their changelogs in a daemon thread."""

    def build() -> None:
        for builder in builders:
            RollOver.of(builder, task_dir, partition, app).catch_up()

    with _BUILDS_LOCK:
        running = _BUILDS.get(task_dir)
        if running is not None and running.is_alive():
            return
        thread = threading.Thread(target=build, name=f"kstate-standby-{partition}", daemon=True)
        _BUILDS[task_dir] = thread
        thread.start()


def wait_for_build(task_dir: Path) -> None:
    """Waits for the partition's background standby build, if one runs in this process."""
    with _BUILDS_LOCK:
        thread = _BUILDS.pop(task_dir, None)
    if thread is not None:
        thread.join()


def _offset(offset: int | None) -> int:
    return -1 if offset is None else offset


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def upgrade_listener(upgrade: InPlaceUpgrade, partitions: int) -> Any:
    """A listener running the driver's coordination after each micro-batch."""

    def coordinate(event: Any) -> None:
        assignment = upgrade.coordinate(partitions)
        log.info(
            "in-place upgrade: assignment version %d, commonly supported %d",
            assignment.version,
            assignment.commonly_supported_version,
        )

    return batch_listener(coordinate)
