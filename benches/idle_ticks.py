"""What a trigger costs the ``kstate-ticks`` source when no timer is due: ``needs_batch`` reading
the partitions' timer records (one small JSON file each) on the driver, for 2 and 200
partitions, in both time modes.

  .venv/bin/python benches/idle_ticks.py
"""

import json
import tempfile
import time
from pathlib import Path

from kstate.spark.processor.ticks import needs_batch

CALLS = 200


def main() -> None:
    for partitions in (2, 200):
        directory = Path(tempfile.mkdtemp(prefix="kstate-ticks-"))
        for partition in range(partitions):
            record = {"next_timer": 10**13, "watermark": 0, "largest": None}
            (directory / f"part-{partition}.json").write_text(json.dumps(record))
        for mode in ("ProcessingTime", "EventTime"):
            start = time.perf_counter()
            for _ in range(CALLS):
                assert not needs_batch(directory, mode, 0, int(time.time() * 1000))
            print(f"{partitions} partitions, {mode}: {(time.perf_counter() - start) / CALLS * 1e3:.2f} ms per trigger")


if __name__ == "__main__":
    main()
