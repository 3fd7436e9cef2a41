"""Every read of a replica of ``Application``'s state, each checked against the state in plain
Python (``Application.state_after``) at the batch the read names: per partition read, the
state after the batch that partition's answer names, restricted to the keys routed there."""

from __future__ import annotations

import pyarrow as pa

from kstate.windowed import MAX_TIME

from .application import KEYS, MINUTE, TODAY, Application, State


def _state(app: Application, answer, partition: int) -> State:
    if answer.batch_id is not None:
        assert answer.partitions[partition] >= answer.batch_id
        return app.state_after(answer.batch_id)
    return app.state_after(answer.partitions[partition])


def _check_one_partition(app: Application, answer, key: str) -> State:
    partition = app.partition_of(key)
    assert list(answer.partitions) == [partition]
    assert answer.batch_id == answer.partitions[partition]
    return app.state_after(answer.batch_id)


def check_get(app, replica, key, **options):
    answer = replica.get("counts", key, **options)
    assert answer.value == _check_one_partition(app, answer, key).counts.get(key), key
    latest = replica.get("latest", key, **options)
    assert latest.value == _check_one_partition(app, latest, key).latest.get(key), key
    return answer


def check_get_many(app, replica, keys, arrow=False):
    answer = replica.get_many("counts", pa.array(keys) if arrow else keys)
    values = answer.value.to_pylist() if arrow else answer.value
    if arrow:
        assert answer.value.type == pa.int64()
    assert set(answer.partitions) == {app.partition_of(k) for k in keys} or not keys
    for key, value in zip(keys, values, strict=True):
        assert value == _state(app, answer, app.partition_of(key)).counts.get(key), key
    return answer


def check_all(app, replica, limit=None):
    answer = replica.all("counts", limit=limit)
    assert sorted(answer.partitions) == list(range(app.partitions))
    expected = {}
    for p in range(app.partitions):
        state = _state(app, answer, p)
        expected.update({k: v for k, v in state.counts.items() if app.partition_of(k) == p})
    rows = sorted(expected.items(), key=lambda kv: kv[0].encode())
    assert [(kv.key, kv.value) for kv in answer.value] == rows[:limit]
    return answer


def check_range(app, replica, low, high):
    answer = replica.range("counts", low, high)
    expected = {}
    for p in range(app.partitions):
        state = _state(app, answer, p)
        expected.update({k: v for k, v in state.counts.items() if app.partition_of(k) == p and low <= k <= high})
    assert [(kv.key, kv.value) for kv in answer.value] == sorted(expected.items())
    return answer


def check_windows(app, replica, key):
    time_from, time_to = TODAY, TODAY + 100 * MINUTE
    answer = replica.fetch("per_minute", key, time_from, time_to)
    state = _check_one_partition(app, answer, key)
    expected = sorted((start, n) for (k, start), n in state.windows.items() if k == key)
    assert [(kv.key, kv.value) for kv in answer.value] == expected, key
    if expected:
        one = replica.fetch("per_minute", key, expected[0][0])
        assert one.value == app.state_after(one.batch_id).windows[(key, expected[0][0])]
    return answer


def check_all_windows(app, replica):
    answer = replica.fetch_all("per_minute", TODAY, TODAY + 100 * MINUTE)
    expected = []
    for p in range(app.partitions):
        state = _state(app, answer, p)
        expected += [(k, start, n) for (k, start), n in state.windows.items() if app.partition_of(k) == p]
    expected.sort(key=lambda row: (row[1], row[0].encode()))
    assert [(kv.key.key, kv.key.start, kv.value) for kv in answer.value] == expected
    return answer


def check_sessions(app, replica, key):
    answer = replica.find_sessions("visits", key, 0, MAX_TIME)
    state = _check_one_partition(app, answer, key)
    expected = sorted(ts for k, ts in state.sessions if k == key)
    assert [(kv.key.key, kv.key.start, kv.key.end, kv.value) for kv in answer.value] == [
        (key, ts, ts, 1) for ts in expected
    ], key
    return answer


def check_everything(app, replica):
    """Every kind of read, over every key (and keys never written)."""
    keys = [f"user-{i}" for i in range(KEYS + 2)]
    for key in keys:
        check_get(app, replica, key)
        check_windows(app, replica, key)
        check_sessions(app, replica, key)
    check_get_many(app, replica, keys)
    check_get_many(app, replica, keys[::-1], arrow=True)
    check_get_many(app, replica, [])
    check_all(app, replica)
    check_all(app, replica, limit=5)
    check_range(app, replica, "user-1", "user-2")
    check_all_windows(app, replica)
