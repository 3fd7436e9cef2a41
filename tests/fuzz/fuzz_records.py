"""atheris fuzz target for kstate.log.records' decoders.

    .venv/bin/python tests/fuzz/fuzz_records.py -max_total_time=600 -keep_seed=1 -reduce_inputs=0 \
        /tmp/corpus tests/fuzz/corpus

(libFuzzer flags; new inputs go to the first corpus directory, so the seeds stay as committed.
``-keep_seed=1 -reduce_inputs=0`` keep the valid seeds as mutation bases.)
tests/fuzz/test_fuzz.py runs it for a bounded time in CI.

Every input must either decode or raise ``CorruptedDataError``: any other exception, including
the ``KStateError`` a caught Rust panic becomes, is a finding. The decoders must also agree with
each other (list, lazy iterator, Arrow columns, shallow entries).

Only Python code is coverage-instrumented (the Rust decoder would need sanitizer flags, which
means a separate RocksDB build), so the mutator carries the structure instead: after libFuzzer's
byte mutations it usually re-seals the CRCs, so mutations reach the parser behind the CRC check,
and it sometimes mutates the inner message set of a gzip wrapper and recompresses it, so the
inner-entry rules (relative offsets, inner CRCs, magic, nesting) are fuzzed too.
"""

from __future__ import annotations

import random
import struct
import sys
import zlib

import atheris

with atheris.instrument_imports():
    from kstate.errors import CorruptedDataError
    from kstate.log import records

LOG_OVERHEAD = 12
SMALLEST_MESSAGE = 14  # a v0 message with a null key and value (spec 3.2)
GZIP_WBITS = 16 + zlib.MAX_WBITS


def entries(data: bytes | bytearray) -> list[tuple[int, int]]:
    """``(position, size)`` of each complete top-level entry (spec 3.1 framing)."""
    found, position = [], 0
    while position + LOG_OVERHEAD <= len(data):
        size = struct.unpack_from(">i", data, position + 8)[0]
        if size < SMALLEST_MESSAGE or position + LOG_OVERHEAD + size > len(data):
            break
        found.append((position, size))
        position += LOG_OVERHEAD + size
    return found


def reseal(data: bytes | bytearray) -> bytes:
    """``data`` with every complete entry's CRC recomputed (CRC-32 from the magic byte on)."""
    sealed = bytearray(data)
    for position, size in entries(sealed):
        crc = zlib.crc32(sealed[position + 16 : position + LOG_OVERHEAD + size])
        struct.pack_into(">I", sealed, position + 12, crc)
    return bytes(sealed)


def remix_wrapper(data: bytes, max_size: int, rng: random.Random) -> bytes | None:
    """Mutates the inner set of the first gzip wrapper (null key) and rebuilds it; ``None`` when
    there is none."""
    for position, size in entries(data):
        magic, attributes = data[position + 16], data[position + 17]
        key_length_at = position + (18 if magic == 0 else 26)
        value_at = key_length_at + 8  # past the null key's length and the value's length
        if magic > 1 or attributes & 0x07 != 1 or value_at > position + LOG_OVERHEAD + size:
            continue
        if struct.unpack_from(">i", data, key_length_at)[0] != -1:
            continue
        try:
            inner = zlib.decompress(data[value_at : position + LOG_OVERHEAD + size], GZIP_WBITS)
        except zlib.error:
            continue
        inner = bytes(atheris.Mutate(inner, max(len(inner) * 2, 64)))
        if rng.random() < 0.8:
            inner = reseal(inner)
        value = zlib.compress(inner, wbits=GZIP_WBITS)
        header = bytearray(data[position + 16 : value_at - 4])
        message = header + struct.pack(">i", len(value)) + value
        entry = data[position : position + 8] + struct.pack(">i", 4 + len(message)) + b"\0\0\0\0" + message
        rebuilt = data[:position] + reseal(entry) + data[position + LOG_OVERHEAD + size :]
        return rebuilt[:max_size]
    return None


def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    if rng.random() < 0.25:
        remixed = remix_wrapper(data, max_size, rng)
        if remixed is not None:
            return remixed
    mutated = bytes(atheris.Mutate(data, max_size))
    return reseal(mutated) if rng.random() < 0.75 else mutated


@atheris.instrument_func
def cover_outcome(listed: list | None, error: str) -> int:
    """libFuzzer sees only Python coverage, so each kind of decoder outcome gets its own branch
    here: an input that reaches a new kind of error, or a new shape of result, counts as new
    coverage and is kept in the corpus. Returns how many branches were taken."""
    taken = 0
    if listed is not None:
        if len(listed) > 1:
            taken += 1
        if any(r.timestamp_type == records.TimestampType.LOG_APPEND_TIME for r in listed):
            taken += 1
        if any(r.key is None or r.value is None for r in listed):
            taken += 1
    if "inner entry" in error:
        taken += 1
    if "CRC mismatch" in error:
        taken += 1
    if "message size" in error:
        taken += 1
    if "length" in error:
        taken += 1
    if "follow the value" in error:
        taken += 1
    if "magic" in error:
        taken += 1
    if "codec" in error or "zstd" in error:
        taken += 1
    if "decompress" in error or "impossible" in error:
        taken += 1
    if "xerial" in error or "lz4 frame" in error:
        taken += 1
    if "null value" in error or "no messages" in error:
        taken += 1
    if "compressed too" in error:
        taken += 1
    if "wrapper offset" in error or "overflows" in error:
        taken += 1
    return taken


def test_one_input(data: bytes) -> None:
    try:
        listed = records.decode(data)
        error = ""
    except CorruptedDataError as corrupted:
        listed, error = None, str(corrupted)
    cover_outcome(listed, error)
    try:
        columns = records.decode_arrow(data)
    except CorruptedDataError:
        columns = None
    iterated = []
    try:
        iterated.extend(records.iter_decode(data))
        iterator_failed = False
    except CorruptedDataError:
        iterator_failed = True
    try:
        records.shallow_entries(data)
    except CorruptedDataError:
        if listed is not None:
            raise AssertionError("shallow entries fail where deep decoding succeeds") from None

    if listed is None:
        assert columns is None, "decode_arrow succeeds where decode fails"
        assert iterator_failed, "iter_decode succeeds where decode fails"
        return
    assert not iterator_failed and iterated == listed, "iter_decode differs from decode"
    assert columns is not None and columns.num_rows == len(listed), "decode_arrow differs from decode"
    rows = [(r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value) for r in listed]
    assert list(zip(*(column.to_pylist() for column in columns.columns))) == rows, "decode_arrow differs"


def main() -> None:
    atheris.Setup(sys.argv, test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
