"""The processor shapes of issue 45: what users write with ``transformWithState``, each shape's
logic written twice, once on Spark's state variables (``*State`` classes, run by kstate's
``transform_with_state`` and by Spark's own operator) and once on plain dicts a Python worker
keeps (``*Dicts`` classes, the floors of benches/processor_matrix.py and the reference that
every state result is checked against).

1. per key: read once, write once (benches/spark_processor.py's processor): value get + update,
   list get + put of the last three amounts, map getValue + updateValue per category seen;
2. per input row: map ``containsKey`` + ``getValue`` + ``updateValue`` (a count per category),
   per key a value and a list read and written back and the map walked with ``iterator()`` for
   its largest entry (the processor issue 45 measured: +53% Row, +333% pandas over the floor);
3. per key: a map of 5-50 categories walked with ``keys()``, ``values()`` and ``iterator()``
   after one ``getValue`` + ``updateValue`` per category seen, a list of up to 50 amounts read
   with ``get()`` and extended (``appendList``, or ``put`` of its last 50);
4. per input row ``ListState.appendValue``; per key, when a window closes (a ``c0`` row came),
   the list read, emitted and cleared;
5. event-time timers: per key the old timer deleted (``listTimers`` + ``deleteTimer``) and one
   registered past its newest row, a value updated; ``handleExpiredTimer`` reads the value,
   emits it and clears it;
6. shape 1 with a TTL on every variable (a day: nothing expires in the run, every write is
   indexed);
7a. shape 2 over many keys with one row each (100,000 keys per batch);
7b. shape 2 over few keys with many rows each (50 keys x 4,000 rows per batch).

Shapes 2, 7a and 7b also have their logic with a user's whole state in one value variable
(``PerRowRecordState``: a struct of the count, the total, an array and a map), which
benches/processor_matrix.py runs as ``kstate_row_record``.

Input rows are ``(user, category, amount, ms, ts)``: ``ms`` the event time in epoch ms (what
shape 5's timers use), ``ts`` the same as a timestamp (its watermark's column). A shape's logic
takes one key's rows as ``(category, amount, ms)`` tuples and returns its output tuples.
"""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass, replace

DAY_MS = 86_400_000
EPOCH_MS = 1_700_000_000_000
BATCH_SPAN_MS = 60_000
"""Batch ``b``'s rows have event times in ``[EPOCH_MS + b * span, EPOCH_MS + (b + 1) * span)``."""
WATERMARK_DELAY_MS = 1_000
TIMER_GAP_MS = 5_000
"""Shape 5's timer of a key: its newest row's event time plus this."""
INPUT = "user string, category string, amount long, ms long, ts timestamp"


@dataclass(frozen=True)
class Shape:
    name: str
    title: str
    files: int
    rows: int
    keys: int
    categories: int
    users: str
    """How a batch's rows pick users: ``random`` (uniform over ``keys``), ``half`` (uniform over a
    random half of the keys, new each batch), ``each_once`` (every key once, shuffled),
    ``even`` (every key ``rows / keys`` times, shuffled)."""
    output: str
    state: type
    dicts: type
    event_time: bool = False
    spark: bool = False
    """Whether Spark's own operator runs this shape too (issue 45: shapes 1, 2 and 5)."""
    record_state: type | None = None
    """The shape's logic with a user's whole state in one value variable, where it has one."""

    def in_one_value(self) -> Shape:
        """This shape with its logic on ``record_state``: a user's state in one value variable."""
        return replace(self, state=self.record_state)

    @property
    def output_names(self) -> list[str]:
        return [part.split()[0] for part in self.output.split(", ")]


