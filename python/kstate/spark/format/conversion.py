"""Arrow <-> pandas as Spark's Python workers convert them, for the UDFs kstate runs in
``mapInArrow`` (``transform_with_state``, ``apply_in_pandas``).

Spark hands a pandas UDF timestamps as naive ``datetime64[ns]`` wall-clock times of the session
time zone (``spark.sql.session.timeZone``) and reads naive timestamps it gets back the same way;
it splits a key's rows into frames of at most ``spark.sql.execution.arrow.maxRecordsPerBatch``
rows (and about ``maxBytesPerBatch`` bytes); it coerces an integer column returned for a decimal
column only with ``spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled``, and
otherwise fails with its "Cannot convert the output value" error. ``SessionConversion`` takes
those settings from the session on the driver and applies them in the tasks, column-wise.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kstate.errors import InvalidArgumentError, StateTypeError

UNLIMITED = 2**31 - 1
"""Spark's "no limit" for the Arrow batch sizes (its default ``maxBytesPerBatch``)."""


def to_arrow_schema(schema: Any, timezone: str = "UTC") -> Any:
    """``pyspark.sql.pandas.types.to_arrow_schema`` on every supported PySpark: 4.3 needs the
    time zone of ``TimestampType`` columns, 4.0 takes UTC only."""
    from pyspark.sql.pandas import types

    try:
        return types.to_arrow_schema(schema, timezone=timezone)
    except TypeError:  # PySpark before the timezone argument: UTC timestamps
        return types.to_arrow_schema(schema)


def _conf(spark: Any, name: str, default: str) -> str:
    value = spark.conf.get(name, None)
    return default if value is None else str(value)


@dataclass(frozen=True)
class SessionConversion:
    """The session settings Spark's pandas conversions follow (read once, on the driver)."""

    timezone: str = "UTC"
    max_records: int = 10_000
    max_bytes: int = UNLIMITED
    int_to_decimal: bool = False

    @classmethod
    def of(cls, spark: Any) -> SessionConversion:
        records = int(_conf(spark, "spark.sql.execution.arrow.maxRecordsPerBatch", "10000"))
        byte_limit = _conf(spark, "spark.sql.execution.arrow.maxBytesPerBatch", str(UNLIMITED))
        coercion = _conf(spark, "spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled", "false")
        return cls(
            timezone=_conf(spark, "spark.sql.session.timeZone", "UTC"),
            max_records=records if records > 0 else UNLIMITED,
            max_bytes=_byte_size(byte_limit),
            int_to_decimal=coercion.strip().lower() == "true",
        )

    # -- input -----------------------------------------------------------------------------------

    def to_pandas(self, table: Any) -> Any:
        """``table`` as the frame Spark gives a pandas UDF: timestamps naive in the session zone."""
        import pyarrow as pa

        frame = table.to_pandas()
        for field in table.schema:
            if pa.types.is_timestamp(field.type) and field.type.tz is not None:
                column = frame[field.name]
                frame[field.name] = column.dt.tz_convert(self.timezone).dt.tz_localize(None).astype("datetime64[ns]")
        return frame

    def chunks(self, frame: Any, row_bytes: float) -> Iterator[Any]:
        """A key's rows cut as Spark cuts them: a new frame once it holds ``max_records`` rows or
        (rows x the average Arrow row size) reaches ``max_bytes``; each with index 0..n-1."""
        from pandas import RangeIndex

        per_chunk = self.max_records
        if self.max_bytes != UNLIMITED and row_bytes > 0:
            per_chunk = min(per_chunk, max(1, -(-self.max_bytes // row_bytes)))
            per_chunk = int(per_chunk)
        if len(frame) <= per_chunk:
            yield frame
            return
        for start in range(0, len(frame), per_chunk):
            chunk = frame.iloc[start : start + per_chunk]
            chunk.index = RangeIndex(len(chunk))
            yield chunk

    # -- output ----------------------------------------------------------------------------------

    def from_pandas(self, frame: Any, schema: Any) -> Any:
        """``frame`` (columns matched by name) as an Arrow table of ``schema``, with Spark's rules:
        naive timestamps are session wall-clock times, an integer column for a decimal one is
        coerced only if the session allows it, a value Arrow cannot take raises Spark's error."""
        import pyarrow as pa

        missing = [n for n in schema.names if n not in frame.columns]
        if missing:
            raise InvalidArgumentError(
                f"the returned DataFrame lacks the output columns {missing}; it has {list(frame.columns)}"
            )
        arrays = [self._column(frame[field.name], field) for field in schema]
        return pa.Table.from_arrays(arrays, schema=schema)

    def _column(self, series: Any, field: Any) -> Any:
        import pandas as pd
        import pyarrow as pa

        target = field.type
        if pa.types.is_timestamp(target) and pd.api.types.is_datetime64_dtype(series.dtype):
            series = series.dt.tz_localize(self.timezone, ambiguous=False)
        elif pa.types.is_decimal(target) and pd.api.types.is_integer_dtype(series.dtype) and self.int_to_decimal:
            series = series.map(lambda v: None if pd.isna(v) else Decimal(int(v)))
        try:
            try:
                return pa.Array.from_pandas(series, type=target)
            except pa.ArrowInvalid:  # what Arrow can cast (a wider int, a string to a number) Spark casts
                return pa.Array.from_pandas(series).cast(target)
        except TypeError as error:
            raise OutputConversionError(
                f"Cannot convert the output value of the column '{field.name}' with type '{series.dtype}' to the "
                f"specified return type of the column: '{target}'. Please check if the data types match and try "
                "again."
            ) from error
        except (ValueError, pa.ArrowException) as error:
            raise OutputConversionError(
                f"Failed to convert the value of the column '{field.name}' with type '{series.dtype}' to Arrow "
                f"type '{target}'."
            ) from error


class OutputConversionError(StateTypeError):
    """A returned column that Spark would not convert to its output type either (Spark's
    ``PySparkTypeError``: "Cannot convert the output value ...")."""


def average_row_bytes(batches: list[Any]) -> float:
    """Arrow bytes per row of a partition's input ``batches`` (Spark's measure for
    ``maxBytesPerBatch``: it averages the buffers of the batches read so far)."""
    rows = sum(batch.num_rows for batch in batches)
    return sum(batch.nbytes for batch in batches) / rows if rows else 0.0


def _byte_size(text: str) -> int:
    """Spark's byte-size strings: ``"2"``, ``"64k"``, ``"256m"``, ``"1g"``."""
    text = text.strip().lower().rstrip("b")
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    try:
        return int(number) * scale
    except ValueError:
        raise InvalidArgumentError(f"spark.sql.execution.arrow.maxBytesPerBatch: not a byte size: {text!r}") from None
