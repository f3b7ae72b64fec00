"""A recording played back into a ``Monitor`` at a cursor, by the same ``apply_*`` calls at the
same clock readings as when it was recorded: the dashboard drawn from it is the one drawn live.

Moving forward applies the rows up to the cursor; moving back restarts from the nearest
checkpoint (a copy of the monitor taken every minute of recorded time), or from 6 minutes
before the cursor (the 5-minute chart window and the badge's), so any instant of a long
recording is a bounded amount of work away.
"""

from __future__ import annotations

import bisect
import copy
import math
import sqlite3
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwatch.bounds import DEFAULT_MAX_ENGINES
from gpuwatch.model import ScrapeResult
from gpuwatch.monitor.state import Event, EventLevel, Monitor
from gpuwatch.record import codec, store
from gpuwatch.record.recorder import SAME_LIMITS
from gpuwatch.sources.scrape import ParseCache, map_page

CHECKPOINT_EVERY_S = 60.0
# Each is a copy of the monitor (an hour of history): beyond this many, the farthest from the
# cursor goes (a jump far back starts cold, LEAD_S early, instead).
MAX_CHECKPOINTS = 90
# A cold start this far before the cursor makes the 1m and 5m chart windows, every number and
# the badge what they were live. Not the longer windows: replaying costs what the live program
# spent on the same pages (parse, dialects, windowed quantiles: ~5 ms a scrape of the
# simulator's page), and an hour of two engines would be half a minute to wait for a jump.
LEAD_S = 6 * 60.0
_BATCH = 2000


