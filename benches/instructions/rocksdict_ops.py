"""kv_ops.py's shape on rocksdict (the peer, raw mode, WAL on, its defaults), for callgrind
(kv_instructions.sh rocksdict_get|rocksdict_scan|rocksdict_write); "none": the setup alone."""

import os
import shutil
import sys
import tempfile

from rocksdict import Options, Rdict, WriteBatch

KEYS = [b"key-%012d" % i for i in range(20_000)]
VALUE = os.urandom(100)


def write_all(db: Rdict) -> None:
    batch = WriteBatch(raw_mode=True)
    for key in KEYS:
        batch.put(key, VALUE)
    db.write(batch)


def main(op: str) -> None:
    where = tempfile.mkdtemp()
    db = Rdict(where, options=Options(raw_mode=True))
    write_all(db)
    for _round in range(3):
        if op == "get":
            for key in KEYS:
                db.get(key)
        elif op == "write":
            write_all(db)
        elif op == "scan":
            for _row in db.items(from_key=KEYS[0]):
                pass
    db.close()
    shutil.rmtree(where)


if __name__ == "__main__":
    main(sys.argv[1])
