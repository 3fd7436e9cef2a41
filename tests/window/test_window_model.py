"""Random operation sequences on window stores against a pure-Python model of Kafka's semantics:
inclusive bounds, segment-then-key order, retention by stream time, duplicates, backward order,
transactions (commit / recover / reopen) and read-committed views."""

import shutil
import struct
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kstate import KeyValue, Stores, Windowed

RETENTION = 180_000  # segment interval max(90 s, 60 s) = 90 s
SIZE = 30_000
MAX = 2**63 - 1
KEYS = st.binary(max_size=2).map(lambda b: bytes(x % 4 * 0x55 for x in b))  # 00 55 aa ff: interleaving keys
# Starts k * 45 s and k * 45 s + 1 ms (retention = 4 steps): the last expired and the first live
# millisecond both occur.
STARTS = st.tuples(st.integers(0, 16), st.integers(0, 1)).map(lambda t: t[0] * 45_000 + t[1])
TIMES = st.one_of(STARTS, st.integers(-1, 700_000), st.just(MAX))
VALUES = st.binary(max_size=8)


def interval():
    return max(RETENTION // 2, 60_000)


def segment(ts):
    return int(ts / interval())  # Java's truncating division


def store_key(key, start, seq):
    return key + struct.pack(">qi", start, seq)


class Model:
    """What a window store holds: (key, start, seq) -> value, with a stream time."""

    def __init__(self, dups):
        self.dups = dups
        self.entries = {}
        self.stream_time = -1
        self.seqnum = 0
        self.dropped = 0

    def copy(self):
        other = Model(self.dups)
        other.entries, other.stream_time = dict(self.entries), self.stream_time
        return other

    def put(self, key, value, start):
        if self.dups and value is None:
            return True
        if self.dups:
            self.seqnum = (self.seqnum + 1) & 0x7FFFFFFF
        seq = self.seqnum if self.dups else 0
        self.stream_time = max(self.stream_time, start)
        if segment(start) < segment(self.stream_time - RETENTION):
            self.dropped += 1
            return False
        if value is None:
            self.entries.pop((key, start, seq), None)
        else:
            self.entries[(key, start, seq)] = value
        return True

    def live_from(self, time_from):
        return max(time_from, self.stream_time - RETENTION + 1)

    def fetch(self, key, time):
        if time < self.live_from(time):
            return None
        found = sorted((seq, v) for (k, s, seq), v in self.entries.items() if k == key and s == time)
        return found[0][1] if found else None

    def rows(self, key_from, key_to, time_from, time_to, reverse):
        low = self.live_from(time_from)
        if key_from is not None and key_to is not None and key_from > key_to:
            return []
        rows = [
            (segment(s), store_key(k, s, seq), k, s, v)
            for (k, s, seq), v in self.entries.items()
            if (key_from is None or k >= key_from) and (key_to is None or k <= key_to) and low <= s <= time_to
        ]
        rows.sort(reverse=reverse)
        return [KeyValue(Windowed(k, s, min(s + SIZE, MAX)), v) for _, _, k, s, v in rows]


class WindowStoreModel(RuleBasedStateMachine):
    persistent = True
    dups = False

    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="kstate-window-model-"))
        self.model = Model(self.dups)
        self.committed = self.model.copy()
        self.offset = None
        self.store = self._open()

    def _open(self):
        factory = Stores.persistent_window_store if self.persistent else Stores.in_memory_window_store
        supplier = factory("w", RETENTION, SIZE, self.dups)
        builder = Stores.window_store_builder(supplier).with_config({"statestore.uncommitted.max.bytes": 300})
        return builder.build().init(self.dir / "app" / "0_0")

    @rule(key=KEYS, value=st.one_of(st.none(), VALUES), start=STARTS)
    def put(self, key, value, start):
        assert self.store.put(key, value, start) == self.model.put(key, value, start)
        assert self.store.dropped_records == self.model.dropped

    @rule(key=KEYS, time=STARTS)
    def fetch_one(self, key, time):
        assert self.store.fetch(key, time) == self.model.fetch(key, time)

    @rule(key=KEYS, time_from=TIMES, time_to=TIMES, reverse=st.booleans())
    def fetch_key(self, key, time_from, time_to, reverse):
        expected = [KeyValue(kv.key.start, kv.value) for kv in self.model.rows(key, key, time_from, time_to, reverse)]
        fetch = self.store.backward_fetch if reverse else self.store.fetch
        with fetch(key, time_from, time_to) as it:
            assert list(it) == expected

    @rule(
        key_from=st.one_of(st.none(), KEYS),
        key_to=st.one_of(st.none(), KEYS),
        time_from=TIMES,
        time_to=TIMES,
        reverse=st.booleans(),
    )
    def fetch_range(self, key_from, key_to, time_from, time_to, reverse):
        expected = self.model.rows(key_from, key_to, time_from, time_to, reverse)
        fetch = self.store.backward_fetch if reverse else self.store.fetch
        assert list(fetch(key_from, key_to, time_from, time_to)) == expected

    @rule(time_from=TIMES, time_to=TIMES, reverse=st.booleans())
    def fetch_all(self, time_from, time_to, reverse):
        fetch = self.store.backward_fetch_all if reverse else self.store.fetch_all
        assert list(fetch(time_from, time_to)) == self.model.rows(None, None, time_from, time_to, reverse)

    @rule(reverse=st.booleans())
    def all(self, reverse):
        got = list(self.store.backward_all() if reverse else self.store.all())
        assert got == self.model.rows(None, None, -(2**63), MAX, reverse)

    @rule(offset=st.integers(0, 1000))
    def commit(self, offset):
        self.store.commit(offset)
        self.committed, self.offset = self.model.copy(), offset

    @rule()
    def recover(self):
        assert self.store.recover(self.offset)
        seqnum, dropped = self.model.seqnum, self.model.dropped
        self.model = self.committed.copy()
        self.model.seqnum, self.model.dropped = seqnum, dropped

    @precondition(lambda self: self.persistent)
    @rule()
    def reopen(self):
        self.store.close()
        self.store = self._open()
        self.model = self.committed.copy()
        assert self.store.committed_offset() == self.offset

    @rule(key_from=st.one_of(st.none(), KEYS), time_from=TIMES)
    def read_committed_view(self, key_from, time_from):
        view = self.store.read_only()
        expected = self.committed.rows(key_from, None, time_from, MAX, False)
        assert list(view.fetch(key_from, None, time_from, MAX)) == expected

    @invariant()
    def stream_time(self):
        assert self.store.stream_time == self.model.stream_time

    def teardown(self):
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class WindowStoreWithDuplicatesModel(WindowStoreModel):
    dups = True


class InMemoryWindowStoreModel(WindowStoreModel):
    persistent = False


SETTINGS = settings(max_examples=50, stateful_step_count=40, deadline=None)
TestWindowStoreModel = WindowStoreModel.TestCase
TestWindowStoreModel.settings = SETTINGS
TestWindowStoreWithDuplicatesModel = WindowStoreWithDuplicatesModel.TestCase
TestWindowStoreWithDuplicatesModel.settings = SETTINGS
TestInMemoryWindowStoreModel = InMemoryWindowStoreModel.TestCase
TestInMemoryWindowStoreModel.settings = SETTINGS
