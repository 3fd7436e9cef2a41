"""Legacy message format v1 codec: kstate vs aiokafka (Cython) and kafka-python, same run, same
100k records of a 16-byte key and a 100-byte value (benches/README.md).

Decoding reads the same bytes with each library and touches every record's key, value and
timestamp, as a consumer would; the peers read through their ``MemoryRecords``, their fastest
reader. Encoding builds one set from the same inputs.
"""

import pyarrow as pa
import pytest
from aiokafka.record._crecords import LegacyRecordBatchBuilder as AiokafkaBuilder
from aiokafka.record._crecords import MemoryRecords as AiokafkaRecords
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KafkaPythonBuilder
from kafka.record.memory_records import MemoryRecords as KafkaPythonRecords

from conftest import N
from kstate.log import records

ROUNDS = dict(rounds=5, iterations=1, warmup_rounds=1)
# Decoding 100k records takes milliseconds: more rounds keep the mean steady on a shared machine.
DECODE_ROUNDS = dict(rounds=15, iterations=1, warmup_rounds=1)
CODECS = ["none", "gzip"]
FIRST_TIMESTAMP = 1_700_000_000_000


@pytest.fixture(scope="module")
def rows(keys, value):
    return [records.Record(i, FIRST_TIMESTAMP + i, key=key, value=value) for i, key in enumerate(keys)]


@pytest.fixture(scope="module")
def arrow_rows(keys, value):
    return pa.record_batch(
        {
            "offset": pa.array(range(N), pa.int64()),
            "timestamp": pa.array(range(FIRST_TIMESTAMP, FIRST_TIMESTAMP + N), pa.int64()),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array([value] * N, pa.binary()),
        }
    )


@pytest.fixture(scope="module")
def message_sets(rows):
    """One v1 set per codec, read by every library."""
    return {codec: records.encode(rows, compression=codec) for codec in CODECS}


def peer_encode(builder_class, keys, value, codec):
    builder = builder_class(magic=1, compression_type=int(records.Compression(codec)), batch_size=1 << 30)
    for i, key in enumerate(keys):
        builder.append(i, timestamp=FIRST_TIMESTAMP + i, key=key, value=value)
    return bytes(builder.build())


def peer_decode(memory_records_class, data):
    memory_records = memory_records_class(data)
    while (batch := memory_records.next_batch()) is not None:
        for record in batch:
            _ = record.key, record.value, record.timestamp  # what a consumer reads


def kstate_decode(decoded):
    for record in decoded:
        _ = record.key, record.value, record.timestamp  # what a consumer reads


# -- encode ---------------------------------------------------------------------------------------


@pytest.mark.benchmark(group="record encode")
@pytest.mark.parametrize("codec", CODECS)
def test_encode_kstate_records(benchmark, rows, codec):
    benchmark.pedantic(lambda: records.encode(rows, compression=codec), **ROUNDS)


@pytest.mark.benchmark(group="record encode")
@pytest.mark.parametrize("codec", CODECS)
def test_encode_kstate_arrow(benchmark, arrow_rows, codec):
    benchmark.pedantic(lambda: records.encode_arrow(arrow_rows, compression=codec), **ROUNDS)


@pytest.mark.benchmark(group="record encode")
@pytest.mark.parametrize("codec", CODECS)
def test_encode_aiokafka(benchmark, keys, value, codec):
    benchmark.pedantic(lambda: peer_encode(AiokafkaBuilder, keys, value, codec), **ROUNDS)


@pytest.mark.benchmark(group="record encode")
@pytest.mark.parametrize("codec", CODECS)
def test_encode_kafka_python(benchmark, keys, value, codec):
    benchmark.pedantic(lambda: peer_encode(KafkaPythonBuilder, keys, value, codec), **ROUNDS)


# -- decode ---------------------------------------------------------------------------------------


@pytest.mark.benchmark(group="record decode")
@pytest.mark.parametrize("codec", CODECS)
def test_decode_kstate_iter(benchmark, message_sets, codec):
    data = message_sets[codec]
    benchmark.pedantic(lambda: kstate_decode(records.iter_decode(data)), **DECODE_ROUNDS)


@pytest.mark.benchmark(group="record decode")
@pytest.mark.parametrize("codec", CODECS)
def test_decode_kstate_list(benchmark, message_sets, codec):
    data = message_sets[codec]
    benchmark.pedantic(lambda: kstate_decode(records.decode(data)), **DECODE_ROUNDS)


@pytest.mark.benchmark(group="record decode")
@pytest.mark.parametrize("codec", CODECS)
def test_decode_kstate_arrow(benchmark, message_sets, codec):
    data = message_sets[codec]
    batch = benchmark.pedantic(lambda: records.decode_arrow(data), **DECODE_ROUNDS)
    assert batch.num_rows == N


@pytest.mark.benchmark(group="record decode")
@pytest.mark.parametrize("codec", CODECS)
def test_decode_aiokafka(benchmark, message_sets, codec):
    data = message_sets[codec]
    benchmark.pedantic(lambda: peer_decode(AiokafkaRecords, data), **DECODE_ROUNDS)


@pytest.mark.benchmark(group="record decode")
@pytest.mark.parametrize("codec", CODECS)
def test_decode_kafka_python(benchmark, message_sets, codec):
    data = message_sets[codec]
    benchmark.pedantic(lambda: peer_decode(KafkaPythonRecords, data), **DECODE_ROUNDS)
