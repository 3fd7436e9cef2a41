"""Undo files: what takes a store back over one published micro-batch.

Before a batch publishes, each store that has writes records the committed value of every key it
wrote (``None``: the key was absent), read in one native call. The file is an Arrow IPC file of
two binary columns, ``key`` and ``value``, holding the stored bytes exactly (a timestamped
store's values keep their timestamp), written durably before the batch's entry refers to it.
Files live next to the changelogs (``<changelog.dir>/<application.id>-kstate-undo-<partition>/
<store>/<batch log position>.arrow``), so a partition that moved to another executor can still
roll back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from kstate.errors import ProcessorStateError

_SCHEMA = pa.schema([("key", pa.binary(), False), ("value", pa.binary())])


def _binary(packed: tuple[bytes, bytes, bytes, int], count: int) -> pa.Array:
    validity, offsets, data, null_count = packed
    buffers = [pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), count, buffers, null_count=null_count)


def previous_values(native_store: Any) -> pa.RecordBatch:
    """The keys a store's uncommitted writes touch, with their committed values."""
    keys, values = native_store.previous_values_of_staged(False)
    count = (len(keys[1]) // 4) - 1
    return pa.RecordBatch.from_arrays([_binary(keys, count), _binary(values, count)], schema=_SCHEMA)


class UndoFiles:
    """The undo files of one partition."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def write(self, store: str, position: int, batch: pa.RecordBatch) -> str:
        """Writes ``batch`` durably as the undo of ``store`` for the entry at ``position``;
        returns the file's name relative to the directory."""
        name = f"{store}/{position}.arrow"
        path = self.directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, _SCHEMA) as writer:
            writer.write_batch(batch)
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(tmp, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return name

    def read(self, name: str) -> pa.Table:
        path = self.directory / name
        try:
            with pa.memory_map(str(path)) as source:
                return pa.ipc.open_file(source).read_all()
        except FileNotFoundError:
            raise ProcessorStateError(
                f"undo file {path} is missing: the batch it undoes cannot be rolled back "
                "(raise the backend's undo_retained_batches to keep more)"
            ) from None

    def keep_only(self, names: Iterable[str]) -> int:
        """Deletes every undo file but ``names``; returns how many went."""
        keep = {self.directory / n for n in names}
        removed = 0
        for path in self.directory.glob("*/*"):
            if path not in keep:
                path.unlink(missing_ok=True)
                removed += 1
        return removed
