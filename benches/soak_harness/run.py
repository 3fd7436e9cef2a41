"""One soak run: moto's S3 server behind the fault proxy, Spark on ``local-cluster[2,1,1024]``,
the three queries of ``queries.py`` reading the files the run writes one by one, faults on their
schedule, every output row checked against ``reference.py`` as it arrives, and every
``check_every`` files (and at the end) the coverage, the timers and the state itself."""

from __future__ import annotations

import collections
import json
import logging
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from . import faults as fault_kinds
from .cluster import Cluster, TmpfsStateDirs
from .fault_proxy import FaultProxy
from .faults import Faults, schedule
from .reference import Expected, Reference
from .workload import WATERMARK_DELAY_MS, Workload, write_file

log = logging.getLogger("soak")

QUERIES = ("event", "processing", "backend")
EXECUTOR_HEAP_MB = 1024
INPUT_SCHEMA = "key string, file long, v long, event_ms long"
CREDENTIALS = {"key": "testing", "secret": "testing"}
# What kstate.log.object_store logs on each retry of a transient storage error (in the
# executors' stderr, where Python's last-resort handler prints warnings).
RETRY_LOG_MARK = "failed, retrying in"
# A task failed by a storage error kstate's retries could not outlast (Spark retries the task).
STORAGE_FAILURE_MARK = "RemoteStorageError:"
# Spark could not start a query's driver-side Python process (the tick source's reader) in time:
# the query ends before its first batch. A job supervisor restarts such a query; so does the soak.
FAILED_START_MARK = "Python worker failed to connect back"
FAILED_START_LIMIT = 10  # more in one run is a real problem, not a loaded machine's slow start


class SoakFailure(AssertionError):
    """The run found a wrong result, a missing fault, or a query that died."""


@dataclass
class SoakConfig:
    work_dir: Path
    files: int = 1_000
    seed: int = 0
    check_every: int = 100
    workload: Workload = field(default_factory=Workload)
    error_share: float = 0.005
    slowdown_share: float = 0.005
    delay_share: float = 0.01
    reset_share: float = 0.0025
    # Outages take turns: one shorter than kstate's retries (absorbed), one longer (the task fails
    # with RemoteStorageError and Spark retries it).
    outage_seconds: tuple[float, ...] = (8.0, 40.0)
    full_disk_seconds: float = 4.0
    state_disk_mb: int = 256
    file_timeout: float = 600.0
    # Spark waits for a stopping query's batch forever by default: a stuck batch must fail the
    # run (and the test), not hang it.
    stop_timeout: float = 120.0
    trigger: str = "1 second"  # as production queries set it; the default polls every 10 ms when idle
    # Files written before the oldest of them went through every query: the queries always have
    # the next file waiting, as on a busy stream. Before a restart of the queries only one is
    # (see _one_file).
    ahead: int = 2
    report_path: Path | None = None  # where each check writes the report so far (JSON)
    inflict: bool = True  # False: no scheduled faults (the proxy's shares still apply)
    # Compacted changelogs keep a deleted key's tombstone this long (Kafka's delete.retention.ms,
    # 24 h by default): shorter than the run, so that its storage can level off within it.
    tombstone_retention_ms: int = 600_000
    # Every store publishes a snapshot after this many commits (issue 44), so that restores after
    # the kills, restarts and wiped disks load snapshots, and uploads meet the storage faults.
    snapshot_every: int = 5


