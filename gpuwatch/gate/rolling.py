"""Per-second blocks of the last minutes, and a running sum for each window over them.

A block summarises one second (what arrived in it, or what happened in it) in a form whose
counts add up (``logsketch``). Each window's sum is kept as blocks change: a value added to a
block is added to the sums of the windows that hold its second, and a second leaving a window
is taken away from that window's sum, once. So a read costs the size of one sum (a few hundred
buckets) whatever the rate, not a walk over every value of the last 5 minutes, and no read
merges more than the ``max(windows)`` blocks (only the largest value of each, which does not
subtract, is read block by block).

A window holds whole seconds: second ``s`` (values from ``s`` to ``s + 1``) is in the window
``w`` at ``now`` while any of it is after ``now - w``, so the window spans between ``w`` and
``w + 1`` seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar


class Summable(Protocol):
    def merge(self, other: Any, sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) another of its kind."""


B = TypeVar("B", bound=Summable)


class Rolling(Generic[B]):
    """Blocks by second for the longest window, and each window's running sum."""

    def __init__(self, make: Callable[[], B], windows: Sequence[float]) -> None:
        self.make = make
        self.windows = tuple(sorted(int(w) for w in windows))
        self.blocks: dict[int, B] = {}
        self.sums: list[B] = [make() for _ in self.windows]
        # The oldest second in each window's sum (None before the first call).
        self._edges: list[int | None] = [None] * len(self.windows)

    def advance(self, now: float) -> None:
        """Take the seconds that left each window out of its sum (and drop those that left
        the longest)."""
        now_s = math.floor(now)
        longest = len(self.windows) - 1
        for i, w in enumerate(self.windows):
            edge, old = now_s - w, self._edges[i]
            if old is not None and edge <= old:
                continue
            self._edges[i] = edge
            if old is None:
                continue
            # One step a second as time goes; after a long idle, only the blocks there are.
            if edge - old <= len(self.blocks):
                gone: Sequence[int] = range(old, edge)
            else:
                gone = sorted(s for s in self.blocks if old <= s < edge)
            for s in gone:
                block = self.blocks.pop(s, None) if i == longest else self.blocks.get(s)
                if block is not None:
                    self.sums[i].merge(block, -1)

    def at(self, second: float, now: float) -> tuple[B, list[B]] | None:
        """The block of ``second`` and the sums of the windows that hold it, for a caller to
        add the same to each; None when it is older than the longest window."""
        self.advance(now)
        s = min(math.floor(second), math.floor(now))
        edges = self._edges
        if s < (edges[-1] or 0):
            return None
        block = self.blocks.get(s)
        if block is None:
            block = self.blocks[s] = self.make()
        return block, [self.sums[i] for i, edge in enumerate(edges) if s >= (edge or 0)]

    def window(self, window_s: float, now: float) -> tuple[B, list[B]]:
        """A window's sum, and its blocks (oldest first: at most one per second of it)."""
        self.advance(now)
        i = self.windows.index(int(window_s))
        edge = self._edges[i] or 0
        blocks = self.blocks
        inside = [b for s in range(edge, math.floor(now) + 1) if (b := blocks.get(s)) is not None]
        return self.sums[i], inside
