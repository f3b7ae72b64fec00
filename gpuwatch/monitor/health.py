"""The boring zone: SLO rules with hysteresis -> OK / TIGHT / OVERLOADED, with the reason.

Each signal is compared with its threshold: under 80% is OK, from 80% to 100% TIGHT, over
100% OVERLOADED; the worst signal decides. The badge only moves to a new level after that level
has held for ``hold_s`` (10 s), so one slow scrape does not flap it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from gpuwatch.config import Slo
from gpuwatch.fmt import pct, seconds

Level = Literal["OK", "TIGHT", "OVERLOADED"]
LEVELS: tuple[Level, ...] = ("OK", "TIGHT", "OVERLOADED")
TIGHT_AT = 0.8

# key -> (label, formatter); the keys are the [slo] config keys.
SIGNALS = {
    "ttft_p99_s": ("p99 TTFT", seconds),
    "itl_p99_s": ("p99 ITL", seconds),
    "kv_usage_high": ("KV", pct),
    "waiting_high": ("waiting", lambda v: f"{v:.0f}"),
    "preemptions_per_min": ("preemptions", lambda v: f"{v:.1f}/min"),
}


DEFAULT_SLO = Slo().thresholds()


@dataclass(frozen=True)
class Verdict:
    level: Level
    reason: str


def judge(slo: Mapping[str, float | None], signals: Mapping[str, float | None]) -> Verdict:
    """The level the signals point at right now (no hysteresis), and the worst one's reason."""
    worst: tuple[float, str, float, float] | None = None
    for key, threshold in slo.items():
        value = signals.get(key)
        if threshold is None or value is None or threshold <= 0:
            continue
        ratio = value / threshold
        if worst is None or ratio > worst[0]:
            worst = (ratio, key, value, threshold)
    if worst is None:
        return Verdict("OK", "no signals yet")
    ratio, key, value, threshold = worst
    label, fmt = SIGNALS[key]
    if ratio > 1:
        return Verdict("OVERLOADED", f"{label} {fmt(value)} > {fmt(threshold)}")
    if ratio >= TIGHT_AT:
        return Verdict("TIGHT", f"{label} {fmt(value)} ({ratio:.0%} of {fmt(threshold)})")
    return Verdict("OK", f"{label} {fmt(value)} (of {fmt(threshold)})")


class HealthTracker:
    """The badge: the judged level, held for ``hold_s`` before it is shown."""

    def __init__(self, slo: Mapping[str, float | None], hold_s: float = 10.0) -> None:
        self.slo = dict(slo)
        self.hold_s = hold_s
        self.shown = Verdict("OK", "starting")
        self._candidate: Level | None = None
        self._since = 0.0

    def update(self, now: float, signals: Mapping[str, float | None]) -> tuple[Verdict, bool]:
        """Feed the current signals; return the shown verdict and whether its level changed."""
        verdict = judge(self.slo, signals)
        if verdict.level == self.shown.level:
            self._candidate = None
            self.shown = verdict  # same level: the reason may still move
            return self.shown, False
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
