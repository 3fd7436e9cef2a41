"""The state schemas' records: the format of the state's bytes they carry, recorded before a
newer layout is written and refused when this kstate does not read it."""

import json

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.types import LongType, StructField, StructType  # noqa: E402

from kstate.errors import StateSchemaError  # noqa: E402
from kstate.spark.format.state_schemas import FORMAT_VERSION, SchemaLog, VariableSchemas, reconcile  # noqa: E402

AMOUNT = StructType([StructField("amount", LongType())])
DECLARED = {"recent": VariableSchemas("list", (AMOUNT,))}


def record(format_, kind="list"):
    """A record's bytes as kstate writes them, by hand (kstate before list runs wrote format 1)."""
    variables = {"recent": {"kind": kind, "values": [AMOUNT.jsonValue()], "key": None, "ttl": False}}
    return json.dumps({"format": format_, "variables": variables}, sort_keys=True, indent=1).encode()


def test_state_of_the_format_before_list_runs_gets_this_format_recorded_before_a_query_writes(tmp_path):
    """State written in format 1 (lists one entry per element) reads as it is; the first query of
    this kstate records format 2 before it writes runs, though no schema changed, so a kstate of
    format 1 (which refused any record whose format is not 1) refuses the state from then on."""
    assert FORMAT_VERSION == 2
    log = SchemaLog(tmp_path, "app")
    log.create(0, record(1))
    assert log.current().format == 1
    assert reconcile(log, DECLARED, state_exists=True) == DECLARED
    seq, raw = log.latest()
    assert seq == 1 and json.loads(raw)["format"] == 2
    assert log.current().variables == DECLARED
    reconcile(log, DECLARED, state_exists=True)
    assert log.latest()[0] == 1, "a record of this format and these schemas is not written again"


def test_state_of_a_newer_format_is_refused_before_anything_is_read_or_written(tmp_path):
    log = SchemaLog(tmp_path, "app")
    log.create(0, record(1))
    log.create(1, record(FORMAT_VERSION + 1))
    newer = f"format {FORMAT_VERSION + 1}, a newer kstate's; this kstate reads formats 1 to {FORMAT_VERSION}"
    for read in (log.current, log.recorded, lambda: reconcile(log, DECLARED, state_exists=True)):
        with pytest.raises(StateSchemaError, match=newer):
            read()
    assert log.latest()[0] == 1


@pytest.mark.parametrize("format_", [None, "1", 0, True, 1.0])
def test_a_format_that_is_not_a_version_is_refused(tmp_path, format_):
    log = SchemaLog(tmp_path, "app")
    log.create(0, record(format_))
    with pytest.raises(StateSchemaError, match=f"unknown format {format_!r}"):
        log.recorded()
