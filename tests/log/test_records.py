"""kstate.log.records against independent oracles: kafka-python's and aiokafka's (pure Python
and Cython) legacy record readers and builders, and the spec's byte layouts and 6.1 vectors.

Nothing here checks kstate against itself alone. Expected records come from the inputs and the
spec's rules (spec 3.5): v0 has no timestamp (-1, no type); a LogAppendTime set reports the
log-append time and type 1 for every record.
"""

from __future__ import annotations

import pickle
import struct
import zlib

import pyarrow as pa
import pytest
from aiokafka.record._crecords import LegacyRecordBatchBuilder as AiokafkaCythonBuilder
from aiokafka.record._crecords import MemoryRecords as AiokafkaCythonRecords
from aiokafka.record.legacy_records import _LegacyRecordBatchBuilderPy as AiokafkaPythonBuilder
from aiokafka.record.legacy_records import _LegacyRecordBatchPy as AiokafkaPythonBatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KafkaPythonBuilder
from kafka.record.memory_records import MemoryRecords as KafkaPythonRecords

from kstate.errors import CorruptedDataError, InvalidArgumentError
from kstate.log import records
from kstate.log.records import Compression, Record, TimestampType


class AiokafkaPythonRecords:
    """aiokafka's pure-Python reader. Its ``MemoryRecords`` hands entries to the Cython batch
    class when the extension is built, so this splits entries (spec 3.1) for the Python one."""

    def __init__(self, data: bytes):
        self._data, self._position = data, 0

    def next_batch(self) -> AiokafkaPythonBatch | None:
        if self._position + 12 > len(self._data):
            return None
        size = struct.unpack_from(">i", self._data, self._position + 8)[0]
        entry = self._data[self._position : self._position + 12 + size]
        self._position += 12 + size
        return AiokafkaPythonBatch(entry, entry[16])


READERS = {
    "kafka-python": KafkaPythonRecords,
    "aiokafka-python": AiokafkaPythonRecords,
    "aiokafka-cython": AiokafkaCythonRecords,
}
BUILDERS = {
    "kafka-python": KafkaPythonBuilder,
    "aiokafka-python": AiokafkaPythonBuilder,
    "aiokafka-cython": AiokafkaCythonBuilder,
}
LOG_APPEND_TIME = 1_700_000_123_456

# (magic, compression, log-append time or None for CreateTime): v0 has no LogAppendTime.
FORMATS = [
    (magic, compression, log_append_time)
    for magic in (0, 1)
    for compression in Compression
    for log_append_time in ((None,) if magic == 0 else (None, LOG_APPEND_TIME))
]


def format_id(fmt: tuple) -> str:
    magic, compression, log_append_time = fmt
    return f"v{magic}-{compression.name.lower()}-{'LogAppendTime' if log_append_time else 'CreateTime'}"


def unsupported_by_oracle(oracle: str, magic: int, compression: Compression) -> bool:
    """aiokafka refuses LZ4 in magic v0 (Kafka 0.8/0.9 wrote a broken LZ4 header checksum)."""
    return oracle.startswith("aiokafka") and magic == 0 and compression == Compression.LZ4


# -- what the records must read as, from the inputs and the spec alone ------------------------


def expected(rows: list[tuple], magic: int, log_append_time: int | None) -> list[tuple]:
    """``(offset, timestamp, timestamp_type, key, value)`` as every reader must report ``rows``."""
    if magic == 0:
        return [(offset, -1, -1, key, value) for offset, _, key, value in rows]
    if log_append_time is not None:
        return [(offset, log_append_time, 1, key, value) for offset, _, key, value in rows]
    return [(offset, timestamp, 0, key, value) for offset, timestamp, key, value in rows]


def as_reported_by(reader: str, rows: list[tuple]) -> list[tuple]:
    """``rows`` with the one known difference of an oracle: aiokafka's Cython reader reports a v1
    record without a timestamp (-1) as having no timestamp type either, where Kafka and the other
    readers report -1 with CreateTime."""
    if reader != "aiokafka-cython":
        return rows
    return [(o, t, -1 if t == -1 else tt, k, v) for o, t, tt, k, v in rows]


