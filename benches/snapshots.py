"""Snapshots beside the changelog (issue 44), on a local changelog directory and on an S3 API
server (moto on loopback); benches/README.md, "Snapshots beside the changelog".

Restore (the default): a store of N keys (16-byte keys, 100-byte values) written in commits of
100k keys through its changelog, a snapshot after the last full round, then ``--tail`` commits
of 100k updates; a machine without local state restores it from the changelog alone and from
the newest snapshot plus the changelog after it. Each restore is ``init`` in a new process,
rounds alternating changelog / snapshot; one markdown row per (location, mode): best and median
seconds, records replayed, MB/s of the snapshot's files.

    .venv/bin/python benches/snapshots.py 1000000 5000000 [--dir /var/tmp] [--runs 3] [--s3]

With ``--store window`` the store is a window store of N windows (16-byte keys, six hourly
windows each, in two of its 3-hour segments; 100-byte values), written and updated alike.

    .venv/bin/python benches/snapshots.py 1000000 --store window [--s3]

Commits (``--commits C``): a store of N keys, then C commits of 10k random updates each (a
micro-batch), snapshots off and with ``minDeltasForSnapshot=10`` (taken in the background), each
in a new process, alternating, each starting on a settled disk (the previous run's files deleted,
``sync``); one row per (location, mode): commit p50 / p99 / max ms and the snapshots published.

    .venv/bin/python benches/snapshots.py 1000000 --commits 200 [--s3 [--s3-server s3s-fs]] [--segment-bytes B]

``--segment-bytes``: the changelog's ``segment.bytes`` (16 MiB is kstate.spark's), so that it
rolls and compacts within the run (with Kafka's 1 GiB a run of a few hundred commits does not).
``--rocksdb NAME=VALUE`` (repeatable): a RocksDB option over kstate's (``rocksdb.config.setter``),
in every mode; ``--rocksdb bytes_per_sync=0`` is RocksDB's default before kstate set 1 MiB.

``--s3`` runs each on moto's S3 server too, or with ``--s3-server s3s-fs`` on s3s-fs (a Rust S3
server over a local directory, built with cargo on first use): moto handles one request at a
time, so a snapshot's upload holds up the commits' own requests there.

Storage (``--storage C``): a store of N keys (a fixed key set; changelog segments of 16 MiB, as
kstate.spark rolls them), then C commits of 10k random updates each, snapshots off and every 10
commits (in the background) with their collection
(``minBatchesToRetain``, ``--retain``: snapshots kept, a store outside Spark counting snapshots;
files of collected snapshots deleted at once, ``--delete-delay`` seconds guarding concurrent
writers being 0 for this one writer); every 50 commits one row: the local state's bytes (the
task directory, and a remote changelog's cache), the changelog location's bytes (changelog and
snapshots), their sum counting hard-linked files once, the snapshots kept and the changelog's
first offset.

    .venv/bin/python benches/snapshots.py 100000 --storage 200 [--s3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

BATCH = 100_000
UPDATES = 10_000
SNAPSHOT_EVERY = 10
STORAGE_EVERY = 50
STORAGE_SEGMENT_BYTES = 16 * 1024 * 1024
APP = "app"
HOUR = 3_600_000
WINDOWS_PER_KEY = 6
WINDOW_RETENTION = 6 * HOUR
"""Six hours of retention: 3-hour segments, a key's six hourly windows in two of them."""
WINDOW_BASE = 1_800_000_000_000 // (3 * HOUR) * (3 * HOUR)
"""The first window's start, a segment's; the changelog deletes nothing by the clock."""

OPEN = f"""
import json, os, random, sys, time
from kstate import Stores
task, config, kind = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
rocksdb = config.pop("rocksdb", None)
if kind == "window":
    supplier = Stores.persistent_window_store("restored", retention_ms={WINDOW_RETENTION}, window_size_ms={HOUR})
    builder = Stores.window_store_builder(supplier).with_logging_enabled(config)
else:
    supplier = Stores.persistent_key_value_store("restored")
    builder = Stores.key_value_store_builder(supplier).with_logging_enabled(config)
if rocksdb:
    builder = builder.with_config({{"rocksdb.config.setter": rocksdb}})
"""

