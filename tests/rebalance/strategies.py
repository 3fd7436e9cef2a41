"""Hypothesis strategies for valid rebalance messages of a given version."""

from hypothesis import strategies as st

from kstate.rebalance import (
    LATEST_OFFSET,
    MIN_NAMED_TOPOLOGY_VERSION,
    UNKNOWN_OFFSET_SUM,
    AssignmentInfo,
    HostInfo,
    SubscriptionInfo,
    TaskId,
    TaskOffsetSum,
    TopicPartition,
)

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
# Any text without lone surrogates (hypothesis excludes them), including U+0000 and emoji.
TEXT = st.text(max_size=12)
NAMES = st.text(min_size=1, max_size=12)


def task_ids(version):
    named = st.none() | NAMES if version >= MIN_NAMED_TOPOLOGY_VERSION else st.none()
    return st.builds(TaskId, I32, I32, named)


def partitions():
    return st.frozensets(st.builds(TopicPartition, TEXT, I32), max_size=3)


def host_maps():
    return st.dictionaries(st.builds(HostInfo, TEXT, I32), partitions(), max_size=3)


@st.composite
def subscriptions(draw, version):
    sums = st.sampled_from([LATEST_OFFSET, UNKNOWN_OFFSET_SUM]) if version < 7 else I64
    tasks = draw(st.dictionaries(task_ids(version), sums, max_size=5))
    return SubscriptionInfo(
        version=version,
        latest_supported_version=None if version < 3 else draw(st.integers(version, 2**31 - 1)),
        process_id=draw(st.uuids()),
        user_endpoint=draw(st.none() | NAMES) if version >= 2 else None,
        task_offset_sums=tuple(TaskOffsetSum(t, s) for t, s in tasks.items()),
        unique_field=draw(st.integers(-128, 127)) if version >= 8 else 0,
        error_code=draw(I32) if version >= 9 else 0,
        client_tags=draw(st.dictionaries(TEXT, TEXT, max_size=3)) if version >= 11 else {},
    )


@st.composite
def assignments(draw, version):
    return AssignmentInfo(
        version=version,
        commonly_supported_version=None if version < 3 else draw(I32),
        active_tasks=tuple(draw(st.lists(task_ids(version), max_size=5))),
        standby_tasks=draw(st.dictionaries(task_ids(version), partitions(), max_size=3)),
        partitions_by_host=draw(host_maps()) if version >= 2 else {},
        standby_partitions_by_host=draw(host_maps()) if version >= 6 else {},
        error_code=draw(I32) if version >= 4 else 0,
        next_rebalance_ms=draw(I64) if version >= 7 else 2**63 - 1,
    )