def oracle_read(reader: str, data: bytes) -> list[tuple]:
    """Every record as the oracle reads it; v0's ``None`` timestamp and type become -1."""
    memory_records = READERS[reader](data)
    read = []
    while (batch := memory_records.next_batch()) is not None:
        for r in batch:
            timestamp = -1 if r.timestamp is None else r.timestamp
            timestamp_type = -1 if r.timestamp_type is None else r.timestamp_type
            read.append((r.offset, timestamp, timestamp_type, r.key, r.value))
    return read


def kstate_rows(decoded: list[Record]) -> list[tuple]:
    return [(r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value) for r in decoded]


def arrow_rows(batch: pa.RecordBatch) -> list[tuple]:
    return list(zip(*(batch.column(name).to_pylist() for name in batch.schema.names)))


# -- oracle-built sets, made broker-written by the spec's in-place assignment (spec 3.5) -------


def seal(entry: bytearray) -> None:
    """Recomputes the CRC of the one entry in ``entry`` (CRC-32 IEEE from the magic byte on)."""
    struct.pack_into(">I", entry, 12, zlib.crc32(entry[16:]))


def assign_in_place(data: bytes, last_offset: int, max_timestamp: int, log_append_time: int | None) -> bytes:
    """What a broker does to a producer's single-wrapper or plain entry set (spec 3.5
    ``LogValidator`` in place): wrapper offset = last offset; v1 wrapper timestamp = max inner
    timestamp (CreateTime) or the log-append time with attribute bit 3 set; CRC recomputed."""
    entry = bytearray(data)
    struct.pack_into(">q", entry, 0, last_offset)
    if entry[16] == 1:
        if log_append_time is None:
            struct.pack_into(">q", entry, 18, max_timestamp)
        else:
            entry[17] |= 0x08
            struct.pack_into(">q", entry, 18, log_append_time)
        seal(entry)
    return bytes(entry)


def oracle_build(builder: str, rows: list[tuple], magic: int, compression: Compression, log_append_time) -> bytes:
    """``rows`` as a broker-written set made with an oracle's builder."""
    make = BUILDERS[builder]
    if compression == Compression.NONE:
        entries = []
        for offset, timestamp, key, value in rows:
            one = make(magic=magic, compression_type=0, batch_size=1 << 30)
            one.append(offset, timestamp=timestamp, key=key, value=value)
            entries.append(assign_in_place(bytes(one.build()), offset, timestamp, log_append_time))
        return b"".join(entries)
    batch = make(magic=magic, compression_type=int(compression), batch_size=1 << 30)
    base = rows[0][0]
    for offset, timestamp, key, value in rows:
        # A producer's inner offsets: relative in v1 (KIP-31), absolute in v0.
        batch.append(offset - base if magic == 1 else offset, timestamp=timestamp, key=key, value=value)
    wrapper = bytes(batch.build())
    return assign_in_place(wrapper, rows[-1][0], max(row[1] for row in rows), log_append_time)


# -- generated inputs ---------------------------------------------------------------------------

nullable_bytes = st.one_of(st.none(), st.binary(max_size=64))
timestamps = st.one_of(st.just(-1), st.integers(min_value=0, max_value=2**53))


@st.composite
def record_rows(draw, max_size: int = 12) -> list[tuple]:
    """``(offset, timestamp, key, value)`` rows with strictly increasing offsets (gaps allowed)."""
    count = draw(st.integers(min_value=1, max_value=max_size))
    offset = draw(st.integers(min_value=0, max_value=2**40))
    rows = []
    for _ in range(count):
        rows.append((offset, draw(timestamps), draw(nullable_bytes), draw(nullable_bytes)))
        offset += draw(st.integers(min_value=1, max_value=3))
    return rows


ORACLE_SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def kstate_encode(rows: list[tuple], magic: int, compression: Compression, log_append_time) -> bytes:
    if log_append_time is None:
        return records.encode(rows, magic=magic, compression=compression)
    return records.encode(
        rows,
        magic=magic,
        compression=compression,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=log_append_time,
    )


