"""Random operation sequences on session stores against a pure-Python model of Kafka's semantics:
find_sessions' inclusive end/start conditions, segment-by-end-then-key order, retention by
stream time (the largest session end), backward order, commit / recover / reopen."""

import shutil
import struct
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kstate import KeyValue, Stores, Windowed

RETENTION = 180_000  # segment interval 90 s
MAX = 2**63 - 1
KEYS = st.binary(max_size=2).map(lambda b: bytes(x % 4 * 0x55 for x in b))
# Times on a coarse grid plus 1 ms, so the retention boundary and equal start/end both occur.
TIMES = st.tuples(st.integers(0, 16), st.integers(0, 1)).map(lambda t: t[0] * 45_000 + t[1])
SESSIONS = st.tuples(TIMES, TIMES).map(sorted)
QUERY_TIMES = st.one_of(TIMES, st.just(0), st.just(MAX))
VALUES = st.binary(max_size=8)


def segment(ts):
    return ts // max(RETENTION // 2, 60_000)


class Model:
    def __init__(self):
        self.sessions = {}  # (key, start, end) -> aggregate
        self.stream_time = -1
        self.dropped = 0

    def copy(self):
        other = Model()
        other.sessions, other.stream_time = dict(self.sessions), self.stream_time
        return other

    def put(self, key, start, end, value):
        self.stream_time = max(self.stream_time, end)
        if segment(end) < segment(self.stream_time - RETENTION):
            self.dropped += 1
            return False
        if value is None:
            self.sessions.pop((key, start, end), None)
        else:
            self.sessions[(key, start, end)] = value
        return True

    def remove(self, key, start, end):
        """Kafka's remove: advances stream time, deletes where the segment exists, counts nothing."""
        self.stream_time = max(self.stream_time, end)
        self.sessions.pop((key, start, end), None)

    def live_from(self):
        return self.stream_time - RETENTION + 1

    def find(self, key_from, key_to, earliest_end, latest_start, reverse):
        earliest_end = max(earliest_end, self.live_from())
        if key_from is not None and key_to is not None and key_from > key_to:
            return []
        rows = [
            (segment(e), k + struct.pack(">qq", e, s), k, s, e, v)
            for (k, s, e), v in self.sessions.items()
            if (key_from is None or k >= key_from)
            and (key_to is None or k <= key_to)
            and e >= earliest_end
            and s <= latest_start
        ]
        rows.sort(reverse=reverse)
        return [KeyValue(Windowed(k, s, e), v) for _, _, k, s, e, v in rows]

    def fetch_session(self, key, start, end):
        return None if end < self.live_from() else self.sessions.get((key, start, end))


class SessionStoreModel(RuleBasedStateMachine):
    persistent = True

    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="kstate-session-model-"))
        self.model = Model()
        self.committed = self.model.copy()
        self.offset = None
        self.store = self._open()

    def _open(self):
        factory = Stores.persistent_session_store if self.persistent else Stores.in_memory_session_store
        builder = Stores.session_store_builder(factory("s", RETENTION))
        return builder.with_config({"statestore.uncommitted.max.bytes": 300}).build().init(self.dir / "app" / "0_0")

    @rule(key=KEYS, session=SESSIONS, value=st.one_of(st.none(), VALUES))
    def put(self, key, session, value):
        start, end = session
        got = self.store.put(Windowed(key, start, end), value)
        assert got == self.model.put(key, start, end, value)
        assert self.store.dropped_records == self.model.dropped

    @rule(key=KEYS, session=SESSIONS)
    def remove(self, key, session):
        self.store.remove(Windowed(key, *session))
        self.model.remove(key, *session)
        assert self.store.dropped_records == self.model.dropped

    @rule(key=KEYS, session=SESSIONS)
    def fetch_session(self, key, session):
        assert self.store.fetch_session(key, *session) == self.model.fetch_session(key, *session)

    @rule(key=KEYS, earliest_end=QUERY_TIMES, latest_start=QUERY_TIMES, reverse=st.booleans())
    def find_sessions_of_key(self, key, earliest_end, latest_start, reverse):
        find = self.store.backward_find_sessions if reverse else self.store.find_sessions
        expected = self.model.find(key, key, earliest_end, latest_start, reverse)
        assert list(find(key, earliest_end, latest_start)) == expected

    @rule(
        key_from=st.one_of(st.none(), KEYS),
        key_to=st.one_of(st.none(), KEYS),
        earliest_end=QUERY_TIMES,
        latest_start=QUERY_TIMES,
        reverse=st.booleans(),
    )
    def find_sessions_of_range(self, key_from, key_to, earliest_end, latest_start, reverse):
        find = self.store.backward_find_sessions if reverse else self.store.find_sessions
        expected = self.model.find(key_from, key_to, earliest_end, latest_start, reverse)
        assert list(find(key_from, key_to, earliest_end, latest_start)) == expected

    @rule(key=KEYS, reverse=st.booleans())
    def fetch(self, key, reverse):
        fetch = self.store.backward_fetch if reverse else self.store.fetch
        assert list(fetch(key)) == self.model.find(key, key, 0, MAX, reverse)

    @rule(offset=st.integers(0, 1000))
    def commit(self, offset):
        self.store.commit(offset)
        self.committed, self.offset = self.model.copy(), offset

    @rule()
    def recover(self):
        assert self.store.recover(self.offset)
        dropped = self.model.dropped
        self.model = self.committed.copy()
        self.model.dropped = dropped

    @precondition(lambda self: self.persistent)
    @rule()
    def reopen(self):
        self.store.close()
        self.store = self._open()
        self.model = self.committed.copy()

    @rule()
    def read_committed_view(self):
        view = self.store.read_only()
        assert list(view.fetch(None, None)) == self.committed.find(None, None, 0, MAX, False)

    @invariant()
    def stream_time(self):
        assert self.store.stream_time == self.model.stream_time

    def teardown(self):
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class InMemorySessionStoreModel(SessionStoreModel):
    persistent = False


SETTINGS = settings(max_examples=50, stateful_step_count=40, deadline=None)
TestSessionStoreModel = SessionStoreModel.TestCase
TestSessionStoreModel.settings = SETTINGS
TestInMemorySessionStoreModel = InMemorySessionStoreModel.TestCase
TestInMemorySessionStoreModel.settings = SETTINGS
