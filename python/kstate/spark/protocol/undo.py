"""Undo files: what takes a store back over one published micro-batch.

Before a batch publishes, each store that has writes records the committed value of every key it
wrote (``None``: the key was absent), read in one native call. The file is an Arrow IPC file of
two binary columns, ``key`` and ``value``, holding the stored bytes exactly (a timestamped
store's values keep their timestamp), written durably before the batch's entry refers to it.
Files live next to the changelogs (``<changelog.dir>/<application.id>-kstate-undo-<partition>/
<store>/<batch log position>-<task attempt>.arrow``: attempts racing for one position never write
the same file), so a partition that moved to another executor can still roll back. On an object
store (``changelog.dir`` a URL) they are objects of the same names.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from kstate.errors import ProcessorStateError
from kstate.log.object_store import ObjectStore

UNDO_SCHEMA = pa.schema([("key", pa.binary(), False), ("value", pa.binary())])
"""An undo file's rows: a stored key and its stored bytes before the batch (null: it had none)."""


def _binary(packed: tuple[bytes, bytes, bytes, int], count: int) -> pa.Array:
    validity, offsets, data, null_count = packed
    buffers = [pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), count, buffers, null_count=null_count)


def previous_values(native_store: Any, read_ahead: Any = None) -> pa.RecordBatch:
    """The keys a store's uncommitted writes touch, with their committed values; ``read_ahead``
    (a ``_core.StateReadAhead`` of the store) gives those it kept as the batch wrote them, and
    the store reads the rest."""
    keys, values = (
        native_store.previous_values_of_staged(False)
        if read_ahead is None
        else read_ahead.previous_values_of_staged(native_store, False)
    )
    count = (len(keys[1]) // 4) - 1
    return pa.RecordBatch.from_arrays([_binary(keys, count), _binary(values, count)], schema=UNDO_SCHEMA)


class UndoFiles:
    """The undo files of one partition."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def write(self, store: str, position: int, attempt: int, batch: pa.RecordBatch) -> str:
        """Writes ``batch`` durably as the undo of ``store`` for the entry at ``position``
        (task attempt ``attempt``); returns the file's name relative to the directory."""
        name = f"{store}/{position}-{attempt}.arrow"
        path = self.directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, UNDO_SCHEMA) as writer:
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

    def delete(self, names: Iterable[str]) -> None:
        """Deletes the undo files ``names``; ones already gone are fine."""
        for name in names:
            (self.directory / name).unlink(missing_ok=True)

    def keep_only(self, names: Iterable[str]) -> int:
        """Deletes every undo file but ``names``; returns how many went."""
        keep = {self.directory / n for n in names}
        removed = 0
        for path in self.directory.glob("*/*"):
            if path not in keep:
                path.unlink(missing_ok=True)
                removed += 1
        return removed


class RemoteUndoFiles:
    """The undo files of one partition as objects ``<url>/<name>/<store>/<position>-<attempt>.arrow``
    (the same methods as ``UndoFiles``)."""

    def __init__(self, url: str, name: str, stores: Iterable[str], storage_options: dict | None = None):
        self.directory = name
        self._stores = list(stores)
        self._store = ObjectStore(url, storage_options)

    def write(self, store: str, position: int, attempt: int, batch: pa.RecordBatch) -> str:
        name = f"{store}/{position}-{attempt}.arrow"
        with tempfile.TemporaryDirectory(prefix="kstate-undo-") as scratch:
            path = Path(scratch) / "undo.arrow"
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, UNDO_SCHEMA) as writer:
                writer.write_batch(batch)
            try:
                self._store.create(f"{self.directory}/{name}", str(path))
            except FileExistsError:
                pass  # this attempt wrote it before (a retried commit): the same content
        return name

    def read(self, name: str) -> pa.Table:
        with tempfile.TemporaryDirectory(prefix="kstate-undo-") as scratch:
            path = Path(scratch) / "undo.arrow"
            try:
                self._store.fetch(f"{self.directory}/{name}", str(path))
            except FileNotFoundError:
                raise ProcessorStateError(
                    f"undo object {name} is missing: the batch it undoes cannot be rolled back "
                    "(raise the backend's undo_retained_batches to keep more)"
                ) from None
            with pa.memory_map(str(path)) as source:
                return pa.ipc.open_file(source).read_all()

    def delete(self, names: Iterable[str]) -> None:
        self._store.delete_many([f"{self.directory}/{name}" for name in names])

    def keep_only(self, names: Iterable[str]) -> int:
        keep = set(names)
        removed = 0
        for store in self._stores:
            for name in self._store.list(f"{self.directory}/{store}"):
                if f"{store}/{name}" not in keep:
                    self._store.delete(f"{self.directory}/{store}/{name}")
                    removed += 1
        return removed
