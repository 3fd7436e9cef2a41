"""Kafka Streams' rebalance metadata (KIP-268 and later), byte-exact with Kafka.

- ``SubscriptionInfo`` (what each member sends the group leader) and ``AssignmentInfo`` (what the
  leader answers), every version from 1 to 11: ``encode()`` / ``decode(data)`` run through the Rust
  codec. Malformed bytes raise ``kstate.errors.CorruptedDataError`` naming the field and version.
- Version probing: ``Leader.plan`` and ``Member.on_assignment`` are the pure state machines that let
  a group move to a new metadata version in one rolling bounce.
- ``UpgradeFrom`` / ``UpgradeConfig``: the ``upgrade.from`` and ``upgrade.mode`` settings.
- ``GroupSimulator``: a deterministic group that runs rolling upgrades through real bytes.

All value objects are frozen, comparable and hashable; collections are normalized on construction
(tuples sorted, mappings frozen), so two objects with the same content compare equal, and
``decode(x.encode()) == x`` for every object a version can carry.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any, Generic, TypeVar, Union

from kstate import _core
from kstate.errors import InvalidArgumentError

LATEST_SUPPORTED_VERSION = 11
"""The newest metadata version kstate reads and writes (Kafka 3.2+)."""
EARLIEST_PROBEABLE_VERSION = 3
"""The first version that carries the sender's latest version, so that probing works (Kafka 2.0)."""
MIN_NAMED_TOPOLOGY_VERSION = 10
UNKNOWN = -1
"""Stands for the version field that versions 1 and 2 do not have."""
LATEST_OFFSET = -2
"""The offset sum of a running active task (and what v1-6 ``prevTasks`` decode to)."""
UNKNOWN_OFFSET_SUM = -3
"""What v1-6 ``standbyTasks`` decode to."""
NO_NEXT_REBALANCE = 2**63 - 1
"""``nextRebalanceMs`` when no follow-up rebalance is scheduled (``Long.MAX_VALUE``)."""

_I8 = (-(2**7), 2**7 - 1)
_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)

K = TypeVar("K")
V = TypeVar("V")


def _integer(name: str, value: Any, bounds: tuple[int, int] = _I32) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
        raise InvalidArgumentError(f"{name} must be an int in [{bounds[0]}, {bounds[1]}], got {value!r}")
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a str, got {value!r}")
    return value


def _set(obj: Any, **values: Any) -> None:
    """Assigns normalized values to a frozen dataclass during ``__post_init__``."""
    for name, value in values.items():
        object.__setattr__(obj, name, value)


class FrozenMap(Mapping[K, V], Generic[K, V]):
    """An immutable, hashable mapping (for the map fields of the frozen messages)."""

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()):
        self._items: dict[K, V] = dict(items)
        self._hash: int | None = None

    def __getitem__(self, key: K) -> V:
        return self._items[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._items.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self._items == dict(other.items())

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"


@dataclass(frozen=True, order=True)
class TaskId:
    """A task: subtopology and partition, optionally inside a named topology (version 10+).
    An empty topology name means none, as in Kafka."""

    subtopology: int
    partition: int
    named_topology: str | None = None

    def __post_init__(self) -> None:
        _integer("subtopology", self.subtopology)
        _integer("partition", self.partition)
        if self.named_topology is not None:
            _set(self, named_topology=_text("named_topology", self.named_topology) or None)

    def __str__(self) -> str:
        prefix = f"{self.named_topology}__" if self.named_topology else ""
        return f"{prefix}{self.subtopology}_{self.partition}"

    def _as_tuple(self) -> tuple[int, int, str | None]:
        return (self.subtopology, self.partition, self.named_topology)

    def _sort_key(self) -> tuple[int, int, str]:
        return (self.subtopology, self.partition, self.named_topology or "")


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __post_init__(self) -> None:
        _text("topic", self.topic)
        _integer("partition", self.partition)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, order=True)
