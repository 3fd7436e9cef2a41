"""A store like benches/scale.py's (``--build``), or random gets of its present and absent keys
after a warm-up ``get_many`` that opens every table: rates by wall clock and by this thread's CPU
time (less moved by other processes than wall clock); get_instructions.sh counts instructions.

    python benches/instructions/point_gets.py DIR N --build [--options JSON]
    python benches/instructions/point_gets.py DIR N [--options JSON] [--rounds R] [--phase present|absent]
"""

import argparse
import json
import os
import random
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scale  # noqa: E402  (benches/scale.py: batch size, keys, values, budget)


def thread_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def timed(gets: list[bytes], check) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), thread_cpu()
    for key in gets:
        check(key)
    return len(gets) / max(1e-9, time.perf_counter() - wall), len(gets) / max(1e-9, thread_cpu() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir")
    parser.add_argument("n", type=int)
    parser.add_argument("--options", default="{}", help="rocksdb.config.setter as JSON")
    parser.add_argument("--build", action="store_true")
    parser.add_argument("--gets", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--phase", choices=["both", "present", "absent", "none"], default="both")
    args = parser.parse_args()
    from kstate import Stores

    config = {"statestore.memory.max.bytes": scale.BUDGET, "rocksdb.config.setter": json.loads(args.options) or None}
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("scale"), "bytes", "bytes")
    store = builder.with_config(config).build().init(f"{args.dir}/app/0_0")
    if args.build:
        for start in range(0, args.n, scale.BATCH):
            end = min(args.n, start + scale.BATCH)
            store.put_all(scale.row_keys(start, end), scale.row_values(start, end))
            store.commit(changelog_offset=start)
        store.close()
        return
    rng, warm = random.Random(1), random.Random(7)
    store.get_many(
        [b"key-%012d" % warm.randrange(args.n) for _ in range(5000)]
        + [b"key-%012dx" % warm.randrange(args.n) for _ in range(5000)]
    )

    def present(key: bytes) -> None:
        if store.get(key) is None:
            raise SystemExit(f"{key!r} missing")

    def absent(key: bytes) -> None:
        if store.get(key) is not None:
            raise SystemExit(f"{key!r} found")

    for round_ in range(args.rounds):
        probes = [b"key-%012d" % rng.randrange(args.n) for _ in range(args.gets)]
        misses = [b"key-%012dx" % rng.randrange(args.n) for _ in range(args.gets)]
        hit = timed(probes if args.phase in ("both", "present") else [], present)
        miss = timed(misses if args.phase in ("both", "absent") else [], absent)
        print(
            f"round {round_}: present {hit[0]:,.0f}/s ({hit[1]:,.0f}/cpu-s) "
            f"absent {miss[0]:,.0f}/s ({miss[1]:,.0f}/cpu-s)",
            flush=True,
        )
    store.close()


if __name__ == "__main__":
    main()