class Outputs:
    """Every output row checked as Spark hands it to ``foreachBatch`` (on every attempt: a replay
    is checked again and replaces the batch's earlier rows)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.expected: dict[int, Expected] = {}
        self.mismatches: list[str] = []
        self.batches_of_file = {q: collections.defaultdict(set) for q in QUERIES}
        self.event_timers: dict[int, list] = {}
        self.registered: dict[int, list] = {}
        self.fired: dict[int, list] = {}
        self.ttl_expired = 0
        self.rows = 0
        self.done_at: dict[int, float] = {}  # when a file went through its last query

    def done(self, query: str, index: int) -> bool:
        with self.lock:
            return index in self.batches_of_file[query]

    def _mismatch(self, text: str) -> None:
        self.mismatches.append(text)
        log.error("MISMATCH %s", text)

    def sink(self, query: str):
        check = {"event": self._event, "processing": self._processing, "backend": self._backend}[query]

        def on_batch(frame, batch_id):
            rows = [tuple(r) for r in frame.collect()]
            with self.lock:
                self.rows += len(rows)
                check(batch_id, rows)

        return on_batch

    def _file_of(self, query: str, batch_id: int, files: set) -> int | None:
        if not files:
            return None
        if len(files) > 1:
            self._mismatch(f"{query} batch {batch_id}: rows of files {sorted(files)}")
        index = min(files)
        self.batches_of_file[query][index].add(batch_id)
        if index not in self.done_at and all(index in self.batches_of_file[q] for q in QUERIES):
            self.done_at[index] = time.monotonic()
        return index

    def _event(self, batch_id, rows):
        data = [r for r in rows if r[1] == "data"]
        self.event_timers[batch_id] = [(r[0], r[3]) for r in rows if r[1] == "timer"]
        index = self._file_of("event", batch_id, {r[2] for r in data})
        if index is None:
            return
        expected = self.expected[index].event
        got = {r[0]: r for r in data}
        if set(got) != set(expected) or len(got) != len(data):
            self._mismatch(
                f"event batch {batch_id} (file {index}): keys differ by {sorted(set(got) ^ set(expected))[:5]}"
            )
        for key, (count, recent, buckets, prev) in expected.items():
            row = got.get(key)
            if row is None:
                continue
            if (row[3], row[4], row[5]) != (count, recent, buckets) or row[6] not in (None, prev):
                self._mismatch(
                    f"event batch {batch_id} (file {index}) key {key}: {row[3:]} != {(count, recent, buckets, prev)}"
                )
            elif row[6] is None and prev is not None:
                self.ttl_expired += 1

    def _processing(self, batch_id, rows):
        data = [r for r in rows if r[1] == "data"]
        self.registered[batch_id] = [(r[0], r[2]) for r in rows if r[1] == "registered"]
        self.fired[batch_id] = [(r[0], r[2]) for r in rows if r[1] == "fired"]
        for key, index in self.registered[batch_id]:
            if key not in self.expected[index].processing:
                self._mismatch(
                    f"processing batch {batch_id}: a timer of {key} registered by file {index}, which lacks it"
                )
        index = self._file_of("processing", batch_id, {r[2] for r in data})
        if index is None:
            return
        got = {r[0]: r[3] for r in data}
        if got != self.expected[index].processing or len(got) != len(data):
            wrong = [
                k
                for k in set(got) | set(self.expected[index].processing)
                if got.get(k) != self.expected[index].processing.get(k)
            ]
            self._mismatch(f"processing batch {batch_id} (file {index}): counts differ for {sorted(wrong)[:5]}")

    def _backend(self, batch_id, rows):
        index = self._file_of("backend", batch_id, {r[1] for r in rows})
        if index is not None and sorted(rows) != self.expected[index].backend:
            diff = set(rows) ^ set(self.expected[index].backend)
            self._mismatch(f"backend batch {batch_id} (file {index}): {len(diff)} rows differ, e.g. {sorted(diff)[:3]}")


class Sampler:
    """Per file: each executor's peak RSS (sampled every 0.2 s), local state bytes, and every
    ``remote_every`` files the bytes under the changelog location."""

    def __init__(self, cluster: Cluster, disks: TmpfsStateDirs, remote_bytes):
        self.cluster, self.disks, self.remote_bytes = cluster, disks, remote_bytes
        self.peaks: dict[str, int] = {}
        self.python_peaks: dict[str, int] = {}
        self.worker_peaks: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def _run(self):
        while not self.stop_event.wait(0.2):
            rss = self.cluster.rss_per_executor()
            with self.lock:
                for executor_id, (total, python, worker) in rss.items():
                    self.peaks[executor_id] = max(self.peaks.get(executor_id, 0), total)
                    self.python_peaks[executor_id] = max(self.python_peaks.get(executor_id, 0), python)
                    self.worker_peaks[executor_id] = max(self.worker_peaks.get(executor_id, 0), worker)

    def take(self, index: int, remote_every: int = 10) -> dict:
        with self.lock:
            peaks, self.peaks = self.peaks, {}
            python_peaks, self.python_peaks = self.python_peaks, {}
            worker_peaks, self.worker_peaks = self.worker_peaks, {}
        sample = {
            "rss": peaks,
            "rss_python": python_peaks,
            "rss_worker": worker_peaks,
            "local": sum(self.disks.used_bytes().values()),
        }
        if index % remote_every == 0:
            sample["remote"] = self.remote_bytes()
        return sample


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_s3_server() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            return server, endpoint
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto server did not start on {endpoint}") from None
            time.sleep(0.1)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def growth(blocks: list[dict]) -> dict | None:
    """The last 100 files against files 100-199 (after warm-up), as the soak's targets put it:
    RSS per executor within 10%, local and remote storage flat (within 10%) for what the query
    keeps (per key in the state: the workload adds keys as it goes), batch p50 within 1.2x.
    ``None`` for runs shorter than 300 files."""
    if len(blocks) < 3:
        return None
    base, last = blocks[1], blocks[-1]
    keys = last["keys"] / base["keys"]
    ratios = {
        "rss": last["rss_median_mib"] / base["rss_median_mib"],
        "rss_python": last["rss_python_median_mib"] / base["rss_python_median_mib"],
        "rss_worker": last["rss_worker_median_mib"] / base["rss_worker_median_mib"],
        "keys": keys,
        "local": last["local_mib"] / base["local_mib"],
        "remote": last["remote_mib"] / base["remote_mib"],
        "local_per_key": last["local_mib"] / base["local_mib"] / keys,
        "remote_per_key": last["remote_mib"] / base["remote_mib"] / keys,
        "batch_p50": last["batch_p50_ms"] / base["batch_p50_ms"],
    }
    limits = {"rss": 1.10, "rss_worker": 1.10, "local_per_key": 1.10, "remote_per_key": 1.10, "batch_p50": 1.20}
    # The raw storage ratios, the key ratio and the Python processes' sum (it steps by a PySpark
    # daemon as an executor ages: ``Cluster.rss_per_executor``) are reported to read, not judged.
    return {
        name: {"ratio": round(r, 3), **({"within": r <= limits[name]} if name in limits else {})}
        for name, r in ratios.items()
    }


class Soak:
    def __init__(self, config: SoakConfig):
        self.config = config
        self.outputs = Outputs()
        self.reference = Reference()
        self.samples: list[dict] = []
        self.written: dict[int, float] = {}
        self.batch_ms = {q: {} for q in QUERIES}
        self.batch_phases: dict[str, dict[int, dict]] = {q: {} for q in QUERIES}  # Spark's durationMs
        self.checks: list[dict] = []
        self.queries: dict = {}
        self.failed_starts = 0

    # -- set-up ------------------------------------------------------------------------------

    def _services(self):
        import boto3
        import s3fs

        self.s3_server, self.s3_direct = start_s3_server()
        self.proxy = FaultProxy(
            self.s3_direct,
            seed=self.config.seed,
            error_share=self.config.error_share,
            slowdown_share=self.config.slowdown_share,
            delay_share=self.config.delay_share,
            reset_share=self.config.reset_share,
        )
        self.proxy.start()
        self.direct_options = {"endpoint_url": self.s3_direct, **CREDENTIALS}
        # botocore's own retries (with s3fs's) stretch one kstate attempt to ~30 s in an outage;
        # two tries each keep kstate's retries, and their logs, in view.
        self.faulty_options = {
            "endpoint_url": self.proxy.endpoint,
            **CREDENTIALS,
            "config_kwargs": {"retries": {"total_max_attempts": 2}},
        }
        s3fs.S3FileSystem(**self.direct_options).mkdir("soak")
        self.changelogs = "s3://soak/changelogs"
        client = boto3.client(
            "s3",
            endpoint_url=self.s3_direct,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

        def remote_bytes() -> int:
            total = 0
            for page in client.get_paginator("list_objects_v2").paginate(Bucket="soak"):
                total += sum(o["Size"] for o in page.get("Contents", []))
            return total

        self.remote_bytes = remote_bytes

    def _spark(self):
        import pyspark

        from kstate.spark import local_session

        self.spark = local_session(
            "kstate-soak",
            master=f"local-cluster[2,1,{EXECUTOR_HEAP_MB}]",
            conf={
                "spark.ui.showConsoleProgress": "false",
                # The heap committed at start, as production executors often run (-Xms = -Xmx):
                # otherwise an executor's RSS grows with its heap for ~30 minutes after each
                # start, which is the JVM's sizing, not growth of what the query keeps.
                "spark.executor.extraJavaOptions": f"-Xms{EXECUTOR_HEAP_MB}m -XX:+AlwaysPreTouch",
                "spark.sql.streaming.stopTimeout": f"{int(self.config.stop_timeout * 1000)}ms",
            },
        )
        self.spark.sparkContext.setLogLevel("ERROR")
        app_id = self.spark.sparkContext.applicationId
        self.cluster = Cluster(Path(pyspark.__file__).parent, app_id)
        self.disks = TmpfsStateDirs(self.cluster, self.config.state_disk_mb)
        self.disks.start()

    def _changelog_config(self) -> dict:
        return {
            "delete.retention.ms": self.config.tombstone_retention_ms,
            "minDeltasForSnapshot": self.config.snapshot_every,
        }

    def _backend(self, options):
        from kstate import Stores
        from kstate.spark import StateBackend

        from .queries import MINUTE_MS, WINDOW_RETENTION_MS

        totals = Stores.key_value_store_builder(
            Stores.persistent_key_value_store("totals"), "string", "int64"
        ).with_logging_enabled(self._changelog_config())
        minutes = Stores.window_store_builder(
            Stores.persistent_window_store("minutes", retention_ms=WINDOW_RETENTION_MS, window_size_ms=MINUTE_MS),
            "string",
            "int64",
        ).with_logging_enabled(self._changelog_config())
        return StateBackend(
            [totals, minutes],
            None,
            self.changelogs,
            "soak-backend",
            changelog_storage_options=options,
            keys=["key"],
            num_partitions=2,
        )

    def _start_queries(self):
        from kstate.spark import transform_with_state

        from .queries import BACKEND_OUTPUT, TWS_OUTPUT, EventTimeCounts, ProcessingTimeCounts, count_and_window

        source = self.spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(self.input_dir))
        common = {
            "changelog_dir": self.changelogs,
            "api": "row",
            "changelog_storage_options": self.faulty_options,
            "changelog_config": self._changelog_config(),
        }
        frames = {
            "event": transform_with_state(
                source,
                ["key"],
                EventTimeCounts(),
                TWS_OUTPUT,
                None,
                application_id="soak-event",
                time_mode="EventTime",
                event_time_column="event_ms",
                watermark_delay_ms=WATERMARK_DELAY_MS,
                **common,
            ),
            "processing": transform_with_state(
                source,
                ["key"],
                ProcessingTimeCounts(),
                TWS_OUTPUT,
                None,
                application_id="soak-processing",
                time_mode="ProcessingTime",
                **common,
            ),
        }
        backend = self._backend(self.faulty_options)
        frames["backend"] = backend.partition(source).mapInArrow(backend.map_in_arrow(count_and_window), BACKEND_OUTPUT)
        for name, frame in frames.items():
            self.queries[name] = (
                frame.writeStream.outputMode("update")
                .foreachBatch(self.outputs.sink(name))
                .option("checkpointLocation", str(self.config.work_dir / "checkpoints" / name))
                .trigger(processingTime=self.config.trigger)
                .start()
            )

    def _stop_queries(self):
        for query in self.queries.values():
            query.stop()
        self._progress()

    def _progress(self):
        for name, query in self.queries.items():
            for progress in query.recentProgress:
                rows = sum(
                    s["numInputRows"] for s in progress["sources"] if s["description"].startswith("FileStreamSource")
                )
                if rows:
                    self.batch_ms[name][progress["batchId"]] = progress["durationMs"].get("triggerExecution", 0)
                    self.batch_phases[name][progress["batchId"]] = progress["durationMs"]

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> dict:
        config = self.config
        self.input_dir = config.work_dir / "in"
        self.input_dir.mkdir(parents=True, exist_ok=True)
        self._services()
        self._spark()
        try:
            self.faults = Faults(self.cluster, self.disks, self.proxy, config.seed, config.outage_seconds)
            self.plan = schedule(config.files, config.seed) if config.inflict else {}
            self.sampler = Sampler(self.cluster, self.disks, self.remote_bytes)
            self.sampler.thread.start()
            self._start_queries()
            failure = None
            try:
                for index in range(config.files):
                    self._one_file(index)
                    if (index + 1) % config.check_every == 0 or index == config.files - 1:
                        self._check(index, final=index == config.files - 1)
            except SoakFailure as error:
                failure = str(error)
                log.error("soak failed: %s", failure)
            return {**self.report(), "failure": failure}
        finally:
            self._teardown()

    def _one_file(self, index: int) -> None:
        """Writes file ``index`` once file ``index - ahead`` went through every query (so the
        queries run back to back, as on a busy stream), then inflicts the file's faults. Before
        a restart of the queries, and until the file written before it is through, one file at a
        time: after a restart, Spark's file source puts a file it had listed but not processed and
        any newer ones in one batch (maxFilesPerTrigger counts new files only), and the reference
        takes a file per batch."""
        restarting = any(fault_kinds.RESTART_QUERIES in self.plan.get(i, []) for i in (index, index - 1))
        self._through_every_query(index - (1 if restarting else self.config.ahead))
        columns = self.config.workload.file(index)
        expected = self.reference.add(index, columns)
        with self.outputs.lock:
            self.outputs.expected[index] = expected
        write_file(self.input_dir, index, columns)
        self.written[index] = time.monotonic()
        for kind in self.plan.get(index, []):
            self._inflict(kind)
        self.samples.append({**self.sampler.take(index), "keys": len(self.reference.counts)})
        if index % 10 == 0:
            self._progress()
            log.info(
                "file %d written; faults so far %s; object store requests %s",
                index,
                dict(self.faults.happened),
                dict(self.proxy.counts),
            )

    def _through_every_query(self, index: int) -> None:
        if index >= 0:
            self._wait(lambda: all(self.outputs.done(q, index) for q in QUERIES), f"file {index} through every query")

    def _inflict(self, kind: str) -> None:
        f = self.faults
        if kind == fault_kinds.KILL_EXECUTOR:
            f.later(f.kill_executor)
        elif kind in (fault_kinds.KILL_WORKER_PUBLISHING, fault_kinds.KILL_WORKER_COMMITTING):
            f.kill_worker_at(kind)
        elif kind == fault_kinds.FULL_STATE_DIR:
            f.later(lambda: f.fill_state_dir(self.config.full_disk_seconds))
        elif kind == fault_kinds.STORAGE_OUTAGE:
            f.later(f.storage_outage)
        elif kind == fault_kinds.RESTART_QUERIES:
            time.sleep(f.rng.uniform(0.2, 1.5))
            self._stop_queries()
            f.restarted()
            self._start_queries()

    def _wait(self, condition, what: str) -> None:
        deadline = time.monotonic() + self.config.file_timeout
        while not condition():
            for name, query in self.queries.items():
                if not query.isActive:
                    error = str(query.exception())
                    if FAILED_START_MARK in error and query.lastProgress is None:
                        self._restart_after_failed_start(name, error)
                        break
                    raise SoakFailure(f"query {name} stopped while waiting for {what}: {error}")
            if time.monotonic() > deadline:
                with self.outputs.lock:
                    newest = {q: max(files, default=None) for q, files in self.outputs.batches_of_file.items()}
                statuses = {name: query.status for name, query in self.queries.items()}
                raise SoakFailure(
                    f"{what}: not in {self.config.file_timeout} s (newest file through each query: {newest}; "
                    f"query status: {statuses})"
                )
            time.sleep(0.05)

    def _restart_after_failed_start(self, name: str, error: str) -> None:
        self.failed_starts += 1
        if self.failed_starts > FAILED_START_LIMIT:
            raise SoakFailure(f"query {name} failed to start {self.failed_starts} times: {error}")
        log.warning("query %s failed to start (%s); restarting the queries", name, error.splitlines()[0])
        self._stop_queries()
        self._start_queries()

    # -- checks ------------------------------------------------------------------------------

    def _check(self, index: int, final: bool) -> None:
        self._through_every_query(index)
        started = time.monotonic()
        problems = list(self.outputs.mismatches)
        with self.outputs.lock:
            for query in QUERIES:
                files = self.outputs.batches_of_file[query]
                missing = [i for i in range(index + 1) if i not in files]
                doubled = {i: sorted(b) for i, b in files.items() if len(b) > 1}
                if missing or doubled:
                    problems.append(
                        f"{query}: files missing {missing[:5]}, in two batches {dict(list(doubled.items())[:5])}"
                    )
            fired = collections.Counter(t for timers in self.outputs.event_timers.values() for t in timers)
        due = {t for t in self.reference.registered_timers if t[1] < self.reference.watermark_before(index)}
        problems += [f"event timer fired twice: {t}" for t, n in fired.items() if n > 1][:5]
        problems += [f"event timer never registered fired: {t}" for t in set(fired) - self.reference.registered_timers][
            :5
        ]
        problems += [f"event timer due but not fired: {t}" for t in sorted(due - set(fired))][:5]
        if final:
            self._wait_for_processing_timers()
        problems += self._processing_timer_problems(final)
        self._stop_queries()
        problems += self._state_problems()
        if not final:
            self._start_queries()
        check = {"file": index, "problems": problems, "seconds": round(time.monotonic() - started, 1)}
        self.checks.append(check)
        if self.config.report_path is not None:  # a run stopped later still leaves its figures
            self.config.report_path.write_text(json.dumps({**self.report(), "failure": None}, indent=2))
        log.info("check at file %d: %s", index, "exact" if not problems else problems)
        if problems:
            raise SoakFailure(f"check at file {index}: {problems}")

    def _wait_for_processing_timers(self) -> None:
        def settled():
            with self.outputs.lock:
                registered = {t for ts in self.outputs.registered.values() for t in ts}
                fired = {t for ts in self.outputs.fired.values() for t in ts}
            return registered == fired

        self._wait(settled, "every processing-time timer fired")

    def _processing_timer_problems(self, final: bool) -> list[str]:
        with self.outputs.lock:
            registered = collections.Counter(t for ts in self.outputs.registered.values() for t in ts)
            fired = collections.Counter(t for ts in self.outputs.fired.values() for t in ts)
        problems = [f"processing timer registered twice: {t}" for t, n in registered.items() if n > 1][:5]
        problems += [f"processing timer fired twice: {t}" for t, n in fired.items() if n > 1][:5]
        problems += [f"processing timer fired, never registered: {t}" for t in set(fired) - set(registered)][:5]
        if final:
            problems += [f"processing timer never fired: {t}" for t in set(registered) - set(fired)][:5]
        return problems

    def _state_problems(self) -> list[str]:
        from kstate.spark import read_processor_state

        ref, problems = self.reference, []

        def compare(what, got, want):
            if got != want:
                wrong = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
                problems.append(
                    f"{what}: {len(wrong)} keys differ, e.g. {[(k, got.get(k), want.get(k)) for k in wrong[:3]]}"
                )

        def variable(app, name):
            return read_processor_state(
                self.spark, self.changelogs, app, stateVarName=name, changelog_storage_options=self.direct_options
            ).collect()

        compare("event count", {r.key[0]: r.value[0] for r in variable("soak-event", "count")}, dict(ref.event_counts))
        buckets = {(r.key[0], r.user_map_key[0]): r.user_map_value[0] for r in variable("soak-event", "buckets")}
        compare("event buckets", buckets, {(k, b): n for k, c in ref.buckets.items() for b, n in c.items()})
        recent = collections.defaultdict(list)
        for r in variable("soak-event", "recent"):
            recent[r.key[0]].append(r.list_element[0])
        compare(
            "event recent", {k: sorted(v) for k, v in recent.items()}, {k: sorted(v) for k, v in ref.recent.items()}
        )
        compare(
            "processing count", {r.key[0]: r.value[0] for r in variable("soak-processing", "count")}, dict(ref.counts)
        )
        backend = self._backend(self.direct_options)
        totals = backend.state_dataframe(self.spark, "totals").collect()
        compare("backend totals", {r.key: r.value for r in totals}, dict(ref.counts))
        newest = max(ref.largest_event.values())
        kept_from = newest - WINDOW_KEEP_CHECKED_MS
        windows = {(r.key, r.start): r.value for r in backend.state_dataframe(self.spark, "minutes").collect()}
        compare(
            "backend windows",
            {k: v for k, v in windows.items() if k[1] >= kept_from},
            {k: v for k, v in ref.windows.items() if k[1] >= kept_from},
        )
        stale = [k for k, v in windows.items() if ref.windows.get(k) != v]
        if stale:
            problems.append(f"backend windows: {len(stale)} old windows hold wrong counts, e.g. {stale[:3]}")
        return problems

    # -- report ------------------------------------------------------------------------------

    def report(self) -> dict:
        self._progress()
        blocks = []
        done = len(self.samples)
        latencies = [self.outputs.done_at[i] - self.written[i] for i in range(done) if i in self.outputs.done_at]
        size = min(100, self.config.files)
        for start in range(0, done, size):
            end = min(done, start + size)
            samples = self.samples[start:end]
            rss = [max(s["rss"].values()) for s in samples if s["rss"]]
            rss_python = [max(s["rss_python"].values()) for s in samples if s["rss_python"]]
            rss_worker = [max(s["rss_worker"].values()) for s in samples if s["rss_worker"]]
            remote = [s["remote"] for s in samples if "remote" in s]
            batch = [
                self.batch_ms[q][b]
                for q in QUERIES
                for f in range(start, end)
                for b in self.outputs.batches_of_file[q].get(f, ())
                if b in self.batch_ms[q]
            ]
            blocks.append(
                {
                    "files": f"{start}-{end - 1}",
                    "latency_p50_s": round(percentile(latencies[start:end], 0.5), 2),
                    "latency_p99_s": round(percentile(latencies[start:end], 0.99), 2),
                    "batch_p50_ms": percentile(batch, 0.5),
                    "batch_p99_ms": percentile(batch, 0.99),
                    "rss_peak_mib": round(max(rss, default=0) / 2**20),
                    "rss_median_mib": round(statistics.median(rss) / 2**20) if rss else 0,
                    "rss_python_median_mib": round(statistics.median(rss_python) / 2**20) if rss_python else 0,
                    "rss_worker_median_mib": round(statistics.median(rss_worker) / 2**20) if rss_worker else 0,
                    "local_mib": round(statistics.median([s["local"] for s in samples]) / 2**20, 1),
                    "remote_mib": round(statistics.median(remote) / 2**20, 1) if remote else None,
                    "keys": samples[-1]["keys"],  # keys in the state at the block's end (the reference's)
                    "faults": sum(len(self.plan.get(i, [])) for i in range(start, end)),
                }
            )
        return {
            "files": done,
            "rows_per_file": self.config.workload.rows,
            "seed": self.config.seed,
            "faults": dict(self.faults.happened),
            "proxy": dict(self.proxy.counts),
            "requests_per_file_all": round(sum(self.proxy.requests.values()) / max(1, done), 1),
            # Where a data batch's time goes, by Spark's own phases (medians per query).
            "batch_phases_p50_ms": {
                q: {
                    phase: percentile([d.get(phase, 0) for d in phases.values()], 0.5)
                    for phase in sorted({k for d in phases.values() for k in d})
                }
                for q, phases in self.batch_phases.items()
            },
            "requests_per_file": {
                f"{method} {kind}": round(n / max(1, done), 1)
                for (method, kind), n in self.proxy.requests.most_common(25)
            },
            "kstate_retries": self._executor_log_count(RETRY_LOG_MARK),
            "storage_task_failures": self._executor_log_count(STORAGE_FAILURE_MARK),
            "failed_query_starts": self.failed_starts,
            "ttl_expired_reads": self.outputs.ttl_expired,
            "checks": self.checks,
            "blocks": blocks,
            "growth": growth(blocks),
        }

    def _executor_log_count(self, mark: str) -> int:
        return sum(e.read_text(errors="replace").count(mark) for e in self.cluster.work.glob("*/stderr"))

    def _teardown(self) -> None:
        for query in self.queries.values():
            try:
                query.stop()
            except Exception:
                log.exception("stopping a query")
        for step in (
            self.sampler.stop_event.set if hasattr(self, "sampler") else None,
            self.spark.stop,
            self.disks.stop,
            self.proxy.stop,
        ):
            if step is not None:
                try:
                    step()
                except Exception:
                    log.exception("teardown")
        self.s3_server.terminate()
        self.s3_server.wait()


# Windows older than this below the newest event are not required to be present: retention drops
# whole segments, so some older ones may be gone (those present must still be right).
WINDOW_KEEP_CHECKED_MS = 20 * 60_000