# -- kstate writes, the oracles read --------------------------------------------------------------


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("fmt", FORMATS, ids=format_id)
@ORACLE_SETTINGS
@given(rows=record_rows())
def test_oracles_read_what_kstate_writes(reader, fmt, rows):
    magic, compression, log_append_time = fmt
    if unsupported_by_oracle(reader, magic, compression):
        pytest.skip("aiokafka does not read LZ4 in magic v0")
    data = kstate_encode(rows, magic, compression, log_append_time)
    assert oracle_read(reader, data) == as_reported_by(reader, expected(rows, magic, log_append_time))


@pytest.mark.parametrize("fmt", FORMATS, ids=format_id)
@ORACLE_SETTINGS
@given(rows=record_rows())
def test_arrow_encoded_sets_read_by_kafka_python(fmt, rows):
    magic, compression, log_append_time = fmt
    offsets, stamps, keys, values = (list(column) for column in zip(*rows))
    if log_append_time is not None:
        stamps = [log_append_time] * len(rows)
    type_id = TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME
    batch = pa.record_batch(
        {
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array(stamps, pa.int64()),
            "timestamp_type": pa.array([type_id] * len(rows), pa.int8()),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
        }
    )
    data = records.encode_arrow(batch, magic=magic, compression=compression)
    assert oracle_read("kafka-python", data) == expected(rows, magic, log_append_time)


# -- the oracles write, kstate reads ------------------------------------------------------------


@pytest.mark.parametrize("builder", BUILDERS)
@pytest.mark.parametrize("fmt", FORMATS, ids=format_id)
@ORACLE_SETTINGS
@given(rows=record_rows())
def test_kstate_reads_what_oracles_write(builder, fmt, rows):
    magic, compression, log_append_time = fmt
    if unsupported_by_oracle(builder, magic, compression):
        pytest.skip("aiokafka does not write LZ4 in magic v0")
    data = oracle_build(builder, rows, magic, compression, log_append_time)
    want = expected(rows, magic, log_append_time)
    # The oracle that built it agrees, so the set is what the test means it to be.
    assert oracle_read(builder, data) == as_reported_by(builder, want)
    assert kstate_rows(records.decode(data)) == want
    assert kstate_rows(list(records.iter_decode(data))) == want
    assert arrow_rows(records.decode_arrow(data)) == want


# -- byte equality where the format leaves no choice: uncompressed, CreateTime -----------------


@pytest.mark.parametrize("builder", BUILDERS)
@pytest.mark.parametrize("magic", [0, 1])
@ORACLE_SETTINGS
@given(rows=record_rows())
def test_uncompressed_sets_equal_oracle_bytes(builder, magic, rows):
    theirs = oracle_build(builder, rows, magic, Compression.NONE, None)
    assert records.encode(rows, magic=magic) == theirs


# -- spec 6.1 vectors -----------------------------------------------------------------------------

SPEC_ENTRIES = {
    0: "0000000000000000 00000017 1095c9ca 00 00 00000004 74657374 00000005 5375706572",
    1: "0000000000000000 0000001f 831fac85 01 00 000000000098967f 00000004 74657374 00000005 5375706572",
}
# key, value, v0 CRC, v1 CRC (signed as aiokafka's tests give them)
SPEC_CRCS = [
    (b"test", b"Super", 278251978, -2095076219),
    (b"test", None, 580701536, 164492157),
    (None, b"Super", 2797021502, 3315209433),
    (b"", b"Super", 1446809667, 890351012),
    (b"test", b"", 4230475139, 3614888862),
]


@pytest.mark.parametrize("magic", [0, 1])
def test_spec_6_1_entries_byte_for_byte(magic):
    entry = bytes.fromhex(SPEC_ENTRIES[magic].replace(" ", ""))
    assert records.encode([(0, 9999999, b"test", b"Super")], magic=magic) == entry
    timestamp, timestamp_type = (-1, TimestampType.NO_TIMESTAMP_TYPE) if magic == 0 else (9999999, 0)
    assert records.decode(entry) == [Record(0, timestamp, timestamp_type, b"test", b"Super")]


