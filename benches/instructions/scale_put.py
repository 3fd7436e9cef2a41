"""The put phase of benches/scale.py alone (put_all of 100k keys and a commit, rocksdict: a
WriteBatch of 100k and a write) for N keys, for callgrind: main-thread instructions per key are
this run's minus a run with N = 0, over N.

    valgrind --tool=callgrind --separate-threads=yes <python> benches/instructions/scale_put.py kstate|rocksdict N
"""

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from scale import BATCH, BUDGET, row_keys, row_values  # noqa: E402  (benches/scale.py)


def main(library: str, n: int) -> None:
    where = tempfile.mkdtemp(dir=os.environ.get("SCALE_PUT_DIR"))
    if library == "kstate":
        from kstate import Stores

        builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("scale"), "bytes", "bytes")
        store = builder.with_config({"statestore.memory.max.bytes": BUDGET}).build().init(f"{where}/app/0_0")
        for start in range(0, n, BATCH):
            store.put_all(row_keys(start, min(n, start + BATCH)), row_values(start, min(n, start + BATCH)))
            store.commit(changelog_offset=start)
        store.close()
    else:
        from rocksdict import Options, Rdict, WriteBatch

        db = Rdict(f"{where}/rocksdict", options=Options(raw_mode=True))
        for start in range(0, n, BATCH):
            batch = WriteBatch(raw_mode=True)
            for key, value in zip(row_keys(start, min(n, start + BATCH)), row_values(start, min(n, start + BATCH))):
                batch.put(key, value)
            db.write(batch)
        db.close()
    shutil.rmtree(where)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
