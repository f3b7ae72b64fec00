"""The boring zone: SLO rules with hysteresis -> OK / TIGHT / OVERLOADED, with the reason.

Each signal is compared with its threshold: under 80% is OK, from 80% to 100% TIGHT, over
100% OVERLOADED; the worst signal decides. The badge only moves to a new level after that level
has held for ``hold_s`` (10 s), so one slow scrape does not flap it. A stall is the exception:
it is a fact that already held for its own ``stall_after_s``, not a statistic that may be one
slow scrape, so it is shown at once, and so is its end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from gpuwatch.config import Slo
from gpuwatch.fmt import duration, pct, seconds

Level = Literal["NO DATA", "OK", "TIGHT", "OVERLOADED"]
LEVELS: tuple[Level, ...] = ("NO DATA", "OK", "TIGHT", "OVERLOADED")
TIGHT_AT = 0.8


@dataclass(frozen=True)
class Signal:
    """How one signal is judged and shown. ``ceiling`` signals are bad above their threshold;
    a floor (goodput) is bad below it, judged on the share it is allowed to miss."""

    label: str
    fmt: Callable[[float], str]
    windowed: bool = True  # computed over the history's window (shown with it)
    floor: bool = False
    held: bool = True  # a new level waits out the hold (False: a fact, shown at once)


# The keys are the [slo] config keys.
SIGNALS: dict[str, Signal] = {
    "ttft_p99_s": Signal("p99 TTFT", seconds),
    "itl_p99_s": Signal("p99 ITL", seconds),
    "kv_usage_high": Signal("KV", pct, windowed=False),
    "waiting_high": Signal("waiting", lambda v: f"{v:.0f}", windowed=False),
    "preemptions_per_min": Signal("preemptions", lambda v: f"{v:.1f}/min"),
    # One decimal: 98.6% must not read as "99% < 99%".
    "goodput_min": Signal("goodput", lambda v: f"{v:.1%}", floor=True),
    # How long a busy engine has shown no progress (gpuwatch/stall.py): over its threshold
    # exactly when the engine is STALLED, the detector's rule being the same threshold.
    "stall_after_s": Signal("no progress for", duration, windowed=False, held=False),
}

DEFAULT_SLO = Slo().thresholds()


@dataclass(frozen=True)
class Verdict:
    level: Level
    reason: str
    # The [slo] key of the worst signal (None without one): which rule spoke, not what it said.
    signal: str | None = field(default=None, compare=False)


def badness(signal: Signal, value: float, threshold: float) -> float:
    """1.0 at the threshold, above 1 past it: the one scale every signal is compared on."""
    if not signal.floor:
        return value / threshold
    allowed = 1.0 - threshold  # goodput_min 0.99: 1% may miss
    missed = max(0.0, 1.0 - value)
    return missed / allowed if allowed > 0 else (math.inf if missed > 0 else 0.0)


def judge(
    slo: Mapping[str, float | None],
    signals: Mapping[str, float | None],
    window: str = "",
    details: Mapping[str, str] | None = None,
) -> Verdict:
    """The level the signals point at right now (no hysteresis), and the worst one's reason.

    No signal at all is NO DATA, never OK. ``window`` labels windowed signals (``p99 TTFT 1m``);
    ``details`` adds a signal's breakdown to the reason (``goodput 91% < 99%: 6% refused``).
    """
    # A fact past its threshold (a stall) is the reason before any statistic: what users get
    # (refusals, slow answers) follows from it, and it is what to fix.
    worst: tuple[tuple[bool, float], str, float, float] | None = None
    for key, threshold in slo.items():
        value = signals.get(key)
        if threshold is None or value is None or threshold <= 0:
            continue
        ratio = badness(SIGNALS[key], value, threshold)
        rank = (not SIGNALS[key].held and ratio > 1, ratio)
        if worst is None or rank > worst[0]:
            worst = (rank, key, value, threshold)
    if worst is None:
        return Verdict("NO DATA", "no SLO signal to judge yet")
    (_, ratio), key, value, threshold = worst
    signal = SIGNALS[key]
    label = f"{signal.label} {window}" if signal.windowed and window else signal.label
    shown, limit = signal.fmt(value), signal.fmt(threshold)
    extra = f": {details[key]}" if details and details.get(key) else ""
    if ratio > 1:
        over = "<" if signal.floor else ">"
        return Verdict("OVERLOADED", f"{label} {shown} {over} {limit}{extra}", key)
    if ratio >= TIGHT_AT:
        near = f"near {limit}" if signal.floor else f"{ratio:.0%} of {limit}"
        return Verdict("TIGHT", f"{label} {shown} ({near}){extra}", key)
    return Verdict("OK", f"{label} {shown} (of {limit})", key)


def badge_text(verdict: Verdict) -> str:
    """What a badge reads: the level, or STALLED where a stalled engine is why it is
    OVERLOADED (alive and stuck is not the same trouble as too much work)."""
    if verdict.level == "OVERLOADED" and verdict.signal == "stall_after_s":
        return "STALLED"
    return verdict.level


def at_once(verdict: Verdict, shown: Verdict) -> bool:
    """A new level that is shown without waiting out the hold: a fact (a stall) that starts,
    or the end of one that was shown."""

    def fact(v: Verdict) -> bool:
        return v.level == "OVERLOADED" and v.signal is not None and not SIGNALS[v.signal].held

    return fact(verdict) or fact(shown)


class HealthTracker:
    """The badge: the judged level, held for ``hold_s`` before it is shown.

    NO DATA comes and goes at once: it is a fact about the sources, not a judgement of load.
    """

    def __init__(self, slo: Mapping[str, float | None], hold_s: float = 10.0) -> None:
        self.slo = dict(slo)
        self.hold_s = hold_s
        self.shown = Verdict("NO DATA", "waiting for the first answer")
        self._candidate: Level | None = None
        self._since = 0.0

    def update(
        self,
        now: float,
        signals: Mapping[str, float | None],
        window: str = "",
        details: Mapping[str, str] | None = None,
    ) -> tuple[Verdict, bool]:
        """Feed the current signals; return the shown verdict and whether its level changed."""
        verdict = judge(self.slo, signals, window, details)
        if verdict.level == self.shown.level:
            self._candidate = None
            self.shown = verdict  # same level: the reason may still move
            return self.shown, False
        if "NO DATA" in (verdict.level, self.shown.level) or at_once(verdict, self.shown):
            self.shown, self._candidate = verdict, None
            return self.shown, True
        if verdict.level != self._candidate:
            self._candidate, self._since = verdict.level, now
        if now - self._since >= self.hold_s:
            self.shown, self._candidate = verdict, None
            return self.shown, True
        return self.shown, False

    def pending(self, now: float) -> tuple[Level, float] | None:
        """A level waiting out its hold, and how long is left."""
        if self._candidate is None:
            return None
        return self._candidate, max(0.0, self.hold_s - (now - self._since))
