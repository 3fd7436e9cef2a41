"""A numbered sequence of small records kept beside an application's changelogs.

Records are ``<seq>.json`` files created exclusively in ``<changelog location>/<name>`` (a
directory, or objects at an object store URL); the highest ``seq`` is current. Of two writers of
the same ``seq`` one wins and the other gets ``FileExistsError``, so a record is appended only
after reading the current one. The partitioning record and the state schemas are such logs.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kstate.log.local_files import create_exclusively
from kstate.log.object_store import ObjectStore

_RECORD_NAME = re.compile(r"^(\d{20})\.json$")


class RecordLog:
    """An application's log named ``<application_id>-<suffix>``; subclasses name the suffix and
    read and write their records through ``latest`` and ``create``."""

    suffix: str

    def __init__(
        self,
        changelog_dir: Path,
        application_id: str,
        changelog_url: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ):
        self.application_id = application_id
        self.name = f"{application_id}-{self.suffix}"
        self._store = None if changelog_url is None else ObjectStore(changelog_url, storage_options)
        self._directory = changelog_dir / self.name
        self.changelog_location = changelog_url or str(changelog_dir)
        """The application's changelog directory or URL (the backend's ``changelog_dir``)."""
        self.location = f"{changelog_url}/{self.name}" if changelog_url else str(self._directory)

    def _names(self) -> list[str]:
        if self._store is not None:
            return list(self._store.list(self.name))
        try:
            return os.listdir(self._directory)
        except FileNotFoundError:
            return []

    def latest(self) -> tuple[int, bytes] | None:
        """``(seq, bytes)`` of the current record; ``None`` before the first."""
        found = [int(m.group(1)) for m in map(_RECORD_NAME.match, self._names()) if m]
        if not found:
            return None
        seq = max(found)
        name = f"{seq:020d}.json"
        if self._store is None:
            return seq, (self._directory / name).read_bytes()
        with tempfile.TemporaryDirectory(prefix="kstate-record-") as scratch:
            path = Path(scratch) / name
            self._store.fetch(f"{self.name}/{name}", str(path))
            return seq, path.read_bytes()

    def create(self, seq: int, body: bytes) -> None:
        """Writes record ``seq``; ``FileExistsError`` if another writer made it first."""
        name = f"{seq:020d}.json"
        with tempfile.TemporaryDirectory(prefix="kstate-record-") as scratch:
            path = Path(scratch) / name
            path.write_bytes(body)
            if self._store is not None:
                self._store.create(f"{self.name}/{name}", str(path))
            else:
                create_exclusively(str(self._directory / name), str(path))
