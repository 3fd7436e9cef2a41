"""Stored state's keys: grouping keys pickled natively are the very bytes ``pickle.dumps`` writes."""

import datetime
import decimal
import enum
import math
import pickle
import random
from functools import partial

import numpy as np
import pytest

from kstate import _core
from kstate.spark.format.state_values import pickled_key, pickled_keys


class Text(str):
    pass


class Level(enum.IntEnum):
    LOW = 1


def values() -> list:
    """Values at every boundary of pickle's opcodes, and of types the core leaves to pickle."""
    ints = [0, 1, 127, 128, 255, 256, 65_535, 65_536, 2**24, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1]
    ints += [-i for i in ints] + [-(2**31) - 1, -(2**63), 2**63, -(2**63) - 1, 2**64, 10**30]
    ints += [sign * (2**bits + delta) for bits in range(7, 64, 8) for delta in (-1, 0, 1) for sign in (1, -1)]
    floats = [0.0, -0.0, 1.5, -2.25, 1e300, 5e-324, math.inf, -math.inf, math.nan, float.fromhex("-nan")]
    texts = ["", "a", "é", "日本", "🙂", "\ud800", "a\x00b", "x" * 255, "x" * 256, "é" * 128, "x" * 70_000]
    raw = [b"", b"\x00", b"x" * 255, b"x" * 256, b"x" * 70_000]
    others = [Text("sub"), Level.LOW, np.int64(5), np.float64(1.0), bytearray(b"b"), ("nested",)]
    others += [datetime.date(2024, 1, 1), datetime.datetime(2024, 1, 1, 12), decimal.Decimal("1.5")]
    return [None, True, False, *ints, *floats, *texts, *raw, *others]


def test_random_keys_pickle_as_pickle_pickles_them():
    """50,000 keys of 0-6 values drawn from ``values()``, an object repeated in a key about a
    third of the time (pickle writes it once and then fetches it from its memo) and strings
    equal but not the same object (written twice): each the bytes of ``pickle.dumps(key,
    protocol=4)``; keys that are no tuple (a list) too."""
    rng = random.Random(45)
    pool = values()
    keys = []
    for _ in range(50_000):
        key = [rng.choice(pool) for _ in range(rng.randrange(7))]
        if key and rng.random() < 0.3:
            key.append(rng.choice(key))
        if rng.random() < 0.1:
            key.append("".join(["a", "b"]))  # equal to another "ab", not the same object
            key.append("".join(["a", "b"]))
        keys.append(tuple(key))
    keys += [["a", 1], "a", 1]
    expected = [pickle.dumps(key, protocol=4) for key in keys]
    assert pickled_keys(keys) == expected
    assert pickled_keys(iter(keys[:100])) == expected[:100]
    assert [pickled_key(key) for key in keys[:1000]] == expected[:1000]


def test_spark_grouping_keys_are_written_natively():
    """The keys Spark's grouping columns give (strings, longs, doubles, booleans, binary, nulls)
    never reach pickle; a key of a type the core does not write does."""
    calls = []

    def dumps(key):
        calls.append(key)
        return pickle.dumps(key, protocol=4)

    keys = [("user-1", 7, 1.5, True, b"\x01", None), ("é" * 300, -(2**40)), ()]
    assert _core.state_pickled_keys(keys, dumps) == [pickle.dumps(k, protocol=4) for k in keys]
    assert calls == []
    day = (datetime.date(2024, 1, 1),)
    assert _core.state_pickled_keys([day], dumps) == [pickle.dumps(day, protocol=4)]
    assert calls == [day]


def test_a_key_pickle_refuses_raises_as_pickle_does():
    key = (lambda: None,)
    with pytest.raises(Exception) as refused:  # noqa: PT011 (whatever pickle raises)
        pickle.dumps(key, protocol=4)
    with pytest.raises(refused.type):
        _core.state_pickled_keys([key], partial(pickle.dumps, protocol=4))