class HostInfo:
    """An instance's ``application.server`` endpoint (interactive queries)."""

    host: str
    port: int

    def __post_init__(self) -> None:
        _text("host", self.host)
        _integer("port", self.port)

    @classmethod
    def parse(cls, endpoint: str) -> HostInfo:
        """``host:port``, the port after the last colon."""
        host, sep, port = _text("endpoint", endpoint).rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise InvalidArgumentError(f"endpoint {endpoint!r} is not of the form host:port")
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, order=True)
class TaskOffsetSum:
    """The sum of a task's changelog offsets, as a member reports it (``LATEST_OFFSET`` = running)."""

    task_id: TaskId
    offset_sum: int

    def __post_init__(self) -> None:
        if not isinstance(self.task_id, TaskId):
            raise InvalidArgumentError(f"task_id must be a TaskId, got {self.task_id!r}")
        _integer("offset_sum", self.offset_sum, _I64)


class AssignorError(IntEnum):
    """The error codes of AssignmentInfo v4+ and SubscriptionInfo v9+ (spec 2.5)."""

    NONE = 0
    INCOMPLETE_SOURCE_TOPIC_METADATA = 1
    VERSION_PROBING = 2
    """Legacy: Kafka 2.4-2.5 set it locally to force a rejoin; never sent since."""
    ASSIGNMENT_ERROR = 3
    SHUTDOWN_REQUESTED = 4


def _version(name: str, value: Any) -> int:
    version = _integer(name, value)
    if version < 1:
        raise InvalidArgumentError(f"{name} must be at least 1, got {version}")
    return version


def _second_version(name: str, version: int, value: int | None) -> int:
    """The second version field: ``UNKNOWN`` for versions 1-2, by default the latest otherwise."""
    if value is None:
        return UNKNOWN if version < EARLIEST_PROBEABLE_VERSION else LATEST_SUPPORTED_VERSION
    return _integer(name, value)


def _partition_set(name: str, partitions: Iterable[TopicPartition]) -> frozenset[TopicPartition]:
    result = frozenset(partitions)
    if not all(isinstance(tp, TopicPartition) for tp in result):
        raise InvalidArgumentError(f"{name} must hold TopicPartition objects, got {sorted(map(repr, result))}")
    return result


def _host_map(name: str, hosts: Mapping[HostInfo, Iterable[TopicPartition]]) -> FrozenMap[HostInfo, frozenset]:
    result = FrozenMap((host, _partition_set(name, partitions)) for host, partitions in dict(hosts).items())
    if not all(isinstance(host, HostInfo) for host in result):
        raise InvalidArgumentError(f"{name} keys must be HostInfo objects")
    return result


