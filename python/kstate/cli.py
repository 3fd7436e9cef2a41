"""The ``kstate`` command line.

kstate log dump <partition dir> [--deep] [--no-data]   entries of every segment, like kafka-dump-log
kstate log offsets-for-times <partition dir> <ms>      first offset with a timestamp >= ms
kstate inspect <state dir> [--json] [--exact]           stores, partitions, committed offsets, sizes
kstate inspect <changelog dir> --history [--json]       changelogs, snapshots, the state their history gives
kstate serve <changelog dir> --application-id ID --port P   a replica's reads over HTTP/JSON
"""

from __future__ import annotations

import argparse
import json
import re
import struct
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from kstate import __version__
from kstate.errors import InvalidArgumentError, KStateError
from kstate.inspection import inspect_history, inspect_state
from kstate.log import Partition, decode, shallow_entries
from kstate.upgrade import find_stores, upgrade_store

HEADER = struct.Struct(">qi")  # offset, size: the 12 bytes before each message
SEGMENT_NAME = re.compile(r"[0-9]{20}\.log")
TIMESTAMP_NAMES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}


def _text(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", errors="backslashreplace")


def _entries(segment: bytes) -> Iterator[tuple[int, bytes]]:
    """Each entry's position and bytes, by the size field alone, so a corrupt entry can still be
    shown; a truncated trailing entry ends the walk."""
    position = 0
    while position + HEADER.size <= len(segment):
        _, size = HEADER.unpack_from(segment, position)
        end = position + HEADER.size + size
        if size < 0 or end > len(segment):
            return
        yield position, segment[position:end]
        position = end


def _describe(entry, position: int, raw: bytes, print_data: bool) -> str:
    crc = struct.unpack_from(">I", raw, HEADER.size)[0]
    line = (
        f"offset: {entry.offset} position: {position} "
        f"{TIMESTAMP_NAMES.get(int(entry.timestamp_type), '?')}: {entry.timestamp} isvalid: true "
        f"size: {len(raw)} magic: {entry.magic} compresscodec: {entry.compression.name} crc: {crc}"
    )
    if print_data and not entry.is_compressed:
        line += f" key: {_text(entry.key)} payload: {_text(entry.value)}"
    return line


def dump(partition_dir: Path, deep: bool, print_data: bool, out=sys.stdout) -> int:
    """Prints every entry of every segment; returns the number of invalid entries seen."""
    invalid = 0
    for segment_file in sorted(partition_dir.glob("*.log")):
        print(f"Dumping {segment_file}", file=out)
        segment = segment_file.read_bytes()
        end = 0
        for position, raw in _entries(segment):
            end = position + len(raw)
            try:
                [entry] = shallow_entries(raw)
            except KStateError as error:
                invalid += 1
                print(f"offset: {HEADER.unpack_from(raw)[0]} position: {position} isvalid: false ({error})", file=out)
                continue
            print(_describe(entry, position, raw, print_data), file=out)
            if deep and entry.is_compressed:
                for record in decode(raw):
                    data = f" key: {_text(record.key)} payload: {_text(record.value)}" if print_data else ""
                    kind = TIMESTAMP_NAMES.get(int(record.timestamp_type), "?")
                    print(f"| offset: {record.offset} {kind}: {record.timestamp}{data}", file=out)
        if end < len(segment):
            print(f"Found {len(segment) - end} bytes of a truncated entry at position {end}", file=out)
    return invalid


def offsets_for_times(partition_dir: Path, timestamp: int, out=sys.stdout) -> None:
    with Partition.open(partition_dir) as log:
        found = log.offsets_for_times(timestamp)
    print("none" if found is None else f"offset: {found.offset} timestamp: {found.timestamp}", file=out)


def upgrade(path: Path, dry_run: bool, out=sys.stdout) -> None:
    stores = find_stores(path)
    if not stores:
        print(f"no key-value store under {path}", file=out)
    for store in stores:
        found = upgrade_store(store, dry_run)
        if found.legacy_entries == 0:
            print(f"{store}: {found.format}, nothing to upgrade", file=out)
        else:
            verb = "would convert" if dry_run else "converted"
            print(f"{store}: {found.format}, {verb} {found.legacy_entries} values to the timestamped format", file=out)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]], out) -> None:
    """Columns padded to their widest cell, the last one as it is."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1], file=out)


def inspect(path: Path, as_json: bool, exact: bool = False, out=sys.stdout) -> None:
    reports = inspect_state(path, count_entries=exact)
    if as_json:
        rows = [
            {
                "application_id": r.application_id,
                "task_dir": str(r.task_dir),
                "partition": r.partition,
                "store": r.name,
                "kind": r.kind,
                "segments": r.segments,
                "approximate_entries": r.approximate_entries,
                **({"entries": r.entries} if exact else {}),
                "disk_bytes": r.disk_bytes,
                "offsets": r.offsets,
            }
            for r in reports
        ]
        print(json.dumps(rows, indent=2), file=out)
        return
    if not reports:
        print(f"no store under {path}", file=out)
        return
    header = ("application", "partition", "store", "kind", "entries" if exact else "entries~", "disk")
    rows = [
        (
            r.application_id,
            "-" if r.partition is None else str(r.partition),
            r.name,
            r.kind if r.kind == "key-value" else f"{r.segments} segments",
            str(r.entries if exact else r.approximate_entries),
            _size(r.disk_bytes),
            " ".join(f"{k}={v}" for k, v in sorted(r.offsets.items())) or "-",
        )
        for r in reports
    ]
    _table((*header, "committed offsets"), rows, out)
    total = sum(r.disk_bytes for r in reports)
    partitions = {(r.application_id, r.partition) for r in reports}
    print(f"{len(reports)} stores, {len(partitions)} partitions, {_size(total)} on disk", file=out)


def inspect_changelogs(location: str, options: dict[str, str], as_json: bool, out=sys.stdout) -> int:
    """Prints every store changelog partition at ``location`` with its snapshots and the state
    its history gives; returns how many cannot give their state (history deleted, no usable
    snapshot)."""
    reports = inspect_history(location, options)
    missing = sum(r.error is not None for r in reports)
    if as_json:
        print(json.dumps([vars(r) for r in reports], indent=2), file=out)
        return missing
    if not reports:
        print(f"no store changelog at {location}", file=out)
        return 0
    header = ("changelog", "offsets", "snapshots", "state from", "replayed", "entries", "state at")
    rows = [
        (
            f"{r.topic}-{r.partition}",
            "-" if r.log_start_offset is None else f"{r.log_start_offset}..{r.log_end_offset - 1}",
            str(len(r.snapshots)) + (f" (newest {r.snapshots[-1]})" if r.snapshots else ""),
            "-" if r.error else "changelog" if r.snapshot_offset is None else f"snapshot {r.snapshot_offset}",
            "-" if r.error else str(r.replayed_records),
            "-" if r.error else str(r.entries),
            f"MISSING HISTORY: {r.error}" if r.error else "-" if r.offset is None else str(r.offset),
        )
        for r in reports
    ]
    _table(header, rows, out)
    print(f"{len(reports)} changelog partitions, {missing} without the history their state needs", file=out)
    return missing


def rescale(args: argparse.Namespace, out=sys.stdout) -> None:
    import logging

    from kstate.spark.rescale import rescale as rescale_state

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    options = dict(option.split("=", 1) for option in args.storage_option)
    report = rescale_state(args.changelog_dir, args.application_id, args.partitions, storage_options=options)
    if report.from_partitions == report.to_partitions:
        print(f"{args.application_id}: already {report.to_partitions} partitions, nothing to do", file=out)
        return
    snapshots = f", {report.snapshots} snapshots ({report.snapshot_entries} entries)" if report.snapshots else ""
    print(
        f"{args.application_id}: {report.from_partitions} -> {report.to_partitions} partitions "
        f"(generation {report.generation}, {report.records} changelog records read{snapshots}, "
        f"state at batch {report.batch})",
        file=out,
    )


def serve(args: argparse.Namespace) -> None:
    import logging

    try:
        from kstate.spark.serving.http_api import serve as serve_replica
    except ImportError as missing:
        raise InvalidArgumentError(
            f"kstate serve needs the serve extra (pip install 'kstate[serve]'): {missing}"
        ) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    serve_replica(
        args.changelog_dir,
        args.application_id,
        args.port,
        host=args.host,
        storage_options=dict(option.split("=", 1) for option in args.storage_option),
        local_dir=args.local_dir,
        follow_interval=args.follow_interval,
    )


def _check_partition_dir(directory: Path) -> None:
    """A log command reads an existing partition and must not make one (``Partition.open``
    would): the directory has to hold a segment, ``<20-digit base offset>.log``."""
    if not directory.is_dir():
        raise InvalidArgumentError(f"{directory} is not a directory")
    if not any(SEGMENT_NAME.fullmatch(path.name) for path in directory.iterdir()):
        raise InvalidArgumentError(
            f"{directory} is not a log partition: it holds no segment (<20-digit base offset>.log)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kstate", description="kstate's tools for Kafka-format logs.")
    parser.add_argument("--version", action="version", version=f"kstate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    log_parser = commands.add_parser("log", help="Kafka log partitions on disk")
    log_commands = log_parser.add_subparsers(dest="log_command", required=True)
    dump_parser = log_commands.add_parser("dump", help="print the entries of a partition's segments")
    dump_parser.add_argument("partition_dir", type=Path)
    dump_parser.add_argument("--deep", action="store_true", help="also print the records inside compressed wrappers")
    dump_parser.add_argument("--no-data", action="store_true", help="leave keys and values out")
    times_parser = log_commands.add_parser("offsets-for-times", help="first offset with a timestamp >= the given ms")
    times_parser.add_argument("partition_dir", type=Path)
    times_parser.add_argument("timestamp", type=int)
    upgrade_parser = commands.add_parser("upgrade", help="convert plain key-value stores to the timestamped format")
    upgrade_parser.add_argument(
        "path", type=Path, help="a store directory, or a state or task directory holding stores"
    )
    upgrade_parser.add_argument("--dry-run", action="store_true", help="only say what would be converted")
    inspect_parser = commands.add_parser(
        "inspect", help="list the stores of a state directory: partitions, committed offsets, sizes (read-only)"
    )
    inspect_parser.add_argument(
        "path", help="a state directory, or an application's or task's; with --history a changelog directory or URL"
    )
    inspect_parser.add_argument("--json", action="store_true", help="one JSON object per store")
    inspect_parser.add_argument("--exact", action="store_true", help="count the entries (a scan), not estimate them")
    inspect_parser.add_argument(
        "--history",
        action="store_true",
        help="the store changelogs at path, their snapshots and the state each one's history gives (rebuilt and "
        "counted from the newest usable snapshot and the changelog after it)",
    )
    inspect_parser.add_argument(
        "--storage-option", action="append", default=[], metavar="KEY=VALUE", help="fsspec option of a URL"
    )
    rescale_parser = commands.add_parser(
        "rescale", help="rebuild a kstate.spark application's state for another partition count (query stopped)"
    )
    rescale_parser.add_argument("changelog_dir", help="the backend changelog_dir (directory or URL)")
    rescale_parser.add_argument("--application-id", required=True)
    rescale_parser.add_argument("--partitions", type=int, required=True, help="the new partition count")
    rescale_parser.add_argument(
        "--storage-option", action="append", default=[], metavar="KEY=VALUE", help="fsspec option of a URL"
    )
    serve_parser = commands.add_parser(
        "serve", help="serve a kstate.spark application's state over HTTP/JSON from a replica of its changelogs"
    )
    serve_parser.add_argument("changelog_dir", help="the backend changelog_dir (directory or URL)")
    serve_parser.add_argument("--application-id", required=True)
    serve_parser.add_argument("--port", type=int, required=True)
    serve_parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve_parser.add_argument(
        "--storage-option", action="append", default=[], metavar="KEY=VALUE", help="fsspec option of a URL"
    )
    serve_parser.add_argument(
        "--local-dir", help="where the replica keeps its copy (kept across restarts; default: a temporary directory)"
    )
    serve_parser.add_argument(
        "--follow-interval", type=float, default=1.0, metavar="S", help="seconds between catch-ups (default 1)"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            serve(args)
            return 0
        if args.command == "rescale":
            rescale(args)
            return 0
        if args.command == "upgrade":
            upgrade(args.path, args.dry_run)
            return 0
        if args.command == "inspect":
            if args.history:
                options = dict(option.split("=", 1) for option in args.storage_option)
                return 1 if inspect_changelogs(args.path, options, args.json) else 0
            if not Path(args.path).is_dir():
                raise InvalidArgumentError(f"{args.path} is not a directory")
            inspect(Path(args.path), args.json, args.exact)
            return 0
        _check_partition_dir(args.partition_dir)
        if args.log_command == "dump":
            return 1 if dump(args.partition_dir, args.deep, not args.no_data) else 0
        offsets_for_times(args.partition_dir, args.timestamp)
        return 0
    except KStateError as error:
        print(f"kstate: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
