"""What the tests do to a changelog's history, as kstate's snapshot collector does (issue 44 item
4): delete it below an offset; and damage snapshots by deleting files they name (never by
rewriting bytes: on a local directory a snapshot's table files are hard links of the store's
own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kstate.log import Partition
from kstate.log.object_store import ObjectStore, is_url
from kstate.log.remote import RemoteChangelog, resolve
from kstate.log.snapshots import open_snapshots


def delete_history_below(
    changelog_dir: str, options: dict[str, Any] | None, topic: str, partition: int, offset: int
) -> int:
    """Deletes the history of ``<topic>-<partition>`` below ``offset`` as kstate's snapshot
    collector does: a directory's by Kafka's DeleteRecords (the log start offset becomes
    ``offset``, recorded, and the segments wholly below it go), a URL's objects wholly below it
    (never the newest). Returns where the changelog then starts."""
    if is_url(str(changelog_dir)):
        remote = RemoteChangelog(str(changelog_dir), topic, partition, options)
        chain = resolve(remote.list())[:-1]
        doomed = [link.object.name for link in chain if link.last is not None and link.last < offset]
        for name in doomed:
            remote.store.delete(remote.object_key(name))
        return log_start(changelog_dir, options, topic, partition)
    with Partition.open(Path(changelog_dir) / f"{topic}-{partition}") as log:
        return log.delete_records_before(offset)


def log_start(changelog_dir: str, options: dict[str, Any] | None, topic: str, partition: int) -> int:
    """Where the changelog starts: its first object's offset, or a directory's log start offset."""
    if is_url(str(changelog_dir)):
        return resolve(RemoteChangelog(str(changelog_dir), topic, partition, options).list())[0].first
    with Partition.open(Path(changelog_dir) / f"{topic}-{partition}") as log:
        return log.log_start_offset


def damage_snapshot(changelog_dir: str, options: dict[str, Any] | None, topic: str, partition: int, offset: int) -> str:
    """Deletes a file the snapshot at ``offset`` names and no older snapshot does (so only this
    one fails its check); returns its object name."""
    snapshots = open_snapshots(str(changelog_dir), topic, partition, options)
    manifest = snapshots.read(offset)
    older = [o for o in snapshots.offsets() if o < offset]
    files = manifest.files if not older else manifest.files_not_in(snapshots.read(older[-1]))
    object_name = files[0][2]
    key = f"{snapshots.directory}/files/{object_name}"
    if is_url(str(changelog_dir)):
        ObjectStore(str(changelog_dir), options).delete(key)
    else:
        (Path(changelog_dir) / key).unlink()
    return object_name
