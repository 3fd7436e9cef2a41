"""``kstate log dump`` and ``kstate log offsets-for-times``, run as the installed command."""

import subprocess
import sys
from pathlib import Path

from kstate.log import Partition

NOW = 1_700_000_000_000
KSTATE = str(Path(sys.executable).parent / "kstate")


def run(*args):
    return subprocess.run([KSTATE, *args], capture_output=True, text=True)


def write_log(directory, compression="none"):
    with Partition.open(directory, {"compression.type": compression}) as log:
        log.append([(b"user-1", b"clicked", NOW), (b"user-2", b"scrolled", NOW + 7)], now_ms=NOW)
        log.append([(b"user-1", None, NOW + 9)], now_ms=NOW)
        log.flush()


def test_dump_prints_each_entry_like_kafka_dump_log(tmp_path):
    write_log(tmp_path / "clicks-0")
    result = run("log", "dump", str(tmp_path / "clicks-0"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Dumping ") and lines[0].endswith("00000000000000000000.log")
    assert lines[1].startswith(f"offset: 0 position: 0 CreateTime: {NOW} isvalid: true")
    assert lines[1].endswith("key: user-1 payload: clicked")
    assert "magic: 1 compresscodec: NONE crc: " in lines[1]
    assert lines[3].startswith("offset: 2 ") and lines[3].endswith("key: user-1 payload: null")


def test_deep_dump_opens_compressed_wrappers(tmp_path):
    write_log(tmp_path / "clicks-0", "gzip")
    shallow = run("log", "dump", str(tmp_path / "clicks-0")).stdout
    assert "compresscodec: GZIP" in shallow and "| offset" not in shallow
    deep = run("log", "dump", "--deep", str(tmp_path / "clicks-0")).stdout
    assert f"| offset: 1 CreateTime: {NOW + 7} key: user-2 payload: scrolled" in deep


def test_a_corrupt_entry_is_shown_invalid_and_fails_the_command(tmp_path):
    write_log(tmp_path / "clicks-0")
    segment = tmp_path / "clicks-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF  # last byte of the last entry's value: its CRC no longer matches
    segment.write_bytes(bytes(data))
    result = run("log", "dump", str(tmp_path / "clicks-0"))
    assert result.returncode == 1
    assert "offset: 2 position:" in result.stdout and "isvalid: false" in result.stdout
    assert "offset: 1 " in result.stdout, "entries before it are still shown"


def test_offsets_for_times_and_errors(tmp_path):
    write_log(tmp_path / "clicks-0")
    assert run("log", "offsets-for-times", str(tmp_path / "clicks-0"), str(NOW + 5)).stdout.strip() == (
        f"offset: 1 timestamp: {NOW + 7}"
    )
    assert run("log", "offsets-for-times", str(tmp_path / "clicks-0"), str(NOW + 99)).stdout.strip() == "none"
    missing = run("log", "dump", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "not a directory" in missing.stderr


def test_a_directory_that_is_not_a_partition_is_a_one_line_error_and_stays_untouched(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a log")
    (tmp_path / "empty").mkdir()
    for directory in ("notes", "empty"):
        for command in (["dump"], ["offsets-for-times"]):
            args = [str(tmp_path / directory)] + (["0"] if command == ["offsets-for-times"] else [])
            result = run("log", *command, *args)
            assert result.returncode == 2, result
            assert result.stdout == ""
            assert result.stderr.splitlines() == [
                f"kstate: {tmp_path / directory} is not a log partition: it holds no segment "
                "(<20-digit base offset>.log)"
            ]
    assert sorted(p.name for p in (tmp_path / "notes").iterdir()) == ["readme.txt"], "no segment was made"
    assert list((tmp_path / "empty").iterdir()) == []
