"""The fleet table as plain state: rows from Prometheus, each judged by the same SLO rules as
the node's badge (with the same hysteresis), sorted (the sickest first), filtered, grouped.

No UI here: the fleet screen, ``snapshot --prometheus`` and ``watch --prometheus`` read it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpuwatch.fmt import num, pct, seconds
from gpuwatch.monitor.health import (
    DEFAULT_SLO,
    LEVELS,
    HealthTracker,
    Verdict,
    badge_text,
    badness,
)
from gpuwatch.monitor.health import SIGNALS as HEALTH_SIGNALS
from gpuwatch.monitor.state import Event, EventLevel
from gpuwatch.sources.prometheus import FleetReading
from gpuwatch.sources.promql import WINDOW, WINDOW_S, FleetRow

# Fleet column -> the [slo] key it is judged against (the node badge's own signals).
JUDGED = {
    "ttft_p99": "ttft_p99_s",
    "itl_p99": "itl_p99_s",
    "kv": "kv_usage_high",
    "waiting": "waiting_high",
    "preempt_per_min": "preemptions_per_min",
}


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    fmt: Callable[[float | None], str]


def _rate(v: float | None) -> str:
    return num(v, 1)


# Headers of windowed columns carry their window (PromQL's [1m]).
COLUMNS: tuple[Column, ...] = (
    Column("running", "run", num),
    Column("waiting", "wait", num),
    Column("kv", "KV", pct),
    Column("ttft_p99", f"TTFT p99 {WINDOW}", seconds),
    Column("itl_p99", f"ITL p99 {WINDOW}", seconds),
    Column("gen_tps", f"gen tok/s {WINDOW}", _rate),
    Column("preempt_per_min", f"preempt/m {WINDOW}", _rate),
    # The node's gate, lanes summed.
    Column("gate_inflight", "gate in", num),
    Column("gate_queued", "gate q", num),
    Column("gate_refused_ps", f"refused/s {WINDOW}", _rate),
)
SORT_KEYS = ("health", "instance", "model", *(c.key for c in COLUMNS))


def stalled(row: FleetRow) -> bool | None:
    """Requests running all through the window and no progress in it: no forward pass
    (where the stack counts them: llama.cpp), else no token generated. None: not known."""
    running = row.values.get("running_min")
    progress = row.values.get("steps_ps")
    if progress is None:
        progress = row.values.get("gen_tps")
    if running is None or progress is None:
        return None
    return running > 0 and progress == 0


def signals_of(row: FleetRow) -> dict[str, float | None]:
    out = {slo: row.values.get(col) for col, slo in JUDGED.items()}
    # A stalled row has made no progress for at least the window (Prometheus' range says no
    # more): judged as the node's badge judges a stall, against the same stall_after_s.
    still = stalled(row)
    out["stall_after_s"] = None if still is None else (WINDOW_S if still else 0.0)
    return out


def stall_details(row: FleetRow) -> dict[str, str]:
    if not stalled(row):
        return {}
    running = num(row.values.get("running_min"))
    return {"stall_after_s": f"at least {running} running all through the last {WINDOW}"}


def severity(row: FleetRow, slo: Mapping[str, float | None]) -> float:
    """The worst signal's badness (1.0 at its threshold): orders the sickest first."""
    worst = -1.0
    for key, value in signals_of(row).items():
        threshold = slo.get(key)
        if value is not None and threshold:
            worst = max(worst, badness(HEALTH_SIGNALS[key], value, threshold))
    return worst


class FleetState:
    """The latest reading, per-row badges with hysteresis, and the fleet's events."""

    def __init__(
        self,
        slo: Mapping[str, float | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slo = dict(slo or DEFAULT_SLO)
        self.clock = clock
        self.reading: FleetReading | None = None
        self.badges: dict[tuple[str, str, str], HealthTracker] = {}
        self.events: deque[Event] = deque(maxlen=200)
        self._said: set[str] = set()
        self.version = 0

    def event(self, level: EventLevel, text: str) -> None:
        self.events.append(Event(time.time(), level, text))

    def apply(self, reading: FleetReading) -> None:
        """Take a refresh: judge each row; new problems (down targets, alerts) become events."""
        self.version += 1
        previous = self.reading
        if reading.error:
            if previous is None or previous.error != reading.error:
                self.event("bad", reading.error)
            # Keep the last good rows on screen (marked stale by the error line) meanwhile.
            if previous is not None and previous.rows:
                reading.rows = previous.rows
            self.reading = reading
            return
        if previous is not None and previous.error:
            self.event("ok", "Prometheus answers again")
        self.reading = reading
        now = self.clock()
        window = WINDOW
        for row in reading.rows:
            tracker = self.badges.setdefault(row.key, HealthTracker(self.slo))
            tracker.update(now, signals_of(row), window, stall_details(row))
        lines = [t.line() for t in reading.unhealthy] + [a.line() for a in reading.alerts]
        for line in lines:
            if line not in self._said:
                self.event("bad" if "DOWN" in line or "alert" in line else "warn", line)
        for warning in reading.warnings:
            if warning not in self._said:
                self.event("warn", warning)
        self._said = set(lines) | set(reading.warnings)

    def verdict(self, row: FleetRow) -> Verdict:
        tracker = self.badges.get(row.key)
        return tracker.shown if tracker else Verdict("NO DATA", "not judged yet")

    @property
    def rows(self) -> list[FleetRow]:
        return list(self.reading.rows) if self.reading else []

    def view(
        self, sort: str = "health", reverse: bool = False, text: str = "", by_model: bool = False
    ) -> list[FleetRow]:
        """Rows filtered by ``text`` (instance, node, model, dialect), sorted; with
        ``by_model`` the models are kept together (each model's rows in the same order)."""
        needle = text.lower()
        rows = [
            r
            for r in self.rows
            if not needle
            or any(needle in (s or "").lower() for s in (r.instance, r.node, r.model, r.dialect))
        ]
        rows.sort(key=lambda r: self._sort_key(r, sort), reverse=not reverse)
        if by_model:
            rows.sort(key=lambda r: r.model or "")
        return rows

    def _sort_key(self, row: FleetRow, sort: str) -> tuple[float, str]:
        """Bigger is sicker (shown first): an unknown value sorts after every known one."""
        if sort == "health":
            level = LEVELS.index(self.verdict(row).level)
            return (level * 1e6 + severity(row, self.slo), row.instance)
        if sort in ("instance", "model"):
            # Names read A to Z at the top: negate by sorting on the reversed flag's opposite.
            text = row.instance if sort == "instance" else row.model or ""
            return (0.0, "".join(chr(0x10FFFF - ord(c)) for c in text))
        value = row.values.get(sort)
        return (value if value is not None else -1e300, row.instance)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {level: 0 for level in LEVELS}
        for row in self.rows:
            out[self.verdict(row).level] += 1
        return out


def table_lines(state: FleetState, rows: list[FleetRow]) -> list[str]:
    """The fleet as plain text, one line per row (``snapshot --prometheus``)."""
    head = ["health", "instance", "node", "model", "dialect", *(c.header for c in COLUMNS)]
    body = [
        [
            badge_text(state.verdict(r)),
            r.instance,
            r.node,
            r.model or "-",
            r.dialect,
            *(c.fmt(r.values.get(c.key)) if c.key in r.values else "-" for c in COLUMNS),
        ]
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]
    return ["  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
            for line in (head, *body)]  # fmt: skip