@dataclass(frozen=True)
class SubscriptionInfo:
    """What a member sends the group leader (spec 2.3).

    ``task_offset_sums`` holds one ``TaskOffsetSum`` per task with state, sorted by task. Versions
    1-6 only know "running" (``prevTasks``, offset sum ``LATEST_OFFSET``) and "other"
    (``standbyTasks``, decoded as ``UNKNOWN_OFFSET_SUM``), as in Kafka; fields a version cannot carry
    (an endpoint before v2, ``unique_field`` before v8, ``error_code`` before v9, ``client_tags``
    before v11, named topologies before v10) make ``encode()`` raise ``InvalidArgumentError``.
    """

    version: int
    latest_supported_version: int | None = None
    """The sender's latest version; ``UNKNOWN`` for versions 1-2. Defaults to that, or to 11."""
    process_id: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))
    user_endpoint: str | None = None
    """``host:port`` from ``application.server``; an empty endpoint is ``None``."""
    task_offset_sums: tuple[TaskOffsetSum, ...] = ()
    unique_field: int = 0
    error_code: int = 0
    client_tags: FrozenMap[str, str] = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:
        version = _version("version", self.version)
        if not isinstance(self.process_id, uuid.UUID):
            raise InvalidArgumentError(f"process_id must be a uuid.UUID, got {self.process_id!r}")
        sums = tuple(sorted(self.task_offset_sums, key=lambda s: s.task_id._sort_key()))
        if not all(isinstance(s, TaskOffsetSum) for s in sums):
            raise InvalidArgumentError("task_offset_sums must hold TaskOffsetSum objects")
        tasks = [s.task_id for s in sums]
        if len(set(tasks)) != len(tasks):
            raise InvalidArgumentError(f"task_offset_sums names a task twice: {[str(t) for t in tasks]}")
        tags = FrozenMap(self.client_tags)
        for key, value in tags.items():
            _text("client_tags key", key)
            _text("client_tags value", value)
        _set(
            self,
            latest_supported_version=_second_version(
                "latest_supported_version", version, self.latest_supported_version
            ),
            user_endpoint=None if self.user_endpoint is None else _text("user_endpoint", self.user_endpoint) or None,
            task_offset_sums=sums,
            unique_field=_integer("unique_field", self.unique_field, _I8),
            error_code=_integer("error_code", self.error_code),
            client_tags=tags,
        )

    @property
    def prev_tasks(self) -> frozenset[TaskId]:
        """Tasks reported running (offset sum ``LATEST_OFFSET``): v1-6's ``prevTasks``."""
        return frozenset(s.task_id for s in self.task_offset_sums if s.offset_sum == LATEST_OFFSET)

    @property
    def standby_tasks(self) -> frozenset[TaskId]:
        """Every other task with state: v1-6's ``standbyTasks``."""
        return frozenset(s.task_id for s in self.task_offset_sums if s.offset_sum != LATEST_OFFSET)

    def encode(self) -> bytes:
        return _core.encode_subscription(
            self.version,
            self.latest_supported_version,
            self.process_id.bytes,
            self.user_endpoint,
            [(s.task_id._as_tuple(), s.offset_sum) for s in self.task_offset_sums],
            self.unique_field,
            self.error_code,
            list(self.client_tags.items()),
        )

    @staticmethod
    def decode(data: bytes) -> SubscriptionInfo | FutureSubscriptionInfo:
        """A subscription of a version newer than 11 is read from its first 8 bytes only and comes
        back as ``FutureSubscriptionInfo``: that is what makes version probing work."""
        version, latest, fields = _core.decode_subscription(data)
        if fields is None:
            return FutureSubscriptionInfo(version, latest)
        version, latest, process_id, endpoint, sums, unique_field, error_code, tags = fields
        return SubscriptionInfo(
            version=version,
            latest_supported_version=latest,
            process_id=uuid.UUID(bytes=bytes(process_id)),
            user_endpoint=endpoint,
            task_offset_sums=tuple(TaskOffsetSum(TaskId(*task), total) for task, total in sums),
            unique_field=unique_field,
            error_code=error_code,
            client_tags=FrozenMap(tags),
        )


@dataclass(frozen=True)
class FutureSubscriptionInfo:
    """A subscription newer than kstate reads: only its two version numbers are known."""

    version: int
    latest_supported_version: int


Subscription = Union[SubscriptionInfo, FutureSubscriptionInfo]


