"""What the process's stores hold in memory and on disk.

Every store a process opens shares one memory budget (``statestore.memory.max.bytes``, see
``kstate.config``): RocksDB's block cache (data, index and filter blocks), its memtables (charged
to that cache), kstate's read caches and the writes staged for the next commit.
``memory_usage()`` reports the budget and each open store; ``store.metrics()`` one store."""

from __future__ import annotations

import os
from collections.abc import Iterable

from kstate import _core

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

_PROCESS_FIELDS = (
    "limit",
    "block_cache_capacity",
    "block_cache_usage",
    "block_cache_pinned",
    "memtables",
    "memtable_limit",
    "staged",
    "staged_limit",
    "read_cache",
    "read_cache_limit",
    "open_stores",
)


def rss_bytes(pid: int | str = "self") -> int:
    """Resident memory of a process (``VmRSS`` in ``/proc/<pid>/status``); 0 where there is no /proc."""
    return _status_bytes(pid, "VmRSS:")


def peak_rss_bytes(pid: int | str = "self") -> int:
    """The most resident memory a process has had since it started its program (``VmHWM``); 0
    where there is no /proc. Unlike ``resource.getrusage``'s ``ru_maxrss``, which on Linux
    carries over the RSS of the process that forked it, up to its ``exec``."""
    return _status_bytes(pid, "VmHWM:")


def _status_bytes(pid: int | str, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def open_files(pid: int | str = "self") -> int:
    """File descriptors a process holds open (``/proc/<pid>/fd``); 0 where there is no /proc."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def disk_bytes(paths: Iterable[str | Path]) -> int:
    """Bytes of the files under ``paths`` (directories walked; missing paths count 0)."""
    total = 0
    for path in paths:
        for root, _dirs, files in os.walk(path):
            for name in files:
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except OSError:  # a file RocksDB deleted meanwhile
                    pass
        if os.path.isfile(path):
            total += os.stat(path).st_size
    return total


def memory_usage(stores: bool = True) -> dict[str, Any]:
    """The process's memory budget and what uses it, in bytes.

    ``limit`` (the budget), ``block_cache_capacity`` / ``block_cache_usage`` /
    ``block_cache_pinned`` (RocksDB's shared cache; usage includes the memtables' reservation),
    ``memtables`` / ``memtable_limit``, ``staged`` / ``staged_limit`` (uncommitted writes in
    memory), ``read_cache`` / ``read_cache_limit`` (kstate's caches of committed values),
    ``open_stores`` (a window or session store's segments each count), ``in_use`` (block cache
    usage + staged + read cache: what the budget bounds), ``rss`` and ``open_files`` of the
    process, and ``stores``: one dict per open store (``name``, ``path``, ``memtables``,
    ``table_readers``, ``sst_bytes``, ``sst_files``, ``staged``, ``read_cache``). Zeros and no
    stores while no store is open. ``stores=False`` leaves the list empty (cheaper with many stores)."""
    usage: dict[str, Any] = _core.process_memory(stores) or {**dict.fromkeys(_PROCESS_FIELDS, 0), "stores": []}
    usage["in_use"] = usage["block_cache_usage"] + usage["staged"] + usage["read_cache"]
    usage["rss"] = rss_bytes()
    usage["open_files"] = open_files()
    return usage
