"""Kafka's logs. ``kstate.log.partition``: topics and partitions on disk in a broker's files and
layout. ``kstate.log.records``: legacy (magic v0/v1) message sets to and from bytes, as ``Record``
lists or Arrow record batches. ``kstate.log.remote``: changelog partitions kept on an object store
as immutable segment files, and their compaction."""

from kstate.log import partition, records, remote
from kstate.log.partition import AppendInfo, Partition, SegmentInfo, TimestampAndOffset, Topic, partition_dir
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
    "partition",
    "records",
    "AppendInfo",
    "Partition",
    "SegmentInfo",
    "TimestampAndOffset",
    "Topic",
    "partition_dir",
    "remote",
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
