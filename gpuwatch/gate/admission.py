"""Admission for one lane: a bound on work in flight and a bounded FIFO queue.

No sockets here: a request calls ``admit()`` and gets a ``Ticket`` once it holds a slot, or a
``Refused`` with the reason. ``release()`` hands the slot to the head of the queue. Raising
``max_inflight`` admits queued requests at once; lowering it cancels nothing, it only holds new
admissions until in-flight falls below the new limit.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from gpuwatch.gate.limits import LaneLimits


class _Expired(Exception):
    """A queued request's timeout fired before a slot came."""


class Refused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(eq=False)
class Waiter:
    future: asyncio.Future[None]
    since: float


@dataclass(eq=False)
class Ticket:
    """Proof of a slot; release it exactly once."""

    lane: AdmissionLane
    queue_wait_s: float
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.lane._release()


@dataclass(eq=False)
class AdmissionLane:
    name: str
    limits: LaneLimits
    paused: bool = False
    inflight: int = 0
    queue: deque[Waiter] = field(default_factory=deque)
    admitted_total: int = 0
    rejected_total: Counter[str] = field(default_factory=Counter)

    def oldest_queued_s(self, now: float | None = None) -> float:
        if not self.queue:
            return 0.0
        return (now if now is not None else time.monotonic()) - self.queue[0].since

    def _can_admit(self) -> bool:
        return not self.paused and self.inflight < self.limits.max_inflight

    def refuse(self, reason: str, message: str) -> Refused:
        self.rejected_total[reason] += 1
        return Refused(reason, message)

    async def admit(self) -> Ticket:
        """Wait for a slot; raises Refused (paused, queue full, queue timeout)."""
        started = time.monotonic()
        if self.paused:
            raise self.refuse("paused", "admission is paused (the node is draining)")
        if self._can_admit() and not self.queue:
            self.inflight += 1
            self.admitted_total += 1
            return Ticket(self, 0.0)
        if len(self.queue) >= self.limits.max_queue:
            raise self.refuse(
                "queue_full",
                f"lane {self.name!r} is full: {self.inflight} in flight, "
                f"{len(self.queue)} queued (max_queue {self.limits.max_queue})",
            )
        loop = asyncio.get_running_loop()
        waiter = Waiter(loop.create_future(), started)
        self.queue.append(waiter)
        timer = loop.call_later(self.limits.queue_timeout_s, self._expire, waiter)
        try:
            await waiter.future
        except _Expired:
            raise self.refuse(
                "queue_timeout",
                f"waited {self.limits.queue_timeout_s:g} s in lane {self.name!r}'s queue",
            ) from None
        except asyncio.CancelledError:
            # The client went away: leave the queue, or give back the slot that was handed
            # over in the same tick (the future holds a result then).
            if waiter.future.done() and not waiter.future.cancelled():
                self._release()
            elif waiter in self.queue:
                self.queue.remove(waiter)
            raise
        finally:
            timer.cancel()
        return Ticket(self, time.monotonic() - started)

    def _expire(self, waiter: Waiter) -> None:
        if not waiter.future.done():
            self.queue.remove(waiter)
            waiter.future.set_exception(_Expired())

    def _release(self) -> None:
        self.inflight -= 1
        self.pump()

    def pump(self) -> None:
        """Hand free slots to the head of the queue (after a release or a limit change)."""
        while self.queue and self._can_admit():
            waiter = self.queue.popleft()
            self.inflight += 1
            self.admitted_total += 1
            waiter.future.set_result(None)

    def set_limits(self, limits: LaneLimits, paused: bool) -> None:
        self.limits = limits
        self.paused = paused
        self.pump()
