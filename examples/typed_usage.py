"""kstate under a type checker: the package ships its annotations (PEP 561 ``py.typed``, and
``_core.pyi`` for the native module), so this file passes ``mypy --strict`` against the installed
wheel (tests/release/test_release.py checks it). It also runs: ``python examples/typed_usage.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from kstate import (
    KeyValue,
    KeyValueStore,
    Stores,
    TimestampedKeyValueStore,
    ValueAndTimestamp,
    Windowed,
    WindowStore,
)
from kstate.log import Partition, Record


def count_clicks(state_dir: Path, clicks: list[str]) -> dict[str, int]:
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("clicks"), "string", "int64")
    store: KeyValueStore = builder.with_logging_enabled().build().init(state_dir / "app" / "0_0")
    with store:
        for key in clicks:
            current: int | None = store.get(key)
            store.put(key, (current or 0) + 1)
        offset: int | None = store.commit()
        assert offset == 1, "two keys staged: changelog offsets 0 and 1"
        with store.all() as entries:
            counts = {str(kv.key): int(kv.value) for kv in entries}
    return counts


def latest(state_dir: Path) -> ValueAndTimestamp | None:
    supplier = Stores.persistent_timestamped_key_value_store("latest", ttl_ms=86_400_000)
    builder = Stores.timestamped_key_value_store_builder(supplier, "string", "string")
    store: TimestampedKeyValueStore = builder.build().init(state_dir / "app" / "0_1")
    with store:
        store.put("sensor-1", "21.5C", timestamp=1_700_000_000_000)
        store.put_if_newer("sensor-1", "19.0C", 1_600_000_000_000)
        store.commit(changelog_offset=1)
        return store.get_with_timestamp("sensor-1")


def windows(state_dir: Path) -> list[KeyValue]:
    supplier = Stores.persistent_window_store("per-minute", retention_ms=3_600_000, window_size_ms=60_000)
    builder = Stores.window_store_builder(supplier, "string", "int64")
    store: WindowStore = builder.build().init(state_dir / "app" / "0_2")
    with store:
        store.put("a", 3, window_start=120_000)
        store.commit(changelog_offset=1)
        return list(store.fetch("a", "a", 0, 300_000))


def changelog(state_dir: Path) -> list[Record]:
    with Partition.open(state_dir / "changelog" / "app-clicks-changelog-0") as log:
        return log.read(0)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp)
        print(count_clicks(state_dir, ["a", "b", "a"]))
        print(latest(state_dir))
        for kv in windows(state_dir):
            window: Windowed = kv.key
            print(window.key, window.start, window.end, kv.value)
        print([(r.offset, r.key) for r in changelog(state_dir)])


if __name__ == "__main__":
    main()
