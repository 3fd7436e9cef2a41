"""The soak of benches/soak.py, short: 60 micro-batches of the same three queries on
``local-cluster[2,1,1024]`` with their changelogs on moto's S3 behind the fault proxy, through
every fault kind at least once (executor and Python worker SIGKILLs, a restart of the queries, a
full state disk, an object store outage, and the proxy's errors throughout). Every output row and
the final state must equal the plain-Python reference. Needs root: the state disks are tmpfs."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

# The harness lives with the benchmarks (benches/soak_harness), which are not a package.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benches"))

from soak_harness.faults import KINDS  # noqa: E402
from soak_harness.run import Soak, SoakConfig  # noqa: E402

FILES = 60


# A stuck file fails the run within file_timeout; this is the backstop, with every thread's stack.
@pytest.mark.timeout(1500)
def test_sixty_batches_through_every_fault_kind_stay_exact(tmp_path):
    report = Soak(SoakConfig(work_dir=tmp_path, files=FILES, check_every=FILES, file_timeout=300)).run()
    assert report["failure"] is None, report["failure"]
    assert report["files"] == FILES
    assert [check["problems"] for check in report["checks"]] == [[]], "the final check compared outputs and state"
    missing = set(KINDS) - set(report["faults"])
    assert not missing, f"fault kinds that never happened: {missing} ({report['faults']})"
    proxy = report["proxy"]
    assert proxy["error500"] + proxy["slowdown503"] + proxy.get("reset_request", 0) + proxy.get("reset_response", 0) > 0
    assert proxy["outage503"] > 0
