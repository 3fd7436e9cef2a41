"""``StateReplica``: a read replica of a kstate Spark application's state, in any Python process.

Kafka Streams serves its stores to other services through interactive queries; kstate already
publishes every committed micro-batch to changelogs any machine can reach, so a replica builds
its own copy of each partition from them (``kstate.spark.serving.following``), keeps it on disk,
and answers reads from it, without Spark and without touching the query: it reads the changelog
location (a directory or an object store) and writes only its own ``local_dir``.

What a read says. Every read answers from published batches only, and says which: its
``Answer`` has the value, ``batch_id`` and, per partition read, the batch its state is known to
be. A partition's copy holds the state of one batch log entry, every store at that entry
(updates are applied under a write lock that reads wait for), so it is the partition's state
after batch ``b`` (the entry's), and stays so until its next entry. Structured Streaming runs
micro-batches one after another, so once any partition published batch ``m``, every partition
finished every batch before it: a partition whose copy stands on its head is then known to hold
its state as of ``m - 1`` too, whether or not that batch wrote to it. ``Answer.batch_id`` is a
batch every partition the read touched is known to hold, ``None`` if there is none (an unaligned
replica reading several partitions while some are idle). ``at_least_batch=n`` waits (up to
``timeout``) until the partitions read are known to hold batch ``n`` or later, as Kafka's
position bounds do.

Aligned replicas. With ``aligned=True`` every partition stands on its newest entry of a batch
every partition has finished (the newest published batch minus one): all reads answer at that
one batch, and none shows a batch a replay could still roll back (Spark replays only a batch it
has not finished). The price is one micro-batch of freshness. Without it each partition stands on
its head: fresher, and a batch that Spark replays after a failure shows until its rollback is
published, then the replay's state does.

What a replica never serves: part of a batch, a batch not yet published, or a copy it cannot
vouch for. A copy that fell behind what the changelogs keep (compacted, the entry it stands on
trimmed) is rebuilt from scratch while the old one keeps answering for its own batch; an
application rescaled to a new partition count (a new generation) is followed to its new
partitions, built beside the old ones and switched to once complete. Both are logged
(``kstate.serving``).
"""

from __future__ import annotations

import heapq
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from kstate import _core
from kstate.errors import InvalidArgumentError, InvalidStateStoreError, KStateError, StoreClosedError
from kstate.log.object_store import is_url
from kstate.spark.format.state_schemas import SchemaLog
from kstate.spark.protocol.batch_log import EMPTY_STATE
from kstate.spark.protocol.exactly_once import StateLayout
from kstate.spark.protocol.locking import FileLock
from kstate.spark.routing.partitioning import Partitioning, PartitioningLog, generation_application_id
from kstate.spark.serving.following import PartitionFollower, Update
from kstate.spark.serving.readers_writer import ReadersWriterLock
from kstate.spark.serving.routing import SERDE_KEYS, Routing
from kstate.spark.serving.snapshot import Snapshot, arrow_value_type
from kstate.spark.serving.state_variables import StateVariables
from kstate.store_lifecycle import now_ms
from kstate.store_reads import is_arrow

log = logging.getLogger("kstate.serving")

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0
"""Seconds a read waits for ``at_least_batch`` (or a replica not serving yet) by default."""
_POLL_SECONDS = 0.05
"""How often a read waiting for a batch refreshes a replica that does not follow."""


class Answer(tuple[Any, ...], Generic[T]):
    """What a replica's read returns: ``value`` and the published batch whose state gave it.

    ``batch_id``: every partition the read touched is known to hold its state as of this batch
    (the state after every batch up to it; ``-1``: before the first), ``None`` when they hold no
    batch in common (an unaligned replica reading several partitions, some of them idle).
    ``partitions``: each partition read, with the newest batch its state is known to be.

    An immutable ``(value, batch_id, partitions)`` tuple: made in a quarter of a frozen
    dataclass's time, which is a fifth of a key's read."""

    __slots__ = ()

    def __new__(cls, value: T, batch_id: int | None, partitions: Mapping[int, int]) -> Answer[T]:
        return tuple.__new__(cls, (value, batch_id, partitions))

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)

    @property
    def value(self) -> T:
        return self[0]  # type: ignore[no-any-return]

    @property
    def batch_id(self) -> int | None:
        return self[1]  # type: ignore[no-any-return]

    @property
    def partitions(self) -> Mapping[int, int]:
        return self[2]  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"Answer(value={self[0]!r}, batch_id={self[1]!r}, partitions={self[2]!r})"


