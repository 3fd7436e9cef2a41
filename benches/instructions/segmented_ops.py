"""Window or session puts of 20,000 keys in 3 one-minute rounds, a ``put_all`` and a commit per
round (after one round as setup), for callgrind (kv_instructions.sh window|session); "none": the
setup alone."""

import os
import shutil
import sys
import tempfile

from kstate import Stores, Windowed

KEYS = [b"key-%012d" % i for i in range(20_000)]
VALUE = os.urandom(100)
MINUTE = 60_000
T0 = 1_700_000_000_000 // MINUTE * MINUTE


def main(kind: str, op: str) -> None:
    where = tempfile.mkdtemp()
    if kind == "window":
        supplier = Stores.persistent_window_store("w", retention_ms=3_600_000, window_size_ms=MINUTE)
        store = Stores.window_store_builder(supplier, "bytes", "bytes").build().init(f"{where}/app/0_0")

        def put_round(start: int) -> None:
            store.put_all(KEYS, [VALUE] * len(KEYS), [start] * len(KEYS))
    else:
        supplier = Stores.persistent_session_store("s", retention_ms=3_600_000)
        store = Stores.session_store_builder(supplier, "bytes", "bytes").build().init(f"{where}/app/0_0")

        # Built in the setup too: the Python objects are not the store's work.
        sessions = {r: [Windowed(key, T0 + r * MINUTE, T0 + r * MINUTE + 30_000) for key in KEYS] for r in range(4)}

        def put_round(start: int) -> None:
            store.put_all(sessions[(start - T0) // MINUTE], [VALUE] * len(KEYS))

    put_round(T0)
    store.commit(changelog_offset=0)
    for round_ in range(1, 4):
        if op == "put":
            put_round(T0 + round_ * MINUTE)
            store.commit(changelog_offset=round_)
    store.close()
    shutil.rmtree(where)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