RESTORE = (
    OPEN
    + """
started = time.perf_counter()
store = builder.build().init(task)
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "records": store.restored_records, "offset": store.committed_offset()}))
store.close()
"""
)

COMMITS = (
    OPEN
    + """
from kstate.log.snapshots import open_snapshots
keys, commits, updates = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
values = [os.urandom(100) for _ in range(4096)]
random.seed(7)
with builder.build().init(task) as store:
    for start in range(0, keys, 100_000):
        store.put_all([b"key-%012d" % i for i in range(start, start + 100_000)],
                      [values[i % 4096] for i in range(start, start + 100_000)])
        store.commit()
    times = []
    for _ in range(commits):
        picked = random.sample(range(keys), updates)
        store.put_all([b"key-%012d" % i for i in picked], [values[i % 4096] for i in picked])
        started = time.perf_counter()
        store.commit()
        times.append(time.perf_counter() - started)
    topic, partition = store.changelog_topic, store.partition
location = open_snapshots(config["changelog.dir"], topic, partition, config.get("changelog.storage.options"))
print(json.dumps({"times": times, "snapshots": len(location.offsets())}))
"""
)


STORAGE = (
    OPEN
    + """
from kstate.log import snapshot_retention
from kstate.log.remote import RemoteChangelog, resolve
keys, commits, updates, every = (int(a) for a in sys.argv[4:8])
snapshot_retention.DELETE_DELAY_SECONDS = float(sys.argv[8])
state_dir = os.path.dirname(os.path.dirname(task))
values = [os.urandom(100) for _ in range(4096)]
random.seed(7)
url = config["changelog.dir"]

def files_of(root):
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            try:
                stat = os.stat(os.path.join(directory, name))
            except FileNotFoundError:
                continue
            found[(stat.st_dev, stat.st_ino)] = stat.st_size
    return found

def sizes(store):
    local = files_of(state_dir)
    if "://" in url:
        import fsspec
        fs, root = fsspec.core.url_to_fs(url, **config.get("changelog.storage.options", {}))
        fs.invalidate_cache()
        location = sum(info["size"] for info in fs.find(root, detail=True).values())
        remote = RemoteChangelog(url, store.changelog_topic, store.partition, config.get("changelog.storage.options"))
        start = resolve(remote.list())[0].first
        shared = 0
    else:
        at = files_of(url)
        location, shared = sum(at.values()), sum(size for inode, size in at.items() if inode in local)
        start = store._reader.changelog_range()[0]
    writer = store._snapshot_writer
    kept = writer.last_collected.kept if writer is not None and writer.last_collected is not None else 0
    return sum(local.values()), location, sum(local.values()) + location - shared, kept, start

with builder.build().init(task) as store:
    for start in range(0, keys, 100_000):
        store.put_all([b"key-%012d" % i for i in range(start, start + 100_000)],
                      [values[i % 4096] for i in range(start, start + 100_000)])
        store.commit()
    for commit in range(1, commits + 1):
        picked = random.sample(range(keys), updates)
        store.put_all([b"key-%012d" % i for i in picked], [values[i % 4096] for i in picked])
        store.commit()
        if commit % every == 0:
            print(json.dumps([commit, *sizes(store)]), flush=True)
"""
)