@dataclass(frozen=True)
class AssignmentInfo:
    """What the leader sends each member (spec 2.4).

    ``active_tasks`` has one task per assigned partition, in sorted partition order (duplicates
    allowed). ``standby_tasks`` maps each standby task to its source partitions; the host maps give
    every instance's active (v2+) and standby (v6+) partitions. Fields a version cannot carry make
    ``encode()`` raise ``InvalidArgumentError``. An unknown version does not decode.
    """

    version: int
    commonly_supported_version: int | None = None
    """Minimum latest version over the group; ``UNKNOWN`` for versions 1-2. Defaults to that, or 11."""
    active_tasks: tuple[TaskId, ...] = ()
    standby_tasks: FrozenMap[TaskId, frozenset[TopicPartition]] = field(default_factory=FrozenMap)
    partitions_by_host: FrozenMap[HostInfo, frozenset[TopicPartition]] = field(default_factory=FrozenMap)
    standby_partitions_by_host: FrozenMap[HostInfo, frozenset[TopicPartition]] = field(default_factory=FrozenMap)
    error_code: int = 0
    next_rebalance_ms: int = NO_NEXT_REBALANCE

    def __post_init__(self) -> None:
        version = _version("version", self.version)
        active = tuple(self.active_tasks)
        standby = FrozenMap(
            (task, _partition_set("standby_tasks", partitions)) for task, partitions in dict(self.standby_tasks).items()
        )
        if not all(isinstance(task, TaskId) for task in (*active, *standby)):
            raise InvalidArgumentError("active_tasks and standby_tasks must hold TaskId objects")
        _set(
            self,
            commonly_supported_version=_second_version(
                "commonly_supported_version", version, self.commonly_supported_version
            ),
            active_tasks=active,
            standby_tasks=standby,
            partitions_by_host=_host_map("partitions_by_host", self.partitions_by_host),
            standby_partitions_by_host=_host_map("standby_partitions_by_host", self.standby_partitions_by_host),
            error_code=_integer("error_code", self.error_code),
            next_rebalance_ms=_integer("next_rebalance_ms", self.next_rebalance_ms, _I64),
        )

    @classmethod
    def error_assignment(cls, error: AssignorError | int) -> AssignmentInfo:
        """Kafka's ``errorAssignment``: latest version, no tasks, the error code."""
        return cls(LATEST_SUPPORTED_VERSION, LATEST_SUPPORTED_VERSION, error_code=int(error))

    @property
    def error(self) -> AssignorError | None:
        """The error code as an ``AssignorError``, ``None`` for a code Kafka does not define."""
        try:
            return AssignorError(self.error_code)
        except ValueError:
            return None

    def encode(self) -> bytes:
        def hosts(m: Mapping[HostInfo, frozenset[TopicPartition]]) -> list:
            return [((h.host, h.port), [(tp.topic, tp.partition) for tp in tps]) for h, tps in m.items()]

        return _core.encode_assignment(
            self.version,
            self.commonly_supported_version,
            [task._as_tuple() for task in self.active_tasks],
            [(task._as_tuple(), [(tp.topic, tp.partition) for tp in tps]) for task, tps in self.standby_tasks.items()],
            hosts(self.partitions_by_host),
            hosts(self.standby_partitions_by_host),
            self.error_code,
            self.next_rebalance_ms,
        )

    @staticmethod
    def decode(data: bytes) -> AssignmentInfo:
        version, commonly, active, standby, by_host, standby_by_host, error_code, next_ms = _core.decode_assignment(
            data
        )

        def hosts(items: list) -> FrozenMap:
            return FrozenMap(
                (HostInfo(host, port), frozenset(TopicPartition(*tp) for tp in tps)) for (host, port), tps in items
            )

        return AssignmentInfo(
            version=version,
            commonly_supported_version=commonly,
            active_tasks=tuple(TaskId(*task) for task in active),
            standby_tasks=FrozenMap(
                (TaskId(*task), frozenset(TopicPartition(*tp) for tp in tps)) for task, tps in standby
            ),
            partitions_by_host=hosts(by_host),
            standby_partitions_by_host=hosts(standby_by_host),
            error_code=error_code,
            next_rebalance_ms=next_ms,
        )


# ------------------------------------------------------------------------------------------------
# upgrade.from and upgrade.mode

UPGRADE_FROM = "upgrade.from"
UPGRADE_MODE = "upgrade.mode"


@dataclass(frozen=True)
class UpgradeFrom:
    """A validated ``upgrade.from``: the release a rolling upgrade starts from (spec 2.7)."""

    value: str
    forced_subscription_version: int | None
    """1 for 0.10.0, 2 for 0.10.1 to 1.1: the version to send until the second rolling bounce."""
    eager_rebalancing: bool
    """True up to 2.3: the consumer must keep the eager rebalance protocol."""

    VALUES = tuple(_core.upgrade_from_values())

    @classmethod
    def parse(cls, value: str) -> UpgradeFrom:
        """Raises ``InvalidArgumentError`` for anything but one of ``UpgradeFrom.VALUES``."""
        name, _, forced, eager = _core.parse_upgrade_config(_text(UPGRADE_FROM, value), None)
        return cls(name, forced, eager)


