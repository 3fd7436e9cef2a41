"""Random operation sequences against a pure-Python model of a transactional store."""

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kstate import Stores

KEYS = st.binary(max_size=3).map(lambda b: bytes(x % 4 * 0x55 for x in b))  # 00 55 aa ff
VALUES = st.binary(max_size=40)


class TransactionalStoreModel(RuleBasedStateMachine):
    max_uncommitted_bytes = 200
    timestamped = True

    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="kstate-model-"))
        self.committed: dict[bytes, bytes] = {}
        self.staged: dict[bytes, bytes | None] = {}
        self.offset = None
        self.store = self._open()

    def _open(self):
        supplier = (
            Stores.persistent_timestamped_key_value_store if self.timestamped else Stores.persistent_key_value_store
        )("m")
        builder = (Stores.timestamped_key_value_store_builder if self.timestamped else Stores.key_value_store_builder)(
            supplier
        )
        config = {"statestore.uncommitted.max.bytes": self.max_uncommitted_bytes}
        return builder.with_config(config).build().init(self.dir / "app" / "0_0")

    def view(self):
        merged = dict(self.committed)
        for k, v in self.staged.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        return merged

    @rule(key=KEYS, value=VALUES)
    def put(self, key, value):
        self.store.put(key, value)
        self.staged[key] = value

    @rule(key=KEYS)
    def delete(self, key):
        assert self.store.delete(key) == self.view().get(key)
        self.staged[key] = None

    @rule(entries=st.lists(st.tuples(KEYS, st.one_of(st.none(), VALUES)), max_size=8))
    def put_all(self, entries):
        self.store.put_all(entries)
        self.staged.update(entries)

    @rule(key=KEYS, value=VALUES)
    def put_if_absent(self, key, value):
        existing = self.view().get(key)
        assert self.store.put_if_absent(key, value) == existing
        if existing is None:
            self.staged[key] = value

    @rule(key=KEYS)
    def get(self, key):
        assert self.store.get(key) == self.view().get(key)

    @rule(low=KEYS, high=KEYS, reverse=st.booleans())
    def range(self, low, high, reverse):
        expected = sorted((k, v) for k, v in self.view().items() if low <= k <= high)
        if reverse:
            got = list(self.store.reverse_range(low, high))
            expected.reverse()
        else:
            got = list(self.store.range(low, high))
        assert [tuple(kv) for kv in got] == expected

    @rule(prefix=KEYS)
    def prefix_scan(self, prefix):
        expected = sorted((k, v) for k, v in self.view().items() if k.startswith(prefix))
        assert [tuple(kv) for kv in self.store.prefix_scan(prefix)] == expected

    @rule()
    def commit(self):
        self.offset = 0 if self.offset is None else self.offset + 1
        self.store.commit(self.offset)
        self.committed = self.view()
        self.staged = {}

    @rule()
    def recover(self):
        wanted = self.offset if self.offset is not None else None
        assert self.store.recover(wanted) is True
        self.staged = {}

    @rule()
    def reopen(self):
        self.store.close()
        self.store = self._open()
        self.staged = {}
        assert self.store.committed_offset() == self.offset

    @precondition(lambda self: not self.staged)
    @rule()
    def committed_view_matches(self):
        assert dict(self.store.read_only(read_committed=True).all()) == self.committed

    @invariant()
    def everything_matches(self):
        assert dict(self.store.all()) == self.view()

    def teardown(self):
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class PlainStoreModel(TransactionalStoreModel):
    max_uncommitted_bytes = 64 * 1024 * 1024
    timestamped = False


SETTINGS = settings(max_examples=75, stateful_step_count=30, deadline=None)
TestSpillingTimestampedStore = TransactionalStoreModel.TestCase
TestSpillingTimestampedStore.settings = SETTINGS
TestPlainStore = PlainStoreModel.TestCase
TestPlainStore.settings = SETTINGS
