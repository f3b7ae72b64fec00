"""A stalled engine: alive, answering ``/health`` and ``/metrics``, requests running, and
nothing moving. The one detector the dashboard, ``gpuwatch watch``, ``gpuwatch snapshot`` and
the gate all use, so "stalled" means the same wherever it is shown or acted on.

Pure: readings in (a time, the progress values, the requests running), a verdict out. The
caller says what progress is: an engine's counters (``progress_of``), or the bytes the gate
relayed from its streams (``gate/stallwatch.py``).

The rule: an engine is stalled when it has requests (running, or waiting for a place: a stuck
scheduler admits none) and none of its progress values has changed for more than ``after_s``.
Any change counts as progress, a counter that went back included (a server that restarted is
not stalled, it starts again). No request at all is idle, never stalled: the clock starts again
at the first busy reading, so an idle hour does not count towards a stall. A reading that does
not say how many requests there are, or has no progress value at all, cannot be judged: the
clock starts again after it too.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwatch.model import EngineSnapshot

# Long enough that a busy engine always moves in it (a step takes milliseconds, a prefill of a
# long prompt seconds), short enough that users are told to come back before their own
# timeouts. The [slo] key ``stall_after_s`` and the gate's ``--stall-after`` change it.
DEFAULT_STALL_AFTER_S = 10.0

# What moves while an engine works, in the order of how often: a step counter (llama.cpp's
# llama_decode calls: its token counters move only when a request ends), the token counters
# (vLLM counts them every step), and the KV cache in use (it grows with every token decoded,
# on stacks whose token counters move only when a request ends, such as SGLang's and TGI's).
PROGRESS_FIELDS = (
    "decode_steps_total",
    "generation_tokens_total",
    "prompt_tokens_total",
    "kv_tokens_used",
    "kv_cache_usage",
)

Progress = tuple[float | None, ...]


def progress_of(snap: EngineSnapshot) -> Progress:
    """The values whose change is an engine's progress (None: not exported)."""
    return tuple(getattr(snap, name) for name in PROGRESS_FIELDS)


class StallDetector:
    """Successive readings of one engine in, "stalled since when" out.

    ``since`` is the time of the last reading that showed progress (or that started the clock:
    the first busy one); the engine is stalled while ``stalled`` is true, for ``now - since``.
    ``after_s`` of 0 or None switches the detector off (never stalled).
    """

    def __init__(self, after_s: float | None = DEFAULT_STALL_AFTER_S) -> None:
        self.after_s = after_s or None
        self.since: float | None = None  # None: idle, or not judged
        self.running: float | None = None
        self.waiting: float | None = None
        self.stalled = False
        self.at: float | None = None  # the last reading's time
        self._last: Progress | None = None

    def update(
        self,
        t: float,
        progress: Sequence[float | None],
        running: float | None,
        waiting: float | None = None,
    ) -> bool:
        """Feed one reading taken at ``t`` (readings in time order); return ``stalled``."""
        values = tuple(progress)
        known = any(v is not None for v in values)
        busy = (running or 0) > 0 or (waiting or 0) > 0
        moved = self._last is None or values != self._last
        self._last = values if known else None
        self.running, self.waiting, self.at = running, waiting, t
        if not (busy and known) or self.since is None or moved:
            # Idle, not judged, the first busy reading, or progress: the clock starts here.
            self.since = t if busy and known else None
            self.stalled = False
            return False
        self.stalled = self.after_s is not None and t - self.since > self.after_s
        return self.stalled

    @property
    def judged(self) -> bool:
        """The last reading had a progress value to judge by (a stack that exports none is
        never called stalled, nor working)."""
        return self._last is not None

    def stalled_for(self, now: float | None = None) -> float | None:
        """How long it has been stalled (no progress while busy) at ``now`` (default: the last
        reading); None when not stalled."""
        if not self.stalled or self.since is None or self.at is None:
            return None
        return max(0.0, (self.at if now is None else now) - self.since)

    def quiet_for(self, now: float) -> float | None:
        """How long a busy engine has shown no progress at ``now`` (stalled or not yet); None
        when idle or not judged."""
        return None if self.since is None else max(0.0, now - self.since)
