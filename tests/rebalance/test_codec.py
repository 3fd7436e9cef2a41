"""SubscriptionInfo / AssignmentInfo through the Python API: derived spec vectors (the same layouts
the Rust tests check), hypothesis round trips of every version, and typed errors."""

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstate.errors import CorruptedDataError, InvalidArgumentError
from kstate.rebalance import (
    LATEST_OFFSET,
    UNKNOWN,
    UNKNOWN_OFFSET_SUM,
    AssignmentInfo,
    AssignorError,
    FutureSubscriptionInfo,
    HostInfo,
    SubscriptionInfo,
    TaskId,
    TaskOffsetSum,
    TopicPartition,
)

from .strategies import assignments, subscriptions

PID = "00112233445566778899aabbccddeeff"
PROCESS_ID = uuid.UUID(PID)
ENDPOINT = "0000000e 6c6f63616c686f73743a38303830"  # bytes(i32) "localhost:8080"


def unhex(*parts):
    return bytes.fromhex("".join(parts).replace(" ", "").replace("\n", ""))


# Spec 2.3 vectors, derived field by field from the layout tables (section 6 has none for these).
SUBSCRIPTION_VECTORS = [
    (
        SubscriptionInfo(
            1,
            process_id=PROCESS_ID,
            task_offset_sums=(
                TaskOffsetSum(TaskId(0, 1), LATEST_OFFSET),
                TaskOffsetSum(TaskId(1, 2), UNKNOWN_OFFSET_SUM),
            ),
        ),
        unhex("00000001", PID, "00000001 00000000 00000001", "00000001 00000001 00000002"),
    ),
    (
        SubscriptionInfo(2, process_id=PROCESS_ID, user_endpoint="localhost:8080"),
        unhex("00000002", PID, "00000000 00000000", ENDPOINT),
    ),
    (
        SubscriptionInfo(4, 11, PROCESS_ID, task_offset_sums=(TaskOffsetSum(TaskId(3, 4), LATEST_OFFSET),)),
        unhex("00000004 0000000b", PID, "00000001 00000003 00000004 00000000", "00000000"),
    ),
    (
        SubscriptionInfo(
            9,
            11,
            PROCESS_ID,
            "localhost:8080",
            (TaskOffsetSum(TaskId(0, 0), LATEST_OFFSET), TaskOffsetSum(TaskId(0, 1), 100)),
            unique_field=-1,
            error_code=AssignorError.SHUTDOWN_REQUESTED,
        ),
        unhex(
            "00000009 0000000b",
            PID,
            ENDPOINT,
            "00000001 00000000 00000002 00000000 fffffffffffffffe 00000001 0000000000000064",
            "ff 00000004",
        ),
    ),
    (
        SubscriptionInfo(
            11,
            11,
            PROCESS_ID,
            None,
            (TaskOffsetSum(TaskId(0, 0), LATEST_OFFSET), TaskOffsetSum(TaskId(2, 3, "tp"), 5)),
            unique_field=7,
            client_tags={"az": "us-east-1a"},
        ),
        unhex(
            "0000000b 0000000b",
            PID,
            "00000000",
            "00000002 00000000 00000000 fffffffffffffffe ffff 00000002 00000003 0000000000000005 0002 7470",
            "07 00000000",
            "00000001 00000002 617a 0000000a 75732d656173742d3161",
        ),
    ),
]

ASSIGNMENT_VECTORS = [
    (
        AssignmentInfo(
            1, active_tasks=(TaskId(0, 0), TaskId(0, 1)), standby_tasks={TaskId(1, 0): {TopicPartition("t", 0)}}
        ),
        unhex(
            "00000001",
            "00000002 00000000 00000000 00000000 00000001",
            "00000001 00000001 00000000 00000001 0001 74 00000000",
        ),
    ),
    (
        AssignmentInfo(
            4, 4, partitions_by_host={HostInfo("h", 8080): {TopicPartition("t", 1)}}, error_code=AssignorError.NONE
        ),
        unhex(
            "00000004 00000004", "00000000 00000000", "00000001 0001 68 00001f90 00000001 0001 74 00000001", "00000000"
        ),
    ),
    (
        AssignmentInfo(
            6,
            6,
            partitions_by_host={HostInfo("h", 8080): {TopicPartition("t", 0)}},
            standby_partitions_by_host={HostInfo("g", 9090): {TopicPartition("a", 5)}},
            error_code=3,
        ),
        unhex(
            "00000006 00000006 00000000 00000000",
            "00000002 00000000 0001 61 00000001 0001 74",
            "00000001 0001 68 00001f90 00000001 00000001 00000000",
            "00000001 0001 67 00002382 00000001 00000000 00000005",
            "00000003",
        ),
    ),
    (
        AssignmentInfo(10, 11, active_tasks=(TaskId(0, 0, "é😀"),), next_rebalance_ms=0),
        unhex(
            "0000000a 0000000b",
            "00000001 00000000 00000000 00000003 00e9 d83d de00",
            "00000000 00000000 00000000 00000000 00000000",
            "0000000000000000",
        ),
    ),
]


