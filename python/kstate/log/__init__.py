"""Kafka's log formats. ``kstate.log.records``: legacy (magic v0/v1) message sets to and from
bytes, as ``Record`` lists or Arrow record batches."""

from kstate.log import records
from kstate.log.records import (
    Compression,
    Entry,
    Record,
    TimestampType,
    arrow_schema,
    decode,
    decode_arrow,
    encode,
    encode_arrow,
    iter_decode,
    shallow_entries,
)

__all__ = [
    "records",
    "Compression",
    "Entry",
    "Record",
    "TimestampType",
    "arrow_schema",
    "decode",
    "decode_arrow",
    "encode",
    "encode_arrow",
    "iter_decode",
    "shallow_entries",
]
