"""Range reads of window and session stores, for callgrind: ``segmented_reads.py kstate|rocksdict
window_fetch|session_fetch|session_find read|none`` (kv_instructions.sh runs it):
20,000 keys with 10 windows (sessions) each, written, compacted (one table file: this measures a
read, not the shape of the LSM tree), closed and reopened, one warm-up round of every key; then
("read") one more round, or ("none") not.
The rocksdict forms read the same rows under the same store keys as scale_window.py and
scale_session.py do."""

import os
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from scale_session import GAP, session_store_key, session_times  # noqa: E402  (benches/scale_session.py)
from scale_window import MINUTE, T0, row_key, row_value, window_store_key  # noqa: E402  (benches/scale_window.py)

KEYS = [row_key(i) for i in range(20_000)]
ROWS = 10
LAST = T0 + (ROWS - 1) * MINUTE
# find_sessions inside each key's sixth session, as scale_session.py's lookups
AT = session_times(ROWS // 2)[0] + 10_000


def kstate_reads(read: str, where: str):
    from kstate import Stores

    if read == "window_fetch":
        supplier = Stores.persistent_window_store("w", retention_ms=3_600_000, window_size_ms=MINUTE)
        builder = Stores.window_store_builder(supplier, "bytes", "bytes")
    else:
        supplier = Stores.persistent_session_store("s", retention_ms=3_600_000)
        builder = Stores.session_store_builder(supplier, "bytes", "bytes")
    store = builder.build().init(f"{where}/app/0_0")
    for n in range(ROWS):
        values = [row_value(i, n) for i in range(len(KEYS))]
        if read == "window_fetch":
            store.put_all(KEYS, values, [T0 + n * MINUTE] * len(KEYS))
        else:
            start, end = session_times(n)
            store.put_all(KEYS, values, [start] * len(KEYS), [end] * len(KEYS))
        store.commit(changelog_offset=n)
    store.compact()
    store.close()
    store = builder.build().init(f"{where}/app/0_0")
    if read == "window_fetch":
        return store, lambda key: sum(1 for _ in store.fetch(key, T0, LAST))
    if read == "session_fetch":
        return store, lambda key: sum(1 for _ in store.fetch(key))
    return store, lambda key: sum(1 for _ in store.find_sessions(key, AT - GAP, AT + GAP))


def rocksdict_reads(read: str, where: str):
    from rocksdict import Options, Rdict, WriteBatch

    db = Rdict(where, options=Options(raw_mode=True))
    for n in range(ROWS):
        batch = WriteBatch(raw_mode=True)
        for i, key in enumerate(KEYS):
            if read == "window_fetch":
                batch.put(window_store_key(key, T0 + n * MINUTE), row_value(i, n))
            else:
                batch.put(session_store_key(key, *session_times(n)), row_value(i, n))
        db.write(batch)
    db.compact_range(None, None)
    db.close()
    db = Rdict(where, options=Options(raw_mode=True))

    def window_fetch(key: bytes) -> int:
        upper, rows = key + struct.pack(">qi", LAST, -1), 0
        for store_key, _value in db.items(from_key=window_store_key(key, T0)):
            if store_key > upper:
                break
            rows += 1
        return rows

    def session_fetch(key: bytes) -> int:
        rows = 0
        for store_key, _value in db.items(from_key=key):
            if store_key[:-16] != key:
                break
            rows += 1
        return rows

    def session_find(key: bytes) -> int:
        found = 0
        for store_key, _value in db.items(from_key=key + struct.pack(">q", AT - GAP)):
            if store_key[:-16] != key or struct.unpack_from(">q", store_key, len(key) + 8)[0] > AT + GAP:
                break
            found += 1
        return found

    return db, {"window_fetch": window_fetch, "session_fetch": session_fetch, "session_find": session_find}[read]


def main(library: str, read: str, op: str) -> None:
    where = tempfile.mkdtemp()
    store, read_key = (kstate_reads if library == "kstate" else rocksdict_reads)(read, where)
    expected = len(KEYS) * (1 if read == "session_find" else ROWS)
    for _round in range(2 if op == "read" else 1):
        if sum(read_key(key) for key in KEYS) != expected:
            raise SystemExit(f"{library} {read}: wrong row count")
    store.close()
    shutil.rmtree(where)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
