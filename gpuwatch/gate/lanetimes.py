"""What a lane measured of its own recent past, for its queue-wait budget (``deadline.py``).

Two things, both from the lane's own tickets, on the lane's clock (simulated in ``plan``):

- **prefill**: from admission to the first token, per request. The part of the user's TTFT
  that comes after the queue; the queue may have the rest of the target.
- **drain**: how fast slots free up. By Little's law a lane with ``L`` requests in flight, each
  held ``W`` seconds on average, frees ``L / W`` slots a second. Measured that way rather than
  as releases per second, because releases per second is the *arrival* rate while the lane is
  not full: at the start of a burst it would say the lane drains at the calm rate before it and
  refuse requests that a full lane serves in time.

Both over the last ``WINDOW_S`` seconds (at most ``KEEP`` samples each); too few samples is
None, and the caller then does not estimate (a waiting request is still shed at its deadline).
"""

from __future__ import annotations

from collections import deque

from gpuwatch.series import sample_quantile

WINDOW_S = 10.0
KEEP = 256  # samples kept of each kind: a bound on memory and on the work per estimate
MIN_SAMPLES = 3
# A request that waited its whole budget must still start in time when its prefill is slow:
# the budget leaves room for the tail of prefill, not its middle.
PREFILL_QUANTILE = 0.99


class LaneTimes:
    def __init__(self) -> None:
        self._prefill: deque[tuple[float, float]] = deque(maxlen=KEEP)  # (when, seconds)
        self._held: deque[tuple[float, float]] = deque(maxlen=KEEP)  # (released, seconds held)

    def first_token(self, now: float, seconds: float) -> None:
        self._prefill.append((now, seconds))

    def released(self, now: float, held_s: float) -> None:
        self._held.append((now, held_s))

    @staticmethod
    def _recent(samples: deque[tuple[float, float]], now: float) -> list[float]:
        return [v for t, v in samples if now - t <= WINDOW_S]

    def prefill_s(self, now: float) -> float | None:
        """The recent time from admission to first token (its ``PREFILL_QUANTILE``)."""
        values = sorted(self._recent(self._prefill, now))
        if len(values) < MIN_SAMPLES:
            return None
        return sample_quantile(values, PREFILL_QUANTILE)

    def first_tokens_per_s(self, now: float) -> float | None:
        """First tokens a second over the window: how fast the engine finishes prefills (when
        it has them to do; the arrival rate when it does not, which is all it then needs)."""
        times = [t for t, _ in self._prefill if now - t <= WINDOW_S]
        if len(times) < MIN_SAMPLES or times[-1] <= times[0]:
            return None
        return (len(times) - 1) / (times[-1] - times[0])

    def drain_per_s(self, now: float, inflight: int) -> float | None:
        """Slots freed per second with ``inflight`` requests holding them (Little's law)."""
        held = self._recent(self._held, now)
        if len(held) < MIN_SAMPLES or inflight <= 0:
            return None
        mean = sum(held) / len(held)
        return inflight / mean if mean > 0 else None