@pytest.mark.parametrize(("info", "data"), SUBSCRIPTION_VECTORS, ids=lambda x: getattr(x, "version", ""))
def test_subscription_vectors(info, data):
    assert info.encode().hex() == data.hex()
    assert SubscriptionInfo.decode(data) == info


@pytest.mark.parametrize(("info", "data"), ASSIGNMENT_VECTORS, ids=lambda x: getattr(x, "version", ""))
def test_assignment_vectors(info, data):
    assert info.encode().hex() == data.hex()
    assert AssignmentInfo.decode(data) == info


@pytest.mark.parametrize("version", range(1, 12))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_round_trip_of_every_version(version, data):
    for message, kind in (
        (data.draw(subscriptions(version)), SubscriptionInfo),
        (data.draw(assignments(version)), AssignmentInfo),
    ):
        encoded = message.encode()
        decoded = kind.decode(encoded)
        assert decoded == message
        assert hash(decoded) == hash(message)
        assert decoded.encode() == encoded


def test_defaults_and_normalization():
    assert SubscriptionInfo(2).latest_supported_version == UNKNOWN
    assert SubscriptionInfo(7).latest_supported_version == 11
    assert AssignmentInfo(1).commonly_supported_version == UNKNOWN
    assert TaskId(0, 1, "") == TaskId(0, 1)
    assert str(TaskId(0, 1, "topo")) == "topo__0_1"
    assert SubscriptionInfo(2, user_endpoint="").user_endpoint is None
    # Order of construction does not matter.
    a = SubscriptionInfo(7, task_offset_sums=(TaskOffsetSum(TaskId(1, 0), 1), TaskOffsetSum(TaskId(0, 0), 2)))
    b = SubscriptionInfo(7, task_offset_sums=(TaskOffsetSum(TaskId(0, 0), 2), TaskOffsetSum(TaskId(1, 0), 1)))
    assert a == b and a.prev_tasks == frozenset() and a.standby_tasks == {TaskId(0, 0), TaskId(1, 0)}
    assert AssignmentInfo.error_assignment(AssignorError.SHUTDOWN_REQUESTED).error is AssignorError.SHUTDOWN_REQUESTED
    assert AssignmentInfo(4, error_code=99).error is None


def test_newer_subscription_reads_only_its_versions():
    assert SubscriptionInfo.decode(unhex("0000000c 0000000d deadbeef")) == FutureSubscriptionInfo(12, 13)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "SubscriptionInfo: version"),
        (unhex("00000000"), "unknown version 0"),
        (unhex("0000000c 0000"), "latestSupportedVersion"),
        (unhex("00000001", PID, "7fffffff"), "v1: prevTasks: count 2147483647"),
        (unhex("00000002", PID, "00000000 00000000 00000002 c328"), "v2: userEndPoint: invalid UTF-8"),
        (unhex("00000003 00000002", PID, "00000000 00000000 00000000"), "v3: latestSupportedVersion"),
        (SUBSCRIPTION_VECTORS[0][1] + b"\0", "v1: 1 bytes left"),
    ],
)
def test_malformed_subscription_is_corrupted_data(data, message):
    with pytest.raises(CorruptedDataError, match=message):
        SubscriptionInfo.decode(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\0\0", "AssignmentInfo: version"),
        (unhex("0000000c 0000000c"), "unknown version 12"),
        (unhex("00000001 00000001 00000000"), "v1: activeTasks"),
        (unhex("0000000a 0000000a 00000001 00000000 00000000 00000001 d800"), "unpaired surrogate"),
        (
            unhex("00000005 00000005 00000000 00000000 00000000 00000001 0001 68 00000001 00000001 00000009 00000000"),
            "topic index 9 is not in the dictionary",
        ),
    ],
)
def test_malformed_assignment_is_corrupted_data(data, message):
    with pytest.raises(CorruptedDataError, match=message):
        AssignmentInfo.decode(data)


@pytest.mark.parametrize(
    "build",
    [
        lambda: SubscriptionInfo(1, user_endpoint="h:1").encode(),
        lambda: SubscriptionInfo(7, unique_field=1).encode(),
        lambda: SubscriptionInfo(9, task_offset_sums=(TaskOffsetSum(TaskId(0, 0, "n"), 1),)).encode(),
        lambda: SubscriptionInfo(12).encode(),
        lambda: SubscriptionInfo(5, 4).encode(),
        lambda: AssignmentInfo(5, standby_partitions_by_host={HostInfo("h", 1): set()}).encode(),
        lambda: AssignmentInfo(3, error_code=1).encode(),
        lambda: AssignmentInfo(1, partitions_by_host={HostInfo("h", 1): set()}).encode(),
        lambda: AssignmentInfo(2, commonly_supported_version=2).encode(),
        lambda: SubscriptionInfo(0),
        lambda: SubscriptionInfo(7, unique_field=200),
        lambda: SubscriptionInfo(7, task_offset_sums=(TaskOffsetSum(TaskId(0, 0), 1), TaskOffsetSum(TaskId(0, 0), 2))),
        lambda: TaskId(2**31, 0),
        lambda: HostInfo.parse("no-port"),
    ],
)
def test_invalid_messages_raise_invalid_argument(build):
    with pytest.raises(InvalidArgumentError):
        build()