class UpgradeMode(Enum):
    """KIP-258's ``upgrade.mode``: how stores change format while ``upgrade.from`` is set."""

    IN_PLACE = "in_place"
    ROLL_OVER = "roll_over"


@dataclass(frozen=True)
class UpgradeConfig:
    """``upgrade.from`` and ``upgrade.mode`` together. The mode is validated even without
    ``upgrade.from`` (a typo is reported) but only takes effect with it."""

    upgrade_from: UpgradeFrom | None = None
    upgrade_mode: UpgradeMode | None = None

    @classmethod
    def parse(cls, config: Mapping[str, Any] | None) -> UpgradeConfig:
        config = config or {}
        raw_from, raw_mode = config.get(UPGRADE_FROM), config.get(UPGRADE_MODE)
        for name, raw in ((UPGRADE_FROM, raw_from), (UPGRADE_MODE, raw_mode)):
            if raw is not None:
                _text(name, raw)
        name, mode, forced, eager = _core.parse_upgrade_config(raw_from, raw_mode)
        return cls(
            upgrade_from=UpgradeFrom(name, forced, eager) if name is not None else None,
            upgrade_mode=UpgradeMode(mode) if mode is not None else None,
        )


# ------------------------------------------------------------------------------------------------
# Version probing


class ProbingProtocol(Enum):
    """How a leader answers a subscription newer than it reads.

    ``KIP268``: the KIP's protocol (Kafka 2.0-2.3): that member gets an empty assignment carrying the
    leader's version, every other member a regular one; the member downgrades and rejoins.
    ``CURRENT``: Kafka 2.6+: every member gets a regular assignment; newer members downgrade after
    applying theirs, and a follow-up rebalance is scheduled at once.
    In both, assignments are written at the group's minimum version and advertise the minimum latest
    version ("commonly supported"), to which members move up once every member supports it.
    """

    KIP268 = "kip268"
    CURRENT = "current"


@dataclass(frozen=True)
class LeaderPlan:
    assignment_version: int
    """The version regular assignments are written in: the minimum received."""
    commonly_supported_version: int
    """What regular assignments advertise (``UNKNOWN`` below version 3)."""
    future_members: tuple[int, ...]
    """Indexes of subscriptions newer than the leader reads: non-empty means probing."""
    future_members_get_empty_assignment: bool

    @property
    def is_probing(self) -> bool:
        return bool(self.future_members)


@dataclass(frozen=True)
class Leader:
    """The group leader's version logic."""

    latest_supported_version: int = LATEST_SUPPORTED_VERSION
    protocol: ProbingProtocol = ProbingProtocol.CURRENT

    def plan(self, subscriptions: Iterable[Subscription]) -> LeaderPlan:
        """Decides versions from every member's subscription (the leader's own included). Raises
        ``TaskAssignmentError`` where Kafka's assignor fails: a leader older than probing sees a
        newer subscription, or a newer one arrives while a member still sends version 1 or 2."""
        versions = [(s.version, s.latest_supported_version) for s in subscriptions]
        latest = _version("latest_supported_version", self.latest_supported_version)
        version, commonly, future, empty = _core.leader_plan(latest, self.protocol.value, versions)
        return LeaderPlan(version, commonly, tuple(future), empty)

    def probing_assignment(self) -> AssignmentInfo:
        """KIP-268's answer to a newer member: no tasks, both versions the leader's latest."""
        return AssignmentInfo(self.latest_supported_version, self.latest_supported_version)


