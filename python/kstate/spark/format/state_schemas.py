"""The schemas of ``transform_with_state``'s state variables, recorded with the state.

Records are ``<seq>.json`` files created exclusively in ``<changelog location>/<application_id>-
kstate-state-schemas`` (the application id without a rescale's generation: schemas outlive
rescales); the highest ``seq`` is current. Per state variable: its kind, every value schema it
was ever written with (a typed value names the index of its writer's schema, so old values stay
readable), and a map's key schema (which cannot change: keys are looked up by their bytes).

On the driver, before the query starts, ``reconcile`` checks the processor's declarations
against the record: a new variable, or a compatible schema change (``row_codec.
evolution_problems``) appends a record; anything else raises ``StateSchemaError`` naming every
problem, with the state untouched. The record's existence also marks state written in this
format: state ``transform_with_state`` wrote before kstate recorded schemas is refused.

Each record names the format of the state's bytes (``FORMAT_VERSION``). A kstate reads the
formats up to its own and refuses a newer one before reading anything; the first query of a
newer kstate records its format before it writes, so an older kstate refuses that state instead
of misreading it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kstate import _core
from kstate.errors import StateSchemaError
from kstate.spark.format.record_log import RecordLog
from kstate.spark.format.row_codec import evolution_problems

FORMAT_VERSION = _core.STATE_LAYOUT_VERSION
"""The version of the state's bytes (``rust/core/src/spark/state_layout.rs``'s ``LAYOUT_VERSION``)."""
MAX_VERSIONS = 128
"""A typed value starts with its writer schema's index, one byte below 0x80 (a pickle starts with 0x80)."""


@dataclass(frozen=True)
class VariableSchemas:
    kind: str
    values: tuple[Any, ...] = ()
    """Every value schema (``StructType``) the variable was written with, oldest first; empty:
    pickled values."""
    key: Any = None
    """A map state's key schema (``None``: pickled keys)."""
    ttl: bool = False
    """Whether the processor that last ran declared a TTL (the state reader's ``ttlExpirationMs``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "values": [s.jsonValue() for s in self.values],
            "key": None if self.key is None else self.key.jsonValue(),
            "ttl": self.ttl,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> VariableSchemas:
        from pyspark.sql.types import StructType

        values = tuple(StructType.fromJson(s) for s in raw["values"])
        key = None if raw["key"] is None else StructType.fromJson(raw["key"])
        return cls(raw["kind"], values, key, bool(raw.get("ttl", False)))


@dataclass
class SchemaRecord:
    variables: dict[str, VariableSchemas] = field(default_factory=dict)
    seq: int = -1
    format: int = FORMAT_VERSION
    """The format of the state's bytes when the record was written (``FORMAT_VERSION``)."""


class SchemaLog(RecordLog):
    """The schema records of one application, beside its changelogs."""

    suffix = "kstate-state-schemas"

    def current(self) -> SchemaRecord | None:
        latest = self._latest_fields()
        if latest is None:
            return None
        seq, fields = latest
        variables = {n: VariableSchemas.from_json(v) for n, v in fields["variables"].items()}
        return SchemaRecord(variables, seq, fields["format"])

    def recorded(self) -> tuple[int, dict[str, dict[str, Any]]] | None:
        """``(seq, variables)`` of the current record as written (``VariableSchemas.to_json``:
        schemas in Spark's JSON form), read without PySpark; ``None`` before the first."""
        latest = self._latest_fields()
        return None if latest is None else (latest[0], latest[1]["variables"])

    def _latest_fields(self) -> tuple[int, dict[str, Any]] | None:
        """``(seq, fields)`` of the current record, refused (``StateSchemaError``) when its format
        is not one this kstate reads."""
        latest = self.latest()
        if latest is None:
            return None
        seq, raw = latest
        fields = json.loads(raw)
        format_ = fields.get("format")
        if type(format_) is not int or format_ < 1:
            raise StateSchemaError(f"{self.location}/{seq:020d}.json: unknown format {format_!r}")
        if format_ > FORMAT_VERSION:
            raise StateSchemaError(
                f"{self.location}/{seq:020d}.json: this state is in format {format_}, a newer kstate's; this "
                f"kstate reads formats 1 to {FORMAT_VERSION}: run the application with a newer kstate "
                "(the state was not touched)"
            )
        return seq, fields

    def append(self, variables: Mapping[str, VariableSchemas], after: SchemaRecord | None) -> SchemaRecord:
        """Writes the record after ``after`` (exclusive create: a concurrent writer's record
        makes this raise ``FileExistsError``)."""
        record = SchemaRecord(dict(variables), 0 if after is None else after.seq + 1)
        body = {"format": FORMAT_VERSION, "variables": {n: v.to_json() for n, v in record.variables.items()}}
        self.create(record.seq, json.dumps(body, sort_keys=True, indent=1).encode())
        return record


def reconcile(
    log: SchemaLog, declared: Mapping[str, VariableSchemas], state_exists: bool
) -> dict[str, VariableSchemas]:
    """The schemas each declared variable is read and written with, after checking them against
    what the state was written with (see the module docstring)."""

    current = log.current()
    if current is None and state_exists:
        raise StateSchemaError(
            f"this application's transform_with_state state was written by an older kstate, before state "
            f"schemas were recorded ({log.location} is missing); its format differs: start from a new "
            "application_id (or state_dir and changelog_dir)"
        )
    known = {} if current is None else dict(current.variables)
    problems: list[str] = []
    merged = dict(known)
    for name, wanted in declared.items():
        before = known.get(name)
        if before is None or wanted.kind == "deleted":
            merged[name] = wanted if before is None else before
            continue
        if before.kind != wanted.kind:
            problems.append(f"{name!r} was a {before.kind} state and is declared as {wanted.kind} state")
            continue
        if bool(before.values) != bool(wanted.values):
            was, now = ("typed" if before.values else "pickled"), ("typed" if wanted.values else "pickled")
            problems.append(f"{name!r} was written {was} and is declared {now} (a schema given or dropped)")
            continue
        if (before.key is None) != (wanted.key is None) or (before.key is not None and before.key != wanted.key):
            problems.append(f"{name!r}: a map's key schema cannot change (its keys are looked up by their bytes)")
            continue
        versions = before.values
        if versions and versions[-1] != wanted.values[0]:
            for index, old in enumerate(versions):
                for problem in evolution_problems(old, wanted.values[0]):
                    problems.append(f"{name!r} (values written with schema {index}: {old.simpleString()}): {problem}")
            if wanted.values[0] not in versions:
                versions = versions + (wanted.values[0],)
            if len(versions) > MAX_VERSIONS:
                problems.append(f"{name!r}: more than {MAX_VERSIONS} value schemas")
        merged[name] = VariableSchemas(before.kind, versions, before.key, wanted.ttl)
    if problems:
        raise StateSchemaError(
            "the processor's state schemas cannot read the stored state (nothing was changed):\n  - "
            + "\n  - ".join(problems)
        )
    if current is None or merged != current.variables or current.format != FORMAT_VERSION:
        log.append(merged, current)  # a format recorded before the query writes in it
    return merged
