"""Window stores with duplicates at scale: ``benches/scale_window.py``'s rows and reads in a kstate
window store that retains duplicates, the buffer of a Kafka stream-stream join (each record a
row of its own, under a sequence number), against the same rows in rocksdict. Each record here
is its key's only one in its minute, so both hold K * 10 rows. benches/README.md, issue 21's
fifteenth pass.

    .venv/bin/python benches/scale_join_window.py 1000000 [--runs 2] [--dir /var/tmp] [--kstate-options JSON]
"""

from __future__ import annotations

from scale_window import arguments, print_table, run_kstate, run_rocksdict  # benches/scale_window.py


def run_kstate_duplicates(n_keys: int, where: str, rocksdb_options: dict | None = None) -> dict:
    return run_kstate(n_keys, where, rocksdb_options, retain_duplicates=True)


def main() -> None:
    args = arguments(__doc__, run_kstate_duplicates, run_rocksdict)
    if args is not None:
        print_table(__file__, args)


if __name__ == "__main__":
    main()