@dataclass(frozen=True)
class MemberReaction:
    apply_assignment: bool
    """False for KIP-268's empty probing answer, which the member ignores."""
    rejoin: bool
    """True when the member rejoins at once (another rebalance)."""
    version_change: tuple[str, int, int] | None
    """``("upgraded" | "downgraded", from_version, to_version)`` or ``None``."""


class Member:
    """One member's version logic: the version it subscribes with, and how assignments change it."""

    def __init__(
        self,
        latest_supported_version: int = LATEST_SUPPORTED_VERSION,
        upgrade_from: UpgradeFrom | None = None,
        protocol: ProbingProtocol = ProbingProtocol.CURRENT,
    ):
        self._native = _core.ProbingMember(
            _version("latest_supported_version", latest_supported_version),
            upgrade_from.value if upgrade_from is not None else None,
            protocol.value,
        )

    @property
    def used_version(self) -> int:
        """The version of the next subscription."""
        return self._native.used_version

    @property
    def latest_supported_version(self) -> int:
        return self._native.latest_supported_version

    @property
    def advertised_latest_version(self) -> int:
        """The subscription's ``latest_supported_version`` field (``UNKNOWN`` in versions 1-2)."""
        return self._native.advertised_latest_version

    def on_assignment(self, assignment: AssignmentInfo) -> MemberReaction:
        """Raises ``TaskAssignmentError`` for an assignment newer than the subscription sent, or
        one advertising a version newer than this member supports."""
        apply, rejoin, change = self._native.on_assignment(
            assignment.version, assignment.commonly_supported_version, assignment.next_rebalance_ms
        )
        return MemberReaction(apply, rejoin, change)

    def __repr__(self) -> str:
        return f"Member(latest_supported_version={self.latest_supported_version}, used_version={self.used_version})"


# ------------------------------------------------------------------------------------------------
# Group simulator


@dataclass(frozen=True)
class Release:
    """The code an instance runs: its newest metadata version (above 11 it is simulated with the
    version-11 layout) and its ``upgrade.from``."""

    latest_supported_version: int
    upgrade_from: UpgradeFrom | None = None

    @classmethod
    def of(cls, latest_supported_version: int, upgrade_from: str | None = None) -> Release:
        return cls(latest_supported_version, UpgradeFrom.parse(upgrade_from) if upgrade_from is not None else None)


@dataclass(frozen=True)
class MemberRecord:
    name: str
    release_version: int
    subscription_version: int
    advertised_latest_version: int
    future: bool
    """The leader could not read this subscription beyond its version numbers."""
    assignment_version: int | None
    """``None`` when no assignment reached the member (a crash, or the leader could not assign)."""
    commonly_supported_version: int | None
    active_tasks: tuple[TaskId, ...]
    standby_tasks: tuple[TaskId, ...]
    used_version_after: int
    rejoin: bool
    crashed: bool


@dataclass(frozen=True)
class RebalanceRecord:
    generation: int
    cause: str
    leader: str
    probing: bool
    failure: str | None
    """Why the leader could not assign (Kafka's assignor throws; the group is stuck)."""
    violations: tuple[str, ...]
    """Broken invariants: should always be empty."""
    members: tuple[MemberRecord, ...]

    def member(self, name: str) -> MemberRecord:
        return next(m for m in self.members if m.name == name)


def _record(raw: tuple) -> RebalanceRecord:
    generation, cause, leader, probing, failure, violations, members = raw
    return RebalanceRecord(
        generation,
        cause,
        leader,
        probing,
        failure,
        tuple(violations),
        tuple(
            MemberRecord(
                name,
                release_version,
                sent,
                advertised,
                future,
                received,
                commonly,
                tuple(TaskId(*t) for t in active),
                tuple(TaskId(*t) for t in standby),
                used_after,
                rejoin,
                crashed,
            )
            for (
                name,
                release_version,
                sent,
                advertised,
                future,
                received,
                commonly,
                active,
                standby,
                used_after,
                rejoin,
                crashed,
            ) in members
        ),
    )