_answer = tuple.__new__
"""``_answer(Answer, (value, batch_id, partitions))``: an ``Answer`` without ``__new__``'s call (reads of keys)."""


class StateReplica:
    """A read replica of the state of the kstate Spark application ``application_id`` whose
    changelogs are at ``changelog_dir`` (a directory, or an object store URL with
    ``storage_options`` for its fsspec filesystem), built without Spark (see the module
    docstring).

    ``local_dir``: where the copy is kept, so a replica started again only catches up (``None``: a
    temporary directory, deleted on ``close``); one replica at a time uses it. ``aligned``: every
    partition at one batch (aligned copies are kept apart from the others: a copy never goes back).
    ``serdes``: per store, ``(key serde, value serde)`` as ``Stores`` takes them, for stores
    whose serdes are not built-in ones (those are recorded with the state; others read as
    ``bytes``). ``unpickle``: ``transform_with_state`` values stored without a schema read as the
    objects they pickle (runs their code: only for state no one else can write), else as the
    pickles. ``lock_timeout``: seconds to wait for another replica using ``local_dir``.

    The constructor builds or catches up the copy (``refresh``); ``follow(interval)`` keeps it
    current in the background. Use as a context manager, or ``close()``.
    """

    def __init__(
        self,
        changelog_dir: str | os.PathLike[str],
        application_id: str,
        storage_options: Mapping[str, Any] | None = None,
        local_dir: str | os.PathLike[str] | None = None,
        *,
        aligned: bool = False,
        serdes: Mapping[str, tuple[Any, Any]] | None = None,
        unpickle: bool = False,
        lock_timeout: float = 10.0,
    ):
        if not isinstance(application_id, str) or not application_id:
            raise InvalidArgumentError(f"application_id must be a non-empty string, got {application_id!r}")
        location = os.fspath(changelog_dir)
        self.application_id = application_id
        self.aligned = aligned
        self._url = location if is_url(location) else None
        self._changelog_dir = Path() if self._url else Path(location).absolute()
        self._storage_options = dict(storage_options or {})
        self._serdes = dict(serdes or {})
        self._unpickle = unpickle
        self._records = PartitioningLog(self._changelog_dir, application_id, self._url, self._storage_options)
        self._schemas = SchemaLog(self._changelog_dir, application_id, self._url, self._storage_options)
        self._temporary = tempfile.TemporaryDirectory(prefix="kstate-replica-") if local_dir is None else None
        self._local_dir = Path(self._temporary.name if self._temporary else local_dir).absolute()  # type: ignore[arg-type]
        self._lock = FileLock(
            self._local_dir / f"{application_id}.replica.lock", f"replica directory of {application_id}", lock_timeout
        )
        self._gate = ReadersWriterLock()
        self._snapshot: Snapshot | None = None
        """What the reads of keys that skip the lock read (``kstate.spark.serving.snapshot``)."""
        self._reads: dict[str, Callable[[Any], Answer[Any] | None]] = {}
        """The snapshot's reads of a key in one native call, per store (``_core.SnapshotRead``)."""
        self._refreshing = threading.Lock()
        self._record: Partitioning | None = None
        self._routing: Routing | None = None
        self._followers: list[PartitionFollower] = []
        self._next: tuple[Partitioning, list[PartitionFollower]] | None = None
        self._variables = StateVariables({}, unpickle)
        self._published: int | None = None
        """The newest batch id any partition's head showed in a finished refresh."""
        self._following: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self._lock.acquire()
        try:
            self.refresh()
        except BaseException:
            self.close()
            raise

    # -- what the replica follows ------------------------------------------------------------------

    def _served(self) -> Partitioning:
        """The partitioning record of the state served."""
        if self._record is None:
            raise InvalidStateStoreError(
                f"the replica of {self.application_id} has no state to serve yet (aligned: not every partition "
                "has an entry of a batch all have finished, as after a rescale before the query ran)"
            )
        return self._record

    @property
    def num_partitions(self) -> int:
        return self._served().num_partitions

    @property
    def generation(self) -> int:
        """The generation of the application's state followed (a rescale starts a new one)."""
        return self._served().generation

    @property
    def stores(self) -> dict[str, str]:
        """The application's stores and their kinds (``key_value``, ``window``, ``session``)."""
        return {name: d["kind"] for name, d in self._served().stores.items()}

    @property
    def state_variables(self) -> dict[str, dict[str, Any]]:
        """``transform_with_state``'s variables: ``kind`` (``value``, ``list``, ``map``), value
        schemas (``values``, Spark's JSON form, oldest first; empty: pickled), a map's ``key``
        schema, ``ttl``."""
        return {name: dict(v) for name, v in self._variables.recorded.items()}

    def key_serde(self, store: str) -> Any:
        """The serde of ``store``'s keys (what its reads take, and order ``range`` by)."""
        with self._gate.reading():
            self._check_open()
            if store not in self._served().stores:
                raise InvalidArgumentError(f"no store named {store!r}; the application has {sorted(self.stores)}")
            return self._followers[0].copy.key_serde(store)

    @property
    def batches(self) -> dict[int, int]:
        """Per partition, the newest batch its copy is known to hold."""
        with self._gate.reading():
            return {f.partition: f.through for f in self._followers}

    @property
    def batch_id(self) -> int | None:
        """A batch every partition is known to hold now (``None``: none in common)."""
        with self._gate.reading():
            return _common_batch(self._followers)

    # -- keeping up --------------------------------------------------------------------------------

    def refresh(self) -> int | None:
        """Catches up with what the application published since the last refresh (follows a
        rescale); returns ``batch_id``."""
        with self._refreshing:
            self._check_open()
            record = self._records.current()
            if record is None:
                raise InvalidArgumentError(
                    f"no kstate state of application {self.application_id!r} at {self._records.changelog_location} "
                    f"(no partitioning record at {self._records.location}: has the query run a batch?)"
                )
            recorded = self._schemas.recorded()
            variables = StateVariables({} if recorded is None else recorded[1], self._unpickle)
            published = self._published_before_reading(record)
            if self._record is None or record.generation != self._record.generation:
                self._follow_generation(record, variables, published)
            else:
                self._catch_up(record, variables, published)
        return self.batch_id

    def _published_before_reading(self, record: Partitioning) -> int:
        """The newest batch any partition published, as known before this refresh reads the
        heads it catches up to (``PartitionFollower.prepare``)."""
        if self._record is not None and record.generation == self._record.generation:
            followers = self._followers
        elif self._next is not None and self._next[0].generation == record.generation:
            followers = self._next[1]
        else:
            followers = []
        known = [] if self._published is None else [self._published]
        known += [hint for f in followers if (hint := f.published_batch_hint()) is not None]
        if self._published is None:  # nothing read yet: read every head once first
            known += [f.published_batch() for f in (followers or self._new_followers(record))]
        return max(known, default=EMPTY_STATE)

    def _catch_up(self, record: Partitioning, variables: StateVariables, published: int) -> None:
        added = {n: d for n, d in record.stores.items() if self._record is None or n not in self._record.stores}
        for follower in self._followers:
            follower.add_stores(added)
        updates: list[Update | None] = []
        try:
            for follower in self._followers:
                updates.append(follower.prepare(published, self.aligned))
        except BaseException:
            # Nothing of this refresh is served: each partition keeps serving the batch it had.
            for follower, update in zip(self._followers, updates):
                follower.drop(update)
            raise
        with self._gate.writing():
            replaced = [f.apply(update) for f, update in zip(self._followers, updates)]
            self._record, self._variables, self._routing = record, variables, Routing(record)
            self._published = _newest_head(published, self._followers)
        _delete(replaced)

    def _new_followers(self, record: Partitioning) -> list[PartitionFollower]:
        """Followers of ``record``'s generation (kept until they serve, across refreshes)."""
        if self._next is not None and self._next[0].generation == record.generation:
            pending, followers = self._next
            for follower in followers:
                follower.add_stores({n: d for n, d in record.stores.items() if n not in pending.stores})
            self._next = (record, followers)
            return followers
        if self._next is not None:
            for follower in self._next[1]:
                follower.close()
        layout = StateLayout(
            None,
            self._changelog_dir,
            generation_application_id(self.application_id, record.generation),
            self._url,
            self._storage_options,
        )
        # An aligned replica's copies stand on older entries than a replica's that follows the
        # heads, and a copy never goes back: each kind keeps its own.
        directory = self._local_dir / layout.application_id / ("aligned" if self.aligned else "heads")
        followers = []
        try:
            for p in range(record.num_partitions):
                followers.append(
                    PartitionFollower(layout, p, directory / f"partition-{p}", record.stores, self._serdes)
                )
        except BaseException:
            for follower in followers:
                follower.close()
            raise
        self._next = (record, followers)
        return followers

    def _follow_generation(self, record: Partitioning, variables: StateVariables, published: int) -> None:
        """Builds (or catches up) the copies of ``record``'s generation and serves them once
        every partition has one; until then the generation before keeps serving."""
        followers = self._new_followers(record)
        _delete([f.apply(f.prepare(published, self.aligned)) for f in followers])  # not served yet: no lock
        self._published = _newest_head(published, followers)
        if not all(f.servable for f in followers):
            log.info(
                "%s generation %d: not every partition has a state to serve yet", self.application_id, record.generation
            )
            return
        before = self._record
        with self._gate.writing():
            old, self._followers = self._followers, followers
            self._record, self._variables, self._routing = record, variables, Routing(record)
            for follower in old:
                follower.close()
        self._next = None
        if before is not None:
            log.warning(
                "%s was rescaled from %d to %d partitions (generation %d): the replica follows the new partitions",
                self.application_id,
                before.num_partitions,
                record.num_partitions,
                record.generation,
            )
        for generation in range(record.generation):
            shutil.rmtree(
                self._local_dir / generation_application_id(self.application_id, generation), ignore_errors=True
            )

    def follow(self, interval: float = 1.0) -> StateReplica:
        """Refreshes every ``interval`` seconds in a background thread until ``stop_following()``
        or ``close()``; a failed refresh is logged and tried again. Returns the replica."""
        self._check_open()
        if self._following is not None and self._following.is_alive():
            raise InvalidArgumentError("the replica follows already; stop_following() first")
        self._stop.clear()

        def run() -> None:
            while not self._stop.wait(interval):
                try:
                    self.refresh()
                except StoreClosedError:
                    return
                except Exception as error:  # noqa: BLE001 - a following thread outlives a failed refresh
                    log.warning("%s: refresh failed, trying again in %.1f s: %s", self.application_id, interval, error)

        self._following = threading.Thread(target=run, name=f"kstate-replica-{self.application_id}", daemon=True)
        self._following.start()
        return self

    @property
    def following(self) -> bool:
        return self._following is not None and self._following.is_alive()

    def stop_following(self) -> None:
        """Stops the background refreshes (waits for one under way)."""
        self._stop.set()
        if self._following is not None:
            self._following.join()
            self._following = None

    def close(self) -> None:
        """Stops following, closes the copies (they stay in ``local_dir``), releases it."""
        if self._closed:
            return
        self.stop_following()
        with self._refreshing, self._gate.writing():
            self._closed = True
            for follower in self._followers + ([] if self._next is None else self._next[1]):
                follower.close()
            self._followers, self._next = [], None
        self._lock.release()
        if self._temporary is not None:
            self._temporary.cleanup()

    def __enter__(self) -> StateReplica:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the replica of {self.application_id} is closed")

    # -- reads -------------------------------------------------------------------------------------

    def get(
        self,
        store: str,
        key: Any,
        *,
        route_by: Any = None,
        at_least_batch: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Answer[Any]:
        """The value of ``key`` in key-value store ``store`` (``None``: none). ``route_by``: the
        key columns' values (a tuple with several), for a store whose keys are not its key
        column's values. ``at_least_batch``: wait until the key's partition is known to hold
        that batch, up to ``timeout`` seconds (``InvalidStateStoreError`` then)."""
        if route_by is None and at_least_batch is None:
            read = self._reads.get(store)
            answer = None if read is None else read(key)
            if answer is not None:
                return answer
        return self._get(store, key, route_by, at_least_batch, timeout)

    def _get(self, store: str, key: Any, route_by: Any, at_least_batch: int | None, timeout: float) -> Answer[Any]:
        """``get`` by the snapshot's general reads or under the lock (its closures kept out of
        ``get``, whose every call would make their cells)."""
        if route_by is None:
            snapshot = self._current_snapshot()
            try:
                unlocked = snapshot.get(store, key, at_least_batch)
            except KStateError:
                if self._gate.sequence == snapshot.sequence:
                    raise
            else:
                if unlocked is not None and self._gate.sequence == snapshot.sequence:
                    return _answer(Answer, unlocked)
        self._description(store, "key_value")
        return self._read(
            lambda: [self._partition_of(store, key, route_by)],
            lambda copies: copies[0].view(store).get(key),
            at_least_batch,
            timeout,
        )

    def get_many(
        self,
        store: str,
        keys: Any,
        *,
        route_by: Sequence[Any] | None = None,
        at_least_batch: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Answer[Any]:
        """The values of many keys of key-value store ``store``, in their order: a list for a
        list, an Arrow array for an Arrow array (as the stores' ``get_many``). ``route_by``: per
        key, the key columns' values (see ``get``)."""
        import numpy as np

        arrow = is_arrow(keys)
        keys = keys if arrow else list(keys)
        if route_by is None:
            snapshot = self._current_snapshot()
            try:
                if arrow:
                    unlocked = snapshot.get_many_arrow(store, keys, at_least_batch)
                else:
                    unlocked = snapshot.get_many(store, keys, at_least_batch)
            except KStateError:
                if self._gate.sequence == snapshot.sequence:
                    raise
            else:
                if unlocked is not None and self._gate.sequence == snapshot.sequence:
                    return _answer(Answer, unlocked)
        self._description(store, "key_value")
        ids: Any = None

        def partitions() -> list[int]:
            nonlocal ids
            ids = self._partitions_of(store, keys, route_by, arrow)
            return [int(p) for p in np.unique(ids)] or [0]

        def read(copies: list[Any]) -> Any:
            # Arrow keys route in bulk; each partition's keys are read as a list.
            listed = keys.to_pylist() if arrow else keys
            picked = [np.flatnonzero(ids == copy.partition) for copy in copies]
            found = [copy.view(store).get_many([listed[i] for i in rows]) for copy, rows in zip(copies, picked)]
            values = _in_key_order(found, np.concatenate(picked))
            return _arrow_values(values, copies[0].value_serde(store)) if arrow else values

        return self._read(partitions, read, at_least_batch, timeout)

    def range(
        self,
        store: str,
        from_key: Any = None,
        to_key: Any = None,
        *,
        limit: int | None = None,
        at_least_batch: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Answer[list[Any]]:
        """``KeyValue``s of key-value store ``store`` with ``from_key <= key <= to_key``
        (``None``: unbounded) from every partition, in serialized-key order (a merge), at most
        ``limit``."""
        self._description(store, "key_value")

        def read(copies: list[Any]) -> list[Any]:
            serialize = copies[0].key_serde(store).serialize
            found = []
            for copy in copies:
                with copy.view(store).range(from_key, to_key) as entries:
                    found.append(_first(entries, limit))
            return _first(heapq.merge(*found, key=lambda kv: serialize(kv.key)), limit)

        return self._read(self._every_partition, read, at_least_batch, timeout)

    def all(
        self,
        store: str,
        *,
        limit: int | None = None,
        at_least_batch: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Answer[list[Any]]:
        """Every ``KeyValue`` of key-value store ``store``, in serialized-key order (``range``)."""
        return self.range(store, None, None, limit=limit, at_least_batch=at_least_batch, timeout=timeout)

    def fetch(
        self,
        store: str,
        key: Any,
        time_from: int,
        time_to: int | None = None,
        *,
        route_by: Any = None,
        at_least_batch: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Answer[Any]:
        """Window store ``store``: ``fetch(store, key, time)``, the value of ``key``'s window
        starting at ``time`` (``None``: none); ``fetch(store, key, time_from, time_to)``,
        ``KeyValue(window start, value)`` of its windows starting in ``[time_from, time_to]``,
        oldest first."""
        self._description(store, "window")

        def read(copies: list[Any]) -> Any:
            view = copies[0].view(store)
            if time_to is None:
                return view.fetch(key, time_from)
            with view.fetch(key, time_from, time_to) as windows:
                return list(windows)

        return self._read(lambda: [self._partition_of(store, key, route_by)], read, at_least_batch, timeout)

    def fetch_all(
        self,
        store: str,
        time_from: int,
        time_to: int,
        *,
        limit: int | None = None,
        at_least_batch: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Answer[list[Any]]:
        """Window store ``store``: ``KeyValue(Windowed(key, start, end), value)`` of every window
        starting in ``[time_from, time_to]`` from every partition, by start time, then
        serialized key; at most ``limit``."""
        self._description(store, "window")

        def read(copies: list[Any]) -> list[Any]:
            serialize = copies[0].key_serde(store).serialize
            found = []
            for copy in copies:
                with copy.view(store).fetch_all(time_from, time_to) as windows:
                    found.extend(windows)
            found.sort(key=lambda kv: (kv.key.start, serialize(kv.key.key)))
            return found if limit is None else found[:limit]

        return self._read(self._every_partition, read, at_least_batch, timeout)

    def find_sessions(
        self,
        store: str,
        key: Any,
        earliest_session_end_time: int,
        latest_session_start_time: int,
        *,
        route_by: Any = None,
        at_least_batch: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Answer[list[Any]]:
        """Session store ``store``: ``KeyValue(Windowed(key, start, end), aggregate)`` of
        ``key``'s sessions ending at or after ``earliest_session_end_time`` and starting at or
        before ``latest_session_start_time``."""
        self._description(store, "session")

        def read(copies: list[Any]) -> list[Any]:
            view = copies[0].view(store)
            with view.find_sessions(key, earliest_session_end_time, latest_session_start_time) as sessions:
                return list(sessions)

        return self._read(lambda: [self._partition_of(store, key, route_by)], read, at_least_batch, timeout)

    def state_variable(
        self, name: str, key: Any, *, at_least_batch: int | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> Answer[Any]:
        """``transform_with_state``'s state variable ``name`` of grouping key ``key`` (the key
        columns' values: a tuple with several): a value state's value (``None``: none), a list
        state's list, a map state's dict, typed by the recorded schemas (tuples of the newest
        schema's fields) and without entries whose TTL ran out by this machine's clock."""
        routed: dict[str, tuple[Any, ...]] = {}

        def partitions() -> list[int]:
            self._variables.decoder(name)
            assert self._routing is not None
            partition, routed["key"] = self._routing.grouping_key(key)
            return [partition]

        def read(copies: list[Any]) -> Any:
            return self._variables.read(copies[0].view(name), name, routed["key"], now_ms())

        return self._read(partitions, read, at_least_batch, timeout)

    # -- how reads are answered --------------------------------------------------------------------

    def _current_snapshot(self) -> Snapshot:
        """The snapshot of the state served now, taken again after an update."""
        snapshot = self._snapshot
        if snapshot is None or snapshot.sequence != self._gate.sequence:
            with self._gate.reading() as sequence:
                self._check_open()
                followers = self._followers if self._record is not None else []
                snapshot = self._snapshot = Snapshot(sequence, self._routing, followers, self.aligned)
                self._reads = {
                    name: _core.SnapshotRead(views, Answer, self._gate.seqlock, sequence).read
                    for name, views in snapshot.answering.items()
                }
        return snapshot

    def _description(self, store: str, kind: str) -> Mapping[str, Any]:
        """The record's description of ``store``, which must be of ``kind``."""
        with self._gate.reading():
            self._check_open()
            description = self._served().stores.get(store)
        if description is None:
            raise InvalidArgumentError(f"no store named {store!r}; the application has {sorted(self.stores)}")
        if description["kind"] != kind:
            raise InvalidArgumentError(f"store {store!r} is a {description['kind']} store, not a {kind} store")
        if str(description["key"]).startswith("pickle"):
            raise InvalidArgumentError(
                f"store {store!r} holds transform_with_state state: read it with state_variable({store!r}, key)"
            )
        return description

    def _partition_of(self, store: str, key: Any, route_by: Any) -> int:
        assert self._record is not None and self._routing is not None
        if route_by is not None:
            return self._routing.partition_of(self._routing.row(route_by))
        if self._record.stores[store]["key"] not in SERDE_KEYS:
            raise InvalidArgumentError(
                f"the keys of store {store!r} do not give the key columns the state is partitioned by "
                f"({self._record.describe_keys()}): pass route_by=<their values>"
            )
        return self._routing.partition_of((key,))

    def _partitions_of(self, store: str, keys: Any, route_by: Sequence[Any] | None, arrow: bool) -> Any:
        import numpy as np

        assert self._record is not None and self._routing is not None
        routing = self._routing
        if route_by is not None:
            if len(route_by) != len(keys):
                raise InvalidArgumentError(f"route_by has {len(route_by)} rows for {len(keys)} keys")
            return np.asarray(routing.partitions_of_rows([routing.row(r) for r in route_by]))
        if self._record.stores[store]["key"] not in SERDE_KEYS:
            raise InvalidArgumentError(
                f"the keys of store {store!r} do not give the key columns the state is partitioned by "
                f"({self._record.describe_keys()}): pass route_by=<their values, per key>"
            )
        listed = keys.to_pylist() if arrow else keys
        return np.asarray(routing.partitions_of_rows([(k,) for k in listed]))

    def _every_partition(self) -> list[int]:
        return list(range(self.num_partitions))

    def _read(
        self,
        partitions: Callable[[], list[int]],
        read: Callable[[list[Any]], T],
        at_least_batch: int | None,
        timeout: float,
    ) -> Answer[T]:
        """``read(copies of the partitions read)`` under the read lock, once they hold
        ``at_least_batch`` (waiting up to ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._gate.reading() as version:
                self._check_open()
                followers = [self._followers[p] for p in partitions()] if self._record is not None else []
                common = _common_batch(followers)
                ready = (
                    bool(followers) and all(f.servable for f in followers) and (common is not None or not self.aligned)
                )
                if ready and (at_least_batch is None or all(f.through >= at_least_batch for f in followers)):
                    value = read([f.copy for f in followers])
                    return Answer(value, common, {f.partition: f.through for f in followers})
                held = {f.partition: f.through for f in followers}
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                wanted = "a state to serve" if at_least_batch is None else f"batch {at_least_batch}"
                raise InvalidStateStoreError(
                    f"the replica of {self.application_id} did not reach {wanted} within {timeout} s "
                    f"(the partitions read are known to hold batches {held})"
                )
            if self.following:
                self._gate.wait_for_write(version, remaining)
            else:
                self.refresh()
                time.sleep(min(_POLL_SECONDS, max(deadline - time.monotonic(), 0)))


def _common_batch(followers: Sequence[PartitionFollower]) -> int | None:
    """A batch each follower's copy is known to hold: from its entry's batch to ``through``."""
    if not followers:
        return None
    newest_start = max(EMPTY_STATE if f.copy.entry is None else f.copy.entry.batch_id for f in followers)
    oldest_end = min(f.through for f in followers)
    return oldest_end if oldest_end >= newest_start else None


def _newest_head(published: int, followers: Sequence[PartitionFollower]) -> int:
    """``published`` or the newest batch id of the heads ``followers`` read, if newer."""
    return max([published, *(f.head_batch for f in followers if f.head_batch is not None)])


def _delete(directories: Sequence[Path | None]) -> None:
    """Deletes the copies a refresh replaced (after the write lock: no read uses them)."""
    for directory in directories:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def _first(entries: Iterator[Any], limit: int | None) -> list[Any]:
    if limit is None:
        return list(entries)
    return [entry for entry, _ in zip(entries, range(limit))]


def _in_key_order(found: list[list[Any]], rows: Any) -> list[Any]:
    """Values read per partition (``found``, for the key positions ``rows`` in that order) put
    back in the keys' order."""
    import numpy as np

    merged = [value for values in found for value in values]
    return [merged[i] for i in np.argsort(rows, kind="stable")]


def _arrow_values(values: list[Any], value_serde: Any) -> Any:
    """``values`` as the Arrow array a store's ``get_many`` of Arrow keys gives: string, binary,
    int64 or float64 by the value serde, else as Arrow infers it."""
    import pyarrow as pa

    return pa.array(values, arrow_value_type(value_serde))
