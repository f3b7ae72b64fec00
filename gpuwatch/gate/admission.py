"""Admission for one lane: a bound on work in flight and a bounded FIFO queue.

No sockets here. ``async with lane.slot() as ticket:`` waits for a slot and gives it back on
every way out of the block; ``Refused`` carries the reason when none comes. A slot exists only
as a live ``Ticket``: ``inflight`` is the number of tickets not yet released, so the count
cannot drift from the slots actually held. The only way to lose a slot would be a ticket that
nobody holds; a ticket is therefore created only for a waiter that is still waiting, and handed
to it in the same step.

Raising ``max_inflight`` admits queued requests at once; lowering it cancels nothing, it only
holds new admissions until in-flight falls below the new limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from gpuwatch.gate.limits import LaneLimits


class _Expired(Exception):
    """A queued request's timeout fired before a slot came."""


class Refused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(eq=False)
class Ticket:
    """Proof of a slot; ``release()`` gives it back, once (later calls do nothing)."""

    lane: AdmissionLane
    queue_wait_s: float = 0.0
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.lane._live.discard(self)
            self.lane.pump()


@dataclass(eq=False)
class Waiter:
    future: asyncio.Future[Ticket]
    since: float


@dataclass(eq=False)
class AdmissionLane:
    name: str
    limits: LaneLimits
    paused: bool = False
    queue: deque[Waiter] = field(default_factory=deque)
    admitted_total: int = 0
    rejected_total: Counter[str] = field(default_factory=Counter)
    _live: set[Ticket] = field(default_factory=set)

    @property
    def inflight(self) -> int:
        return len(self._live)

    def oldest_queued_s(self, now: float | None = None) -> float:
        if not self.queue:
            return 0.0
        return (now if now is not None else time.monotonic()) - self.queue[0].since

    def _can_admit(self) -> bool:
        return not self.paused and self.inflight < self.limits.max_inflight

    def refuse(self, reason: str, message: str) -> Refused:
        self.rejected_total[reason] += 1
        return Refused(reason, message)

    def _issue(self, since: float) -> Ticket:
        ticket = Ticket(self, time.monotonic() - since)
        self._live.add(ticket)
        self.admitted_total += 1
        return ticket

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[Ticket]:
        """Hold a slot for the block; raises Refused (paused, queue full, queue timeout)."""
        ticket = await self.admit()
        try:
            yield ticket
        finally:
            ticket.release()

    async def admit(self) -> Ticket:
        """A ticket the caller must release (prefer ``slot()``); raises Refused."""
        started = time.monotonic()
        if self.paused:
            raise self.refuse("paused", "admission is paused (the node is draining)")
        if self._can_admit() and not self.queue:
            return self._issue(started)
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
            return await waiter.future
        except _Expired:
            raise self.refuse(
                "queue_timeout",
                f"waited {self.limits.queue_timeout_s:g} s in lane {self.name!r}'s queue",
            ) from None
        except asyncio.CancelledError:
            # The client went away. Either still queued (leave), or a ticket was handed over
            # in the same step as the cancel (give it back: nobody else will).
            if waiter.future.done() and not waiter.future.cancelled():
                if waiter.future.exception() is None:
                    waiter.future.result().release()
            else:
                with contextlib.suppress(ValueError):
                    self.queue.remove(waiter)
            raise
        finally:
            timer.cancel()

    def _expire(self, waiter: Waiter) -> None:
        if not waiter.future.done():
            self.queue.remove(waiter)
            waiter.future.set_exception(_Expired())

    def pump(self) -> None:
        """Hand free slots to the head of the queue (after a release or a limit change)."""
        while self.queue and self._can_admit():
            waiter = self.queue.popleft()
            if waiter.future.done():
                # Cancelled (its task has not run its handler yet) or expired: it holds no
                # slot and must not be given one.
                continue
            waiter.future.set_result(self._issue(waiter.since))

    def set_limits(self, limits: LaneLimits, paused: bool) -> None:
        self.limits = limits
        self.paused = paused
        self.pump()