class GroupSimulator:
    """A deterministic Kafka Streams group that runs rebalances through real bytes.

    Every member encodes its subscription at the version it uses; the leader (the longest-standing
    member) decodes them as its own release would, plans versions, places tasks ``0_0 ..`` (one per
    partition of topic ``input``) and encodes each assignment; each member decodes its assignment as
    its release would and reacts. Members that ask to rejoin cause more rebalances until the group
    settles. Each event method returns the records of the rebalances it caused; every record lists
    the invariant violations found (every task active exactly once, every assignment decodable by
    its receiver and equal to what the leader meant, one task per partition, valid reactions).
    """

    def __init__(self, tasks: int = 6, standby_replicas: int = 0, protocol: ProbingProtocol = ProbingProtocol.CURRENT):
        self._native = _core.GroupSimulator(
            _integer("tasks", tasks, (1, 2**31 - 1)),
            _integer("standby_replicas", standby_replicas, (0, 1)),
            protocol.value,
        )
        self._seen = 0

    def _new_records(self, run: Any) -> list[RebalanceRecord]:
        run()
        records = [_record(raw) for raw in self._native.history(self._seen)]
        self._seen += len(records)
        return records

    def start(self, name: str, release: Release) -> list[RebalanceRecord]:
        """A new instance joins."""
        return self._new_records(lambda: self._native.start(_text("name", name), *_release_args(release)))

    def stop(self, name: str) -> list[RebalanceRecord]:
        """An instance leaves (clean shutdown, or a crash noticed at the session timeout)."""
        return self._new_records(lambda: self._native.stop(_text("name", name)))

    def bounce(self, name: str, release: Release) -> list[RebalanceRecord]:
        """Stop, then start with ``release``: one step of a rolling bounce."""
        return self._new_records(lambda: self._native.bounce(_text("name", name), *_release_args(release)))

    def crash_during_next_rebalance(self, name: str) -> None:
        """The instance dies in the next rebalance, after subscribing and before its assignment."""
        self._native.crash_during_next_rebalance(_text("name", name))

    def rebalance(self) -> list[RebalanceRecord]:
        return self._new_records(self._native.rebalance)

    @property
    def leader(self) -> str | None:
        return self._native.leader()

    @property
    def members(self) -> list[str]:
        """Live members in join order; the first leads."""
        return self._native.members()

    @property
    def used_versions(self) -> dict[str, int]:
        """The version each member subscribes with next."""
        return self._native.used_versions()

    @property
    def settled_version(self) -> int | None:
        """The version the group settled on (everyone sent and received it, nobody rejoins)."""
        return self._native.settled_version()

    @property
    def history(self) -> list[RebalanceRecord]:
        return [_record(raw) for raw in self._native.history(0)]


def _release_args(release: Release) -> tuple[int, str | None]:
    if not isinstance(release, Release):
        raise InvalidArgumentError(f"release must be a Release, got {release!r}")
    upgrade_from = release.upgrade_from.value if release.upgrade_from is not None else None
    return _version("latest_supported_version", release.latest_supported_version), upgrade_from


__all__ = [
    "LATEST_SUPPORTED_VERSION",
    "EARLIEST_PROBEABLE_VERSION",
    "MIN_NAMED_TOPOLOGY_VERSION",
    "UNKNOWN",
    "LATEST_OFFSET",
    "UNKNOWN_OFFSET_SUM",
    "NO_NEXT_REBALANCE",
    "FrozenMap",
    "TaskId",
    "TopicPartition",
    "HostInfo",
    "TaskOffsetSum",
    "AssignorError",
    "SubscriptionInfo",
    "FutureSubscriptionInfo",
    "AssignmentInfo",
    "UpgradeFrom",
    "UpgradeMode",
    "UpgradeConfig",
    "ProbingProtocol",
    "LeaderPlan",
    "Leader",
    "MemberReaction",
    "Member",
    "Release",
    "MemberRecord",
    "RebalanceRecord",
    "GroupSimulator",
]
