"""A cursor in time for a screen that shows the past: where it is, playing or paused, how fast.

The replay of a recording (``replay.py``) and the fleet read from Prometheus at a past instant
(``gpuwatch --prometheus URL --at TIME``) move through time with the same keys and speeds; a
time typed after ``:`` is read by the recording's ``parse_when``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuwatch.record.player import parse_when

SPEEDS = (1, 2, 5, 10, 30, 60)
# ``:`` with a time of day means its last occurrence within this span (a day back from now).
LOOKBACK_S = 24 * 3600.0
GOTO_HINT = (
    "go to: HH:MM[:SS] (the last 24 h), YYYY-MM-DD HH:MM[:SS], or +90s / -5m from the cursor"
)


def next_speed(speed: int, direction: int) -> int:
    """The next speed of ``SPEEDS`` up (``direction`` > 0) or down, kept within them."""
    i = SPEEDS.index(speed) if speed in SPEEDS else 0
    return SPEEDS[min(max(i + direction, 0), len(SPEEDS) - 1)]


@dataclass
class TimeCursor:
    """A past instant (wall clock) that never passes now: Prometheus holds no future."""

    at: float
    step_s: float = 1.0
    now: Callable[[], float] = time.time
    playing: bool = False
    speed: int = 10
    earliest: float = field(init=False)

    def __post_init__(self) -> None:
        self.at = min(self.at, self.now())
        # Where the replay bar's track starts: the earliest instant the cursor has been at.
        self.earliest = self.at

    def move(self, wall: float) -> None:
        self.at = min(wall, self.now())
        self.earliest = min(self.earliest, self.at)

    def step(self, direction: int) -> None:
        self.playing = False
        self.move(self.at + direction * self.step_s)

    def jump(self, seconds: float) -> None:
        self.move(self.at + seconds)

    def toggle(self) -> None:
        self.playing = not self.playing

    def faster(self, direction: int) -> None:
        self.speed = next_speed(self.speed, direction)

    def goto(self, text: str) -> None:
        """Move to a time a person typed; ValueError with the reason."""
        text = text.strip()
        if text[:1] in ("+", "-"):
            # parse_when reads +N[s|m|h] from its start: from 0 it is the span itself.
            span = parse_when("+" + text[1:], 0.0, 0.0)
            when = self.at + (span if text[0] == "+" else -span)
        else:
            now = self.now()
            when = parse_when(text, now - LOOKBACK_S, now)
        self.playing = False
        self.move(when)

    def advance(self, elapsed: float) -> bool:
        """Play on by ``elapsed`` real seconds at the speed; stops at now. Whether it moved."""
        if not self.playing:
            return False
        self.move(self.at + elapsed * self.speed)
        if self.at >= self.now():
            self.playing = False
        return True