class ReplayMonitor(Monitor):
    """A monitor fed from a recording. The events it shows are the recorded ones (those the
    readings raise again are dropped: they were recorded when they first happened, with the
    ones only the live program could raise: key presses, the gate's answers to them)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_limits: dict[str, Any] | None = None

    def event(self, level: EventLevel, text: str) -> None:
        return

    def recorded_event(self, event: Event) -> None:
        self.events.append(event)
        self.version += 1


@dataclass(frozen=True)
class Mark:
    """An event of the recording, for jumping to it."""

    wall: float
    level: EventLevel
    text: str
    row_id: int


class Player:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = store.open_recording(path)
        # Compact arrays: a week's recording is millions of rows.
        self.ids, self.monos, self.walls = array("q"), array("d"), array("d")
        try:
            self.meta = _checked_meta(store.read_meta(self.db), path)
            for row_id, mono, wall in self.db.execute(
                f"SELECT id, mono, wall FROM rows WHERE {store.CLOCKS_OK} ORDER BY id"
            ):
                self.ids.append(row_id)
                self.monos.append(mono)
                self.walls.append(wall)
            if not self.ids:
                raise store.RecordingError(f"{path}: an empty recording (no rows)")
        except (store.RecordingError, TypeError, sqlite3.Error) as exc:
            self.db.close()
            if isinstance(exc, store.RecordingError):
                raise
            raise store.RecordingError(f"{path}: damaged recording ({exc})") from exc
        # Rows at impossible clocks are never played (a wall clock of 1e308 names no date):
        # counted with the rows that fail to decode.
        query = f"SELECT COUNT(*) FROM rows WHERE NOT ({store.CLOCKS_OK})"
        self.bad_rows = int(self.db.execute(query).fetchone()[0])
        self.dictionaries = store.dictionaries(self.db)
        self.caches: dict[str, ParseCache] = {}
        max_engines = self.meta.get("max_engines")
        self.max_engines = max_engines if isinstance(max_engines, int) else DEFAULT_MAX_ENGINES
        self.marks = self._marks()
        self._mono = self.monos[0]
        self._offset = self.walls[0] - self.monos[0]
        self.checkpoints: dict[int, tuple[ReplayMonitor, float, float]] = {}
        self.monitor = self._fresh()
        self.pos = 0  # the next row to apply
        self.seek_mono(self.monos[0])

    # -- time -----------------------------------------------------------------------------

    @property
    def start(self) -> float:
        return self.walls[0]

    @property
    def end(self) -> float:
        return self.walls[-1]

    @property
    def now(self) -> float:
        """The cursor, wall clock."""
        return self._mono + self._offset

    def _fresh(self) -> ReplayMonitor:
        meta = self.meta
        clock_at = float(meta.get("started") or self.monos[0])
        self._mono = clock_at
        m = ReplayMonitor(
            list(meta.get("urls") or []),
            float(meta.get("interval_s") or 1.0),
            meta.get("slo") or {},
            meta.get("admin_url"),
            float(meta.get("window_s") or 60.0),
            # Closures, not bound methods: a checkpoint's deep copy must not copy the player.
            clock=lambda: self._mono,
            wall=lambda: self._mono + self._offset,
        )
        return m

    def _marks(self) -> list[Mark]:
        out = []
        query = f"SELECT id, mono, wall, kind, source, {store.DATA} FROM rows WHERE kind = 'event'"
        for row in self._rows(query + " ORDER BY id"):
            try:
                e = codec.decode_payload("event", self._unpack(row))
            except codec.CodecError:
                continue
            out.append(Mark(e.time, e.level, e.text, row.id))
        return out

    def _rows(self, query: str, *args: Any) -> Iterator[store.Row]:
        for r in self.db.execute(query, args):
            yield store.Row(*r)

    # -- moving ---------------------------------------------------------------------------

    def seek(self, wall: float) -> None:
        """Move the cursor to wall-clock ``wall`` (clamped to the recording)."""
        wall = min(max(wall, self.start), self.end)
        i = max(0, bisect.bisect_right(self.walls, wall) - 1)
        # Between two rows the clocks run together, as they did live.
        self.seek_mono(self.monos[i] + (wall - self.walls[i]))

    def seek_mono(self, mono: float) -> None:
        target = bisect.bisect_right(self.monos, mono)  # rows [0, target) are applied
        if target < self.pos:
            self._restart(target, mono)
        self._apply_until(target)
        self._mono = mono
        if self.pos:
            self._offset = self.walls[self.pos - 1] - self.monos[self.pos - 1]

    def _restart(self, target: int, mono: float) -> None:
        usable = [p for p in self.checkpoints if p <= target]
        if usable:
            p = max(usable)
            saved, self._mono, self._offset = self.checkpoints[p]
            self.monitor, self.pos = copy.deepcopy(saved), p
            return
        self.monitor = self._fresh()
        self.pos = bisect.bisect_left(self.monos, mono - LEAD_S)
        if self.pos:  # gate rows say "the same limits" until they change: say which
            zdict = self.dictionaries.get(codec.dictionary_key("gate", None), b"")
            limits = limits_before(self.db, self.ids[self.pos], zdict)
            self.monitor.last_limits = limits if isinstance(limits, dict) else None
            # The events list reaches back further than the lead: as live, the last ones.
            first, keep = self.ids[self.pos], self.monitor.events.maxlen or 0
            for mk in [mk for mk in self.marks if mk.row_id < first][-keep:]:
                self.monitor.recorded_event(Event(mk.wall, mk.level, mk.text))

    def _apply_until(self, target: int) -> None:
        # A checkpoint at ``pos`` p was taken after row p - 1 (p can be the row count).
        last_cp = max(self.checkpoints, default=0)
        cp_mono = self.monos[last_cp - 1] if last_cp > 0 else -1e300
        while self.pos < target:
            hi = min(target, self.pos + _BATCH)
            rows = self._rows(
                f"SELECT id, mono, wall, kind, source, {store.DATA} FROM rows "
                f"WHERE id >= ? AND id <= ? AND {store.CLOCKS_OK} ORDER BY id",
                self.ids[self.pos],
                self.ids[hi - 1],
            )
            for row in rows:
                self._apply(row)
                self.pos += 1
                if row.mono - cp_mono >= CHECKPOINT_EVERY_S and self.pos not in self.checkpoints:
                    cp_mono = row.mono
                    self._checkpoint()

    def _unpack(self, row: store.Row) -> Any:
        zdict = self.dictionaries.get(codec.dictionary_key(row.kind, row.source), b"")
        return codec.unpack(row.data, zdict)

    def _mapped(self, page: codec.Page) -> ScrapeResult:
        """The recorded page through the same prefilter, parse and dialects as live (with
        the source's own parse cache, as its poller had)."""
        cache = self.caches.setdefault(page.source, ParseCache())
        result = map_page(page.source, page.text, self.max_engines, cache)
        # Warnings about the full page (models past the cap) came from the live page.
        for warning in page.warnings:
            if warning not in result.warnings:
                result.warnings.append(warning)
        return result

    def _checkpoint(self) -> None:
        self.checkpoints[self.pos] = (copy.deepcopy(self.monitor), self._mono, self._offset)
        if len(self.checkpoints) > MAX_CHECKPOINTS:
            del self.checkpoints[max(self.checkpoints, key=lambda p: abs(p - self.pos))]

    def _apply(self, row: store.Row) -> None:
        self._mono, self._offset = row.mono, row.wall - row.mono
        try:
            payload = codec.decode_payload(row.kind, self._unpack(row))
            self._feed(row.kind, payload)
        except (codec.CodecError, KeyError, TypeError, ValueError, AttributeError):
            # A row of the right kind with the wrong insides (a file edited, or damaged):
            # skipped and counted, the rest still plays.
            self.bad_rows += 1

    def _feed(self, kind: str, payload: Any) -> None:
        m = self.monitor
        if kind == "scrape":
            if isinstance(payload, codec.Page):
                payload = self._mapped(payload)
            if payload.source in m.endpoints:
                m.apply_scrape(payload)
        elif kind == "gpus":
            m.apply_gpus(payload)
        elif kind == "host":
            m.apply_host(payload)
        elif kind == "gate":
            limits, status, error, current = payload
            if limits == SAME_LIMITS:
                limits = m.last_limits
            elif limits is not None:
                m.last_limits = limits
            m.apply_gate(limits, status, error, current=current)
        elif kind == "event":
            m.recorded_event(payload)
        elif kind == "stale":
            m.check_stale()
        elif kind == "evaluate":
            m.evaluate()
        elif kind == "slo":
            m.set_slo_budget(payload)

    def tick_in(self, wall: float) -> float | None:
        """The last recorded tick (the badge's evaluation, after which the live screen was
        drawn, its header's clock naming that second) in the second starting at ``wall``, as
        the monitor's clock; None if none was recorded then."""
        second = math.floor(wall)
        found = self.db.execute(
            "SELECT mono FROM rows WHERE kind = 'evaluate' AND wall >= ? AND wall < ? "
            "ORDER BY id DESC LIMIT 1",
            (second, second + 1),
        ).fetchone()
        return float(found[0]) if found else None

    # -- jumps ----------------------------------------------------------------------------

    def next_mark(self, after: float) -> Mark | None:
        return next((mk for mk in self.marks if mk.wall > after + 1e-6), None)

    def previous_mark(self, before: float) -> Mark | None:
        return next((mk for mk in reversed(self.marks) if mk.wall < before - 1e-6), None)

    def close(self) -> None:
        self.db.close()


def limits_before(db: sqlite3.Connection, row_id: int, zdict: bytes) -> object:
    """The gate's limits in force before row ``row_id``: rows carry them only when they
    change. None when no earlier row has them."""
    rows = db.execute(
        f"SELECT {store.DATA} FROM rows WHERE kind = 'gate' AND id < ? ORDER BY id DESC",
        (row_id,),
    )
    for (data,) in rows:
        try:
            limits = codec.unpack(data, zdict).get("limits")
        except (codec.CodecError, AttributeError):
            continue
        if isinstance(limits, dict):
            return limits
    return None


def _checked_meta(meta: dict[str, Any], path: Path) -> dict[str, Any]:
    """The recording's description, checked: what builds the monitor must have its types."""

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    urls, slo = meta.get("urls"), meta.get("slo")
    problems = [
        key
        for key, ok in (
            ("urls", isinstance(urls, list) and all(isinstance(u, str) for u in urls)),
            ("interval_s", number(meta.get("interval_s")) and meta["interval_s"] > 0),
            ("window_s", number(meta.get("window_s")) and meta["window_s"] > 0),
            ("slo", isinstance(slo, dict) and all(v is None or number(v) for v in slo.values())),
            ("admin_url", meta.get("admin_url") is None or isinstance(meta["admin_url"], str)),
            ("started", meta.get("started") is None or number(meta["started"])),
        )
        if not ok
    ]
    if problems:
        raise store.RecordingError(f"{path}: damaged recording (meta: {', '.join(problems)})")
    return meta


def parse_when(text: str, start: float, end: float) -> float:
    """A time given by a person, as wall clock: ``03:12``, ``03:12:40`` (the first such time
    of day at or after the recording's start, local time), ``2026-11-30 03:12[:40]``, or
    ``+90s`` / ``+5m`` / ``+1h`` from the start. ValueError with the reason."""
    text = text.strip()
    if text.startswith("+"):
        units = {"s": 1, "m": 60, "h": 3600}
        unit = units.get(text[-1], 1)
        number = text[1:-1] if text[-1] in units else text[1:]
        try:
            return start + float(number) * unit
        except ValueError:
            raise ValueError(f"{text!r}: expected +N[s|m|h]") from None
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"):
        try:
            return time.mktime(time.strptime(text, fmt))
        except ValueError:
            continue
    for fmt in ("%H:%M:%S", "%H:%M"):
        try:
            parsed = time.strptime(text, fmt)
        except ValueError:
            continue
        day = time.localtime(start)
        for shift in range(0, 9):  # the first day of the recording it falls in
            moment = time.mktime(
                (
                    day.tm_year,
                    day.tm_mon,
                    day.tm_mday + shift,
                    parsed.tm_hour,
                    parsed.tm_min,
                    parsed.tm_sec,
                    0,
                    0,
                    -1,
                )
            )
            if moment >= start - 1 or moment > end:
                return moment
        break
    raise ValueError(f"{text!r}: expected HH:MM[:SS], YYYY-MM-DD HH:MM[:SS] or +N[s|m|h]")
