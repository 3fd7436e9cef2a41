"""The soak's queries in plain Python, file by file: what each output row and the final state
must be (``queries.py`` runs the same logic in kstate). Written from the queries' meaning, not
from kstate: late rows by Spark's watermark rule, windows by event-time minute."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from .queries import BUCKETS, MINUTE_MS, RECENT, timer_of
from .workload import WATERMARK_DELAY_MS


@dataclass
class Expected:
    """One file's expected rows per query: ``event`` (key -> its data row, ``prev`` being the
    file of the key's earlier rows, which its TTL may have expired), ``processing`` (key -> count),
    ``backend`` (the sorted rows), and the event-time timers the file registers."""

    event: dict[str, tuple]
    processing: dict[str, int]
    backend: list[tuple]
    timers: set[tuple[str, int]]


@dataclass
class Reference:
    counts: collections.Counter = field(default_factory=collections.Counter)  # every row, per key
    event_counts: collections.Counter = field(default_factory=collections.Counter)  # rows not late
    recent: dict[str, list[int]] = field(default_factory=dict)
    buckets: dict[str, collections.Counter] = field(default_factory=dict)
    last_file: dict[str, int] = field(default_factory=dict)
    windows: collections.Counter = field(default_factory=collections.Counter)
    largest_event: dict[int, int] = field(default_factory=dict)  # per file
    registered_timers: set = field(default_factory=set)

    def watermark_before(self, index: int) -> int:
        """The timers' watermark of the batch of file ``index`` (largest event time of earlier
        files less the delay; 0 before any)."""
        earlier = [t for f, t in self.largest_event.items() if f < index]
        return max(0, max(earlier) - WATERMARK_DELAY_MS) if earlier else 0

    def add(self, index: int, columns: dict[str, list]) -> Expected:
        rows = sorted(zip(columns["key"], columns["v"], columns["event_ms"]), key=lambda r: r[1])
        late_bound = self.watermark_before(index - 1) if index >= 1 else 0
        self.largest_event[index] = max(columns["event_ms"])
        by_key: dict[str, list] = collections.defaultdict(list)
        for key, v, event_ms in rows:
            by_key[key].append((v, event_ms))

        event, timers = {}, set()
        for key, key_rows in by_key.items():
            kept = [(v, t) for v, t in key_rows if t > late_bound]
            if not kept:
                continue
            self.event_counts[key] += len(kept)
            recent = (self.recent.get(key, []) + [v for v, _ in kept])[-RECENT:]
            self.recent[key] = recent
            buckets = self.buckets.setdefault(key, collections.Counter())
            buckets.update(v % BUCKETS for v, _ in kept)
            prev = self.last_file.get(key)
            self.last_file[key] = index
            event[key] = (self.event_counts[key], sum(recent), len(buckets), prev)
            timers.add((key, timer_of(max(t for _, t in kept))))
        self.registered_timers |= timers

        self.counts.update({key: len(key_rows) for key, key_rows in by_key.items()})
        processing = {key: self.counts[key] for key in by_key}

        per_window = collections.Counter()
        for key, _, event_ms in rows:
            per_window[key, event_ms // MINUTE_MS * MINUTE_MS] += 1
        backend = []
        for (key, start), n in sorted(per_window.items()):
            self.windows[key, start] += n
            backend.append((key, index, self.counts[key], start, self.windows[key, start]))
        return Expected(event, processing, backend, timers)