def run(script: str, *args: object) -> dict:
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def write(task: str, config: dict, keys: int, tail: int, kind: str) -> dict:
    """Writes ``keys`` keys (windows) in commits of ``BATCH``, a snapshot, then ``tail``
    commits of ``BATCH`` updates; returns what the snapshot copied and the final offset."""
    from kstate import Stores

    values = [os.urandom(100) for _ in range(4096)]
    if kind == "window":
        window = Stores.persistent_window_store("restored", retention_ms=WINDOW_RETENTION, window_size_ms=HOUR)
        builder = Stores.window_store_builder(window).with_logging_enabled(config)
    else:
        supplier = Stores.persistent_key_value_store("restored")
        builder = Stores.key_value_store_builder(supplier).with_logging_enabled(config)

    def put(store: Any, picked: list[int]) -> None:
        if kind == "window":
            keys = [b"key-%012d" % (i // WINDOWS_PER_KEY) for i in picked]
            starts = [WINDOW_BASE + i % WINDOWS_PER_KEY * HOUR for i in picked]
            store.put_all(keys, [values[i % 4096] for i in picked], starts)
        else:
            store.put_all([b"key-%012d" % i for i in picked], [values[i % 4096] for i in picked])
        store.commit()

    with builder.build().init(task) as store:
        for start in range(0, keys, BATCH):
            put(store, list(range(start, min(start + BATCH, keys))))
        published = store.snapshot()
        for round_ in range(tail):
            put(store, [(round_ * 7919 + i * 13) % keys for i in range(BATCH)])
        return {"snapshot_bytes": published.bytes if published else 0, "offset": store.committed_offset()}


def restore_rows(root: str, location: str, config: dict, keys: int, args: argparse.Namespace) -> list[list[str]]:
    # Snapshots on for every reader (a remote changelog is listed for them only then); only the
    # writer's explicit snapshot() takes one.
    with_snapshots = {**config, "minDeltasForSnapshot": 1_000_000}
    wrote = write(os.path.join(root, "writer", APP, "0_0"), with_snapshots, keys, args.tail, args.store)
    task = os.path.join(root, "reader", APP, "0_0")
    times: dict[str, list[float]] = {"changelog": [], "snapshot": []}
    records: dict[str, int] = {}
    snapshots_dir = os.path.join(root, "changelog", f"{APP}-restored-changelog-0", "snapshots")
    hidden = os.path.join(root, "hidden")
    for _ in range(args.runs):
        for mode, used in (("changelog", config), ("snapshot", with_snapshots)):
            shutil.rmtree(task, ignore_errors=True)
            # A local changelog directory with snapshots is always looked at: hidden for the
            # changelog-only rounds.
            hide = mode == "changelog" and location == "dir"
            if hide:
                os.rename(snapshots_dir, hidden)
            try:
                done = run(RESTORE, task, json.dumps(used), args.store)
            finally:
                if hide:
                    os.rename(hidden, snapshots_dir)
            assert done["offset"] == wrote["offset"], (done, wrote)
            times[mode].append(done["seconds"])
            records[mode] = done["records"]
    rows = []
    for mode in ("changelog", "snapshot"):
        best, median = min(times[mode]), statistics.median(times[mode])
        rate = f"{wrote['snapshot_bytes'] / 1e6 / best:,.0f}" if mode == "snapshot" else "-"
        rows.append([f"{keys:,}", location, mode, f"{best:.2f}", f"{median:.2f}", f"{records[mode]:,}", rate])
    return rows


def settle(config: dict, state_dir: str, s3_data: str | None) -> None:
    """Deletes a run's changelog location and local state and waits for the disk: the next run
    (the other mode) then starts without this one's hundreds of MiB still being written back
    under its commits. ``s3_data``: s3s-fs's directory (its buckets are directories there)."""
    shutil.rmtree(state_dir, ignore_errors=True)
    url = config["changelog.dir"]
    if not url.startswith("s3://"):
        shutil.rmtree(url, ignore_errors=True)
    elif s3_data is not None:
        shutil.rmtree(os.path.join(s3_data, url[len("s3://") :]), ignore_errors=True)
    else:  # moto's server keeps objects in memory
        import s3fs

        s3fs.S3FileSystem(**config["changelog.storage.options"]).rm(url, recursive=True)
    os.sync()


def commit_rows(root: str, location: str, config: dict, keys: int, args: argparse.Namespace) -> list[list[str]]:
    modes = {"off": config, f"every {SNAPSHOT_EVERY}": {**config, "minDeltasForSnapshot": SNAPSHOT_EVERY}}
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    snapshots: dict[str, int] = {}
    for attempt in range(args.runs):
        for number, (mode, used) in enumerate(modes.items()):
            # A location and local state of its own per run: the same work each time (a run
            # given another's changelog would restore it first and append to it).
            if location == "dir":
                used = {**used, "changelog.dir": os.path.join(root, f"changelog-{attempt}-{number}")}
            else:
                used = {**used, "changelog.dir": f"{config['changelog.dir']}-{attempt}-{number}"}
            task = os.path.join(root, f"task-{attempt}-{number}", APP, "0_0")
            done = run(COMMITS, task, json.dumps(used), "key-value", keys, args.commits, UPDATES)
            times[mode].extend(done["times"])
            snapshots[mode] = done["snapshots"]
            settle(used, os.path.dirname(os.path.dirname(task)), args.s3_data)
    rows = []
    for mode, measured in times.items():
        ms = sorted(t * 1000 for t in measured)
        p50, p99 = ms[len(ms) // 2], ms[min(len(ms) - 1, int(len(ms) * 0.99))]
        rows.append([f"{keys:,}", location, mode, f"{p50:.1f}", f"{p99:.1f}", f"{ms[-1]:.1f}", str(snapshots[mode])])
    return rows


def storage_rows(root: str, location: str, config: dict, keys: int, args: argparse.Namespace) -> list[list[str]]:
    # Segments as kstate.spark's changelogs roll them: a local changelog compacts, and deletes
    # history, whole sealed segments at a time (Kafka's default of 1 GiB would hold all of it).
    config = {**config, "segment.bytes": STORAGE_SEGMENT_BYTES}
    every = {**config, "minDeltasForSnapshot": SNAPSHOT_EVERY, "minBatchesToRetain": args.retain}
    rows = []
    for index, (mode, used) in enumerate((("off", config), (f"every {SNAPSHOT_EVERY}", every))):
        if location == "dir":
            used = {**used, "changelog.dir": os.path.join(root, f"changelog-{index}")}
        else:
            used = {**used, "changelog.dir": f"{config['changelog.dir']}-{index}"}
        task = os.path.join(root, f"state-{index}", APP, "0_0")
        argv = [task, json.dumps(used), args.store, keys, args.storage, UPDATES, STORAGE_EVERY, args.delete_delay]
        done = subprocess.run(
            [sys.executable, "-c", STORAGE, *map(str, argv)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        for line in done.stdout.strip().splitlines():
            commit, local, at, total, kept, start = json.loads(line)
            rows.append(
                [
                    f"{keys:,}",
                    location,
                    mode,
                    str(commit),
                    f"{local / 1e6:.1f}",
                    f"{at / 1e6:.1f}",
                    f"{total / 1e6:.1f}",
                    str(kept),
                    f"{start:,}",
                ]
            )
    return rows


def start_moto() -> tuple[subprocess.Popen, str]:
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            return server, endpoint
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("moto did not start")


S3S_FS_VERSION = "0.14.1"
"""s3s-fs, a Rust S3 server over a local directory (multi-threaded: unlike moto, one upload does
not hold up every other request); the newest release this machine's rustc builds."""


def start_s3s_fs(data_dir: str) -> tuple[subprocess.Popen, str]:
    """s3s-fs on a free port over ``data_dir``, built into kstate's tool cache on first use."""
    import socket
    import urllib.error
    import urllib.request

    tools = os.path.expanduser("~/.cache/kstate/tools")
    binary = os.path.join(tools, "bin", "s3s-fs")
    if not os.path.exists(binary):
        print(f"building s3s-fs {S3S_FS_VERSION} into {tools} (a few minutes, once)", file=sys.stderr)
        env = {**os.environ, "CARGO_TARGET_DIR": os.path.join(tools, "target"), "RUSTFLAGS": ""}
        command = ["cargo", "install", f"s3s-fs@{S3S_FS_VERSION}", "--features", "binary", "--root", tools]
        subprocess.run(command, check=True, env=env)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.makedirs(data_dir, exist_ok=True)
    server = subprocess.Popen(
        [binary, "--host", "127.0.0.1", "--port", str(port), "--access-key", "testing", "--secret-key", "testing"]
        + [data_dir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
            return server, endpoint
        except urllib.error.HTTPError:  # an answer (403: unsigned): it is up
            return server, endpoint
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("s3s-fs did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("keys", type=int, nargs="+")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tail", type=int, default=2, help="restore: commits of 100k updates after the snapshot")
    parser.add_argument("--commits", type=int, default=0, help="commit latency over this many commits instead")
    parser.add_argument("--storage", type=int, default=0, help="storage over this many commits instead")
    parser.add_argument("--retain", type=int, default=2, help="storage: minBatchesToRetain (snapshots kept)")
    parser.add_argument("--delete-delay", type=float, default=0.0, help="storage: seconds before unnamed files go")
    parser.add_argument("--s3", action="store_true", help="also on an S3 API server on loopback")
    parser.add_argument(
        "--s3-server", choices=["moto", "s3s-fs"], default="moto", help="--s3's server: moto's, or s3s-fs (Rust)"
    )
    parser.add_argument("--store", choices=["key-value", "window"], default="key-value", help="restore: the store kind")
    parser.add_argument(
        "--segment-bytes", type=int, default=None, help="commits: the changelog's segment.bytes (Kafka's 1 GiB)"
    )
    parser.add_argument(
        "--rocksdb", action="append", default=[], metavar="NAME=VALUE", help="a RocksDB option over kstate's"
    )
    args = parser.parse_args()
    if (args.commits or args.storage) and args.store != "key-value":
        parser.error("--commits and --storage measure key-value stores")
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1"
    server = s3_data = None
    locations = ["dir"]
    if args.s3:
        if args.s3_server == "moto":
            server, endpoint = start_moto()
        else:
            s3_data = tempfile.mkdtemp(prefix="kstate-s3s-", dir=args.dir)
            server, endpoint = start_s3s_fs(s3_data)
        locations.append("s3" if args.s3_server == "moto" else "s3s-fs")
    args.s3_data = s3_data  # commit rows delete each run's objects there
    if args.storage:
        print("| keys | location | snapshots | commits | local MB | location MB | total MB | kept | changelog start |")
        print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    elif args.commits:
        print("| keys | location | snapshots | commit p50 ms | p99 ms | max ms | snapshots published |")
    else:
        what = "windows" if args.store == "window" else "keys"
        print(f"| {what} | location | restore from | best s | median s | records replayed | MB/s of snapshot files |")
    if not args.storage:
        print("|---:|---|---|---:|---:|---:|---:|")
    try:
        for keys in args.keys:
            for location in locations:
                root = tempfile.mkdtemp(prefix="kstate-snapshots-", dir=args.dir)
                try:
                    if location == "dir":
                        config: dict = {"changelog.dir": os.path.join(root, "changelog")}
                    else:
                        import s3fs

                        options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
                        bucket = f"bench-{os.getpid()}-{keys}"
                        s3fs.S3FileSystem(**options).mkdir(bucket)
                        config = {"changelog.dir": f"s3://{bucket}/changelogs", "changelog.storage.options": options}
                    if args.segment_bytes:
                        config["segment.bytes"] = args.segment_bytes
                    if args.rocksdb:
                        config["rocksdb"] = dict(option.split("=", 1) for option in args.rocksdb)
                    if args.store == "window":
                        config["retention.ms"] = "-1"  # old event times: nothing deleted by the clock
                    rows_of = storage_rows if args.storage else commit_rows if args.commits else restore_rows
                    rows = rows_of(root, location, config, keys, args)
                    for row in rows:
                        print(f"| {' | '.join(row)} |", flush=True)
                finally:
                    shutil.rmtree(root, ignore_errors=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        if s3_data is not None:
            shutil.rmtree(s3_data, ignore_errors=True)


if __name__ == "__main__":
    main()