@pytest.mark.parametrize("key, value, crc_v0, crc_v1", SPEC_CRCS)
def test_spec_6_1_crc_table(key, value, crc_v0, crc_v1):
    for magic, crc in ((0, crc_v0), (1, crc_v1)):
        entry = records.encode([(0, 9999999, key, value)], magic=magic)
        assert struct.unpack_from(">I", entry, 12)[0] == crc % 2**32
        assert records.decode(entry)[0].key == key


def test_spec_6_1_item_3_log_append_time_on_an_aiokafka_gzip_wrapper():
    builder = AiokafkaCythonBuilder(magic=1, compression_type=1, batch_size=1 << 20)
    for offset in range(3):
        builder.append(offset, timestamp=9999999, key=None, value=b"value")
    wrapper = bytearray(builder.build())
    wrapper[17] |= 0x08  # attributes: LogAppendTime
    struct.pack_into(">q", wrapper, 18, 10000000)
    seal(wrapper)
    want = [(offset, 10000000, 1, None, b"value") for offset in range(3)]
    assert oracle_read("aiokafka-cython", bytes(wrapper)) == want
    assert kstate_rows(records.decode(bytes(wrapper))) == want


# -- shallow entries against the spec's framing ---------------------------------------------------


def test_shallow_entries_match_the_framing_and_keep_wrappers_compressed():
    plain = records.encode([(5, 1, b"a", b"b"), (6, 2, None, b"c")])
    wrapper = records.encode([(7, 3, b"k", b"v"), (9, 4, b"k2", None)], compression="gzip")
    data = plain + wrapper
    entries = records.shallow_entries(data)
    position = 0
    for entry in entries:
        offset, size = struct.unpack_from(">qi", data, position)
        assert (entry.position, entry.offset, entry.size) == (position, offset, 12 + size)
        position += 12 + size
    assert position == len(data)
    assert [e.compression for e in entries] == [Compression.NONE, Compression.NONE, Compression.GZIP]
    assert entries[2].offset == 9 and entries[2].timestamp == 4 and entries[2].key is None
    inner = zlib.decompress(entries[2].value, 16 + zlib.MAX_WBITS)
    # v1 inner offsets are relative to the first record.
    first_offset, first_size = struct.unpack_from(">qi", inner, 0)
    assert (first_offset, struct.unpack_from(">q", inner, 12 + first_size)[0]) == (0, 2)
    # A truncated trailing entry ends the set, as in a fetch response.
    assert records.shallow_entries(data[:-5]) == entries[:2]


# -- corruption and bad arguments -----------------------------------------------------------------


def test_a_flipped_byte_is_corrupted_data_naming_the_offset():
    data = bytearray(records.encode([(41, 1, b"a", b"b"), (42, 2, b"c", b"d")]))
    data[-1] ^= 0xFF
    for decode in (records.decode, lambda d: list(records.iter_decode(d)), records.decode_arrow):
        with pytest.raises(CorruptedDataError, match=r"offset 42"):
            decode(bytes(data))


def test_iter_decode_yields_the_records_before_a_corrupt_entry():
    data = bytearray(records.encode([(1, 1, b"a", b"b"), (2, 2, b"c", b"d")]))
    data[-1] ^= 0xFF
    iterator = records.iter_decode(bytes(data))
    assert next(iterator).offset == 1
    with pytest.raises(CorruptedDataError):
        next(iterator)
    assert list(iterator) == []


def test_garbage_inside_a_wrapper_is_corrupted_data():
    wrapper = bytearray(records.encode([(3, 1, b"a", b"b")], compression="snappy"))
    wrapper[40:48] = b"\xff" * 8
    seal(wrapper)
    with pytest.raises(CorruptedDataError, match=r"offset 3"):
        records.decode(bytes(wrapper))