def input_files(shape: Shape) -> list[dict[str, list]]:
    """Each micro-batch's columns (seed 7)."""
    rnd = random.Random(7)
    files = []
    for batch in range(shape.files):
        n = shape.rows
        if shape.users == "random":
            users = [rnd.randrange(shape.keys) for _ in range(n)]
        elif shape.users == "half":
            active = rnd.sample(range(shape.keys), shape.keys // 2)
            users = [rnd.choice(active) for _ in range(n)]
        else:  # each_once / even: every key rows / keys times
            users = [u for u in range(shape.keys) for _ in range(n // shape.keys)]
            rnd.shuffle(users)
        start = EPOCH_MS + batch * BATCH_SPAN_MS
        ms = [start + rnd.randrange(BATCH_SPAN_MS) for _ in users]
        files.append(
            {
                "user": [f"u{u}" for u in users],
                "category": [f"c{rnd.randrange(shape.categories)}" for _ in users],
                "amount": [rnd.randrange(1000) for _ in users],
                "ms": ms,
            }
        )
    return files


def top(pairs) -> tuple[str, int]:
    """The entry with the largest count (ties: the largest category), of ``(category, n)``."""
    return max(pairs, key=lambda cn: (cn[1], cn[0]))


# -- shape 1 (and 6): per key, read once, write once -------------------------------------------


class ReadOnceState:
    """Shape 1: value ``totals`` (count, total), list ``recent`` (the last three amounts), map
    ``categories`` (a count per category), each read once and written once per key."""

    ttl_ms: int | None = None

    def init(self, handle) -> None:
        ttl = self.ttl_ms
        self.totals = handle.getValueState("totals", "count long, total long", ttl)
        self.recent = handle.getListState("recent", "amount long", ttl)
        self.categories = handle.getMapState("categories", "category string", "n long", ttl)

    def on_input(self, user, rows) -> list[tuple]:
        seen = sorted({c for c, _, _ in rows})
        stored = self.totals.get()
        recent = [a for (a,) in self.recent.get()]
        counts = [self.categories.getValue((c,)) for c in seen]
        count, total = stored if stored is not None else (0, 0)
        count, total = count + len(rows), total + sum(a for _, a, _ in rows)
        recent = (recent + [a for _, a, _ in rows])[-3:]
        added = collections.Counter(c for c, _, _ in rows)
        counts = [(0 if n is None else n[0]) + added[c] for c, n in zip(seen, counts)]
        self.totals.update((count, total))
        self.recent.put([(a,) for a in recent])
        for c, n in zip(seen, counts):
            self.categories.updateValue((c,), (n,))
        cats = ",".join(f"{c}:{n}" for c, n in zip(seen, counts))
        return [(user, count, total, ",".join(map(str, recent)), cats)]


class ReadOnceTtlState(ReadOnceState):
    """Shape 6: shape 1 with a TTL of a day on every variable."""

    ttl_ms = DAY_MS


class ReadOnceDicts:
    def __init__(self) -> None:
        self.totals: dict = {}
        self.recent: dict = {}
        self.categories: dict = collections.defaultdict(collections.Counter)

    def on_input(self, user, rows) -> list[tuple]:
        seen = sorted({c for c, _, _ in rows})
        count, total = self.totals.get(user, (0, 0))
        count, total = count + len(rows), total + sum(a for _, a, _ in rows)
        self.totals[user] = (count, total)
        recent = self.recent[user] = (self.recent.get(user, []) + [a for _, a, _ in rows])[-3:]
        counts = self.categories[user]
        counts.update(c for c, _, _ in rows)
        cats = ",".join(f"{c}:{counts[c]}" for c in seen)
        return [(user, count, total, ",".join(map(str, recent)), cats)]


READ_ONCE_OUTPUT = "user string, count long, total long, recent string, categories string"


# -- shape 2 (and 7): per input row, map containsKey + getValue + updateValue ------------------


class PerRowState:
    """Shape 2: per row, the row's category counted in map ``categories`` (``containsKey``,
    ``getValue``, ``updateValue``); per key, value ``totals`` and list ``recent`` read and written
    back, the map walked with ``iterator()`` for its largest count."""

    def init(self, handle) -> None:
        self.totals = handle.getValueState("totals", "count long, total long")
        self.recent = handle.getListState("recent", "amount long")
        self.categories = handle.getMapState("categories", "category string", "n long")

    def on_input(self, user, rows) -> list[tuple]:
        categories = self.categories
        for category, _, _ in rows:
            if categories.containsKey((category,)):
                n = categories.getValue((category,))[0] + 1
            else:
                n = 1
            categories.updateValue((category,), (n,))
        stored = self.totals.get()
        count, total = stored if stored is not None else (0, 0)
        count, total = count + len(rows), total + sum(a for _, a, _ in rows)
        self.totals.update((count, total))
        recent = ([a for (a,) in self.recent.get()] + [a for _, a, _ in rows])[-3:]
        self.recent.put([(a,) for a in recent])
        category, n = top((c, v[0]) for (c,), v in categories.iterator())
        return [(user, count, total, ",".join(map(str, recent)), category, n)]


class PerRowDicts:
    def __init__(self) -> None:
        self.totals: dict = {}
        self.recent: dict = {}
        self.categories: dict = {}

    def on_input(self, user, rows) -> list[tuple]:
        categories = self.categories.setdefault(user, {})
        for category, _, _ in rows:
            if category in categories:
                n = categories[category] + 1
            else:
                n = 1
            categories[category] = n
        count, total = self.totals.get(user, (0, 0))
        count, total = count + len(rows), total + sum(a for _, a, _ in rows)
        self.totals[user] = (count, total)
        recent = self.recent[user] = (self.recent.get(user, []) + [a for _, a, _ in rows])[-3:]
        category, n = top(categories.items())
        return [(user, count, total, ",".join(map(str, recent)), category, n)]


class PerRowRecordState:
    """Shape 2's logic with a user's whole state in one value variable: a struct of the count,
    the total, the last three amounts (an array) and the counts per category (a map), read once
    and written once per key (benches/processor_matrix.py's ``kstate_row_record``)."""

    def init(self, handle) -> None:
        self.state = handle.getValueState(
            "state", "count long, total long, recent array<long>, categories map<string, long>"
        )

    def on_input(self, user, rows) -> list[tuple]:
        stored = self.state.get()
        count, total, recent, categories = stored if stored is not None else (0, 0, [], {})
        categories = dict(categories)
        for category, _, _ in rows:
            categories[category] = categories.get(category, 0) + 1
        count, total = count + len(rows), total + sum(a for _, a, _ in rows)
        recent = (list(recent) + [a for _, a, _ in rows])[-3:]
        self.state.update((count, total, recent, categories))
        category, n = top(categories.items())
        return [(user, count, total, ",".join(map(str, recent)), category, n)]


PER_ROW_OUTPUT = "user string, count long, total long, recent string, top string, top_n long"


# -- shape 3: per key, walk a map and a list of 5-50 entries -----------------------------------

HISTORY = 50


class WalkState:
    """Shape 3: map ``spend`` (per category: count, total) updated once per category seen, then
    walked with ``keys()``, ``values()`` and ``iterator()``; list ``amounts`` (the last 50) read
    with ``get()``, then extended with ``appendList`` or replaced by its last 50 with ``put``."""

    def init(self, handle) -> None:
        self.spend = handle.getMapState("spend", "category string", "n long, total long")
        self.amounts = handle.getListState("amounts", "amount long")

    def on_input(self, user, rows) -> list[tuple]:
        spend, amounts = self.spend, self.amounts
        added = collections.defaultdict(lambda: [0, 0])
        for category, amount, _ in rows:
            added[category][0] += 1
            added[category][1] += amount
        for category, (n, total) in added.items():
            stored = spend.getValue((category,))
            if stored is not None:
                n, total = n + stored[0], total + stored[1]
            spend.updateValue((category,), (n, total))
        entries = sum(1 for _ in spend.keys())
        largest = max(total for _, total in spend.values())
        category, n = top((c, v[0]) for (c,), v in spend.iterator())
        history = [a for (a,) in amounts.get()]
        new = [a for _, a, _ in rows]
        if len(history) + len(new) <= HISTORY:
            amounts.appendList([(a,) for a in new])
        else:
            amounts.put([(a,) for a in (history + new)[-HISTORY:]])
        mean = sum(history) // len(history) if history else -1
        return [(user, entries, largest, category, n, len(history), mean)]


class WalkDicts:
    def __init__(self) -> None:
        self.spend: dict = {}
        self.amounts: dict = {}

    def on_input(self, user, rows) -> list[tuple]:
        spend = self.spend.setdefault(user, {})
        added = collections.defaultdict(lambda: [0, 0])
        for category, amount, _ in rows:
            added[category][0] += 1
            added[category][1] += amount
        for category, (n, total) in added.items():
            stored = spend.get(category)
            if stored is not None:
                n, total = n + stored[0], total + stored[1]
            spend[category] = (n, total)
        entries = sum(1 for _ in spend.keys())
        largest = max(total for _, total in spend.values())
        category, n = top((c, v[0]) for c, v in spend.items())
        history = self.amounts.get(user, [])
        self.amounts[user] = (history + [a for _, a, _ in rows])[-HISTORY:]
        mean = sum(history) // len(history) if history else -1
        return [(user, entries, largest, category, n, len(history), mean)]


WALK_OUTPUT = "user string, entries long, largest long, top string, top_n long, history long, mean long"


# -- shape 4: per input row appendValue, per key clear when a window closes --------------------

CLOSING = "c0"


class WindowState:
    """Shape 4: every row's amount appended to list ``events``; a key whose rows include a
    ``c0`` row closes its window: the list read, its count and sum emitted, the list cleared."""

    def init(self, handle) -> None:
        self.events = handle.getListState("events", "amount long")

    def on_input(self, user, rows) -> list[tuple]:
        events = self.events
        closed = False
        for category, amount, _ in rows:
            events.appendValue((amount,))
            if category == CLOSING:
                closed = True
        if not closed:
            return []
        window = [a for (a,) in events.get()]
        events.clear()
        return [(user, len(window), sum(window))]


class WindowDicts:
    def __init__(self) -> None:
        self.events: dict = {}

    def on_input(self, user, rows) -> list[tuple]:
        events = self.events.setdefault(user, [])
        closed = False
        for category, amount, _ in rows:
            events.append(amount)
            if category == CLOSING:
                closed = True
        if not closed:
            return []
        del self.events[user]
        return [(user, len(events), sum(events))]


WINDOW_OUTPUT = "user string, events long, total long"


# -- shape 5: event-time timers ----------------------------------------------------------------


class TimerState:
    """Shape 5: per key, value ``totals`` updated, the key's old timer deleted (``listTimers``)
    and a new one registered ``TIMER_GAP_MS`` after its newest row; an expired timer's handler
    reads ``totals``, emits it and clears it."""

    def init(self, handle) -> None:
        self.handle = handle
        self.totals = handle.getValueState("totals", "count long, total long")

    def on_input(self, user, rows) -> list[tuple]:
        handle = self.handle
        for expiry in list(handle.listTimers()):
            handle.deleteTimer(expiry)
        handle.registerTimer(max(ms for _, _, ms in rows) + TIMER_GAP_MS)
        stored = self.totals.get()
        count, total = stored if stored is not None else (0, 0)
        count, total = count + len(rows), total + sum(a for _, a, _ in rows)
        self.totals.update((count, total))
        return [(user, "input", count, total)]

    def on_timer(self, user, expiry) -> list[tuple]:
        stored = self.totals.get()
        self.totals.clear()
        count, total = stored if stored is not None else (0, 0)
        return [(user, "expired", count, total)]


class TimerDicts:
    def __init__(self) -> None:
        self.totals: dict = {}
        self.timers: dict = {}

    def on_input(self, user, rows) -> list[tuple]:
        self.timers.pop(user, None)
        self.timers[user] = max(ms for _, _, ms in rows) + TIMER_GAP_MS
        count, total = self.totals.get(user, (0, 0))
        count, total = count + len(rows), total + sum(a for _, a, _ in rows)
        self.totals[user] = (count, total)
        return [(user, "input", count, total)]

    def fire(self, watermark: int) -> list[tuple]:
        """Every timer due at ``watermark``, earliest first, through ``on_timer``."""
        due = sorted((expiry, user) for user, expiry in self.timers.items() if expiry <= watermark)
        out = []
        for expiry, user in due:
            del self.timers[user]
            out += self.on_timer(user, expiry)
        return out

    def on_timer(self, user, expiry) -> list[tuple]:
        count, total = self.totals.pop(user, (0, 0))
        return [(user, "expired", count, total)]


TIMER_OUTPUT = "user string, kind string, count long, total long"


SHAPES = {
    s.name: s
    for s in (
        Shape("1", "per key: read once, write once", 4, 40_000, 8_000, 5, "random", READ_ONCE_OUTPUT,
              ReadOnceState, ReadOnceDicts, spark=True),
        Shape("2", "per row: map containsKey + getValue + updateValue; per key value, list, map walk", 4, 40_000,
              8_000, 5, "random", PER_ROW_OUTPUT, PerRowState, PerRowDicts, spark=True,
              record_state=PerRowRecordState),
        Shape("3", "per key: walk a map and a list of 5-50 entries", 4, 40_000, 4_000, 50, "random", WALK_OUTPUT,
              WalkState, WalkDicts),
        Shape("4", "per row: list appendValue; per key: clear when a window closes", 4, 40_000, 8_000, 5, "random",
              WINDOW_OUTPUT, WindowState, WindowDicts),
        Shape("5", "event-time timers: one per key per batch, the old one deleted; the handler reads and clears",
              4, 40_000, 8_000, 5, "half", TIMER_OUTPUT, TimerState, TimerDicts, event_time=True, spark=True),
        Shape("6", "shape 1 with a TTL on every variable", 4, 40_000, 8_000, 5, "random", READ_ONCE_OUTPUT,
              ReadOnceTtlState, ReadOnceDicts),
        Shape("7a", "shape 2, many keys with one row each (100k keys per batch)", 4, 100_000, 100_000, 5,
              "each_once", PER_ROW_OUTPUT, PerRowState, PerRowDicts, record_state=PerRowRecordState),
        Shape("7b", "shape 2, few keys with many rows (50 keys x 4k rows)", 4, 200_000, 50, 5, "even",
              PER_ROW_OUTPUT, PerRowState, PerRowDicts, record_state=PerRowRecordState),
    )
}  # fmt: skip


def watermarks(files: list[dict[str, list]]) -> list[int]:
    """Each batch's event-time watermark, as Spark computes it: the largest event time of the
    earlier batches less the delay (none before any: nothing is due)."""
    out, largest = [], None
    for columns in files:
        out.append(-1 if largest is None else largest - WATERMARK_DELAY_MS)
        batch_max = max(columns["ms"])
        largest = batch_max if largest is None else max(largest, batch_max)
    return out


def reference(shape: Shape, files: list[dict[str, list]]) -> list[tuple]:
    """Every batch's output rows, ``(batch, *row)`` sorted, from the shape's dict logic run in
    one process: the keys with input, then (shape 5) the timers due at the batch's watermark."""
    logic = shape.dicts()
    out = []
    for batch, (columns, watermark) in enumerate(zip(files, watermarks(files))):
        per_user = collections.defaultdict(list)
        for user, category, amount, ms in zip(columns["user"], columns["category"], columns["amount"], columns["ms"]):
            per_user[user].append((category, amount, ms))
        for user, rows in per_user.items():
            out += [(batch, *row) for row in logic.on_input(user, rows)]
        if shape.event_time:
            out += [(batch, *row) for row in logic.fire(watermark)]
    return sorted(out)
