"""One key-value operation repeated on 20,000 keys (3 rounds) after a commit, for callgrind
(kv_instructions.sh); "none" / "none_nocache": the setup alone. A second argument sets
``statestore.durability`` ("wal" or "changelog")."""

import os
import shutil
import sys
import tempfile

from kstate import Stores

KEYS = [b"key-%012d" % i for i in range(20_000)]
VALUE = os.urandom(100)


def main(op: str, durability: str | None) -> None:
    config = {"statestore.cache.max.bytes": 0} if op.endswith("nocache") else {}
    if durability is not None:
        config["statestore.durability"] = durability
    where = tempfile.mkdtemp()
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("kv"), "bytes", "bytes")
    store = builder.with_config(config).build().init(f"{where}/app/0_0")
    store.put_all(KEYS, [VALUE] * len(KEYS))
    store.commit(changelog_offset=0)
    for round_ in range(3):
        if op == "put":
            for key in KEYS:
                store.put(key, VALUE)
        elif op in ("get", "get_nocache"):
            for key in KEYS:
                store.get(key)
        elif op == "get_many":
            store.get_many(KEYS)
        elif op == "put_all":
            store.put_all(KEYS, [VALUE] * len(KEYS))
        elif op == "commit":
            store.put_all(KEYS, [VALUE] * len(KEYS))
            store.commit(changelog_offset=round_ + 1)
        elif op == "scan":
            with store.range(KEYS[0], b"key-\xff") as rows:
                for _row in rows:
                    pass
    store.close()
    shutil.rmtree(where)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