@pytest.mark.parametrize(
    "call",
    [
        lambda: records.encode([(-1, 1, None, None)]),
        lambda: records.encode([(2, 1, None, None), (2, 1, None, None)]),
        lambda: records.encode([(0, -5, None, None)]),
        lambda: records.encode([(0, 1, "text", None)]),
        lambda: records.encode([(0, 1)]),
        lambda: records.encode([], magic=2),
        lambda: records.encode([], compression="zstd"),
        lambda: records.encode([], compression="brotli"),
        lambda: records.encode([], timestamp_type="LogAppendTime"),
        lambda: records.encode([], log_append_time=5),
        lambda: records.encode([], magic=0, timestamp_type="LogAppendTime", log_append_time=5),
        lambda: records.decode("not bytes"),
        lambda: Record(0, key="text"),
        lambda: TimestampType("SomeTime"),
    ],
)
def test_bad_arguments_are_invalid_argument_errors(call):
    with pytest.raises(InvalidArgumentError):
        call()


# -- the Record type and the enums ----------------------------------------------------------------


def test_records_are_immutable_comparable_hashable_and_pickle():
    record = Record(7, 1_700_000_000_000, key=b"k", value=b"v")
    assert record == Record(7, 1_700_000_000_000, "CreateTime", b"k", b"v")
    assert record.timestamp_type is TimestampType.CREATE_TIME
    assert hash(record) == hash(Record(7, 1_700_000_000_000, 0, b"k", b"v"))
    assert sorted([Record(2), Record(1, value=b"x"), Record(1)]) == [Record(1), Record(1, value=b"x"), Record(2)]
    assert record != Record(7, 1_700_000_000_000, key=b"k", value=None)
    assert pickle.loads(pickle.dumps(record)) == record
    assert repr(record) == (
        "Record(offset=7, timestamp=1700000000000, timestamp_type=TimestampType.CREATE_TIME, key=b'k', value=b'v')"
    )
    with pytest.raises(AttributeError):
        record.offset = 8  # type: ignore[misc]


def test_enums_accept_kafka_names_and_ids():
    assert Compression("gzip") is Compression.GZIP
    assert Compression("LZ4") is Compression.LZ4
    assert Compression(None) is Compression.NONE
    assert Compression(2) is Compression.SNAPPY
    assert TimestampType("LogAppendTime") is TimestampType.LOG_APPEND_TIME
    assert TimestampType("create_time") is TimestampType.CREATE_TIME
    assert TimestampType(-1) is TimestampType.NO_TIMESTAMP_TYPE


def test_empty_sets():
    assert records.encode([]) == b""
    assert records.decode(b"") == []
    assert records.decode_arrow(b"").num_rows == 0
    assert records.encode_arrow(records.decode_arrow(b"")) == b""


# -- Arrow columns --------------------------------------------------------------------------------


def test_decode_arrow_schema_and_large_binary():
    data = records.encode([(0, 5, b"k", None)], magic=0)
    batch = records.decode_arrow(data)
    assert batch.schema == records.arrow_schema()
    assert arrow_rows(batch) == [(0, -1, -1, b"k", None)]
    assert records.decode_arrow(data, large_binary=True).schema.field("value").type == pa.large_binary()


def test_encode_arrow_takes_slices_strings_tables_and_defaults():
    keys = pa.array(["skip", "a", None, "c"], pa.string())[1:]
    values = pa.array([b"skip", b"", b"x", None], pa.large_binary())[1:]
    table = pa.table({"offset": pa.chunked_array([[10], [11, 12]]), "key": keys, "value": values})
    data = records.encode_arrow(table, compression="lz4")
    want = [(10, -1, 0, b"a", b""), (11, -1, 0, None, b"x"), (12, -1, 0, b"c", None)]
    assert oracle_read("kafka-python", data) == want


def test_encode_arrow_rejects_bad_columns():
    good = {"offset": pa.array([1, 2]), "key": pa.array([b"a", b"b"]), "value": pa.array([b"a", b"b"])}
    for bad in (
        {**good, "offset": pa.array([1, None])},
        {**good, "key": pa.array([1, 2])},
        {"offset": good["offset"], "key": good["key"]},
        {**good, "timestamp_type": pa.array([0, 1], pa.int8())},
        {**good, "timestamp_type": pa.array([1, 1], pa.int8()), "timestamp": pa.array([5, 6])},
    ):
        with pytest.raises(InvalidArgumentError):
            records.encode_arrow(pa.table(bad))
