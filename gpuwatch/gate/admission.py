"""Admission for one lane: a bound on work in flight and a bounded FIFO queue.

No sockets here. ``async with lane.slot() as ticket:`` waits for a slot and gives it back on
every way out of the block; ``Refused`` carries the reason when none comes. A slot exists only
as a live ``Ticket``: ``inflight`` is the number of tickets not yet released, so the count
cannot drift from the slots actually held. The only way to lose a slot would be a ticket that
nobody holds; a ticket is therefore created only for a waiter that is still waiting, and handed
to it in the same step.

Raising ``max_inflight`` admits queued requests at once; lowering it cancels nothing, it only
holds new admissions until in-flight falls below the new limit.

Token budget (``max_inflight_tokens``): each ticket carries its reservation (prompt tokens plus
output bound), and a request is admitted only while the reservations in flight plus its own
fit the budget. Both limits apply: count and tokens. The queue stays FIFO: the head waits for
tokens even when a smaller request behind it would fit (no starvation of large requests). A
request over the whole budget is refused at once (``over_token_budget``), and a queued one is
refused when a lowered budget no longer holds it: neither could ever be admitted.
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
    tokens: int = 0
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.lane._live.discard(self)
            self.lane.inflight_tokens -= self.tokens
            self.lane.pump()


@dataclass(eq=False)
class Waiter:
    future: asyncio.Future[Ticket]
    since: float
    tokens: int = 0


@dataclass(eq=False)
class AdmissionLane:
    name: str
    limits: LaneLimits
    paused: bool = False
    queue: deque[Waiter] = field(default_factory=deque)
    admitted_total: int = 0
    rejected_total: Counter[str] = field(default_factory=Counter)
    # The sum of the live tickets' reservations; changed only with ``_live``.
    inflight_tokens: int = 0
    _live: set[Ticket] = field(default_factory=set)

    @property
    def inflight(self) -> int:
        return len(self._live)

    def oldest_queued_s(self, now: float | None = None) -> float:
        if not self.queue:
            return 0.0
        return (now if now is not None else time.monotonic()) - self.queue[0].since

    def _can_admit(self, tokens: int = 0) -> bool:
        if self.paused or self.inflight >= self.limits.max_inflight:
            return False
        budget = self.limits.max_inflight_tokens
        return budget is None or self.inflight_tokens + tokens <= budget

    def _over_budget(self, tokens: int) -> Refused | None:
        budget = self.limits.max_inflight_tokens
        if budget is None or tokens <= budget:
            return None
        return self.refuse(
            "over_token_budget",
            f"request needs {tokens} tokens (prompt + max output); lane {self.name!r}'s "
            f"budget in flight is {budget}",
        )

    def refuse(self, reason: str, message: str) -> Refused:
        self.rejected_total[reason] += 1
        return Refused(reason, message)

    def _issue(self, since: float, tokens: int) -> Ticket:
        ticket = Ticket(self, time.monotonic() - since, tokens)
        self._live.add(ticket)
        self.inflight_tokens += tokens
        self.admitted_total += 1
        return ticket

    @contextlib.asynccontextmanager
    async def slot(self, tokens: int = 0) -> AsyncIterator[Ticket]:
        """Hold a slot (and ``tokens`` of the lane's token budget) for the block; raises
        Refused (paused, queue full, queue timeout, over the token budget)."""
        ticket = await self.admit(tokens)
        try:
            yield ticket
        finally:
            ticket.release()

    async def admit(self, tokens: int = 0) -> Ticket:
        """A ticket the caller must release (prefer ``slot()``); raises Refused."""
        started = time.monotonic()
        if self.paused:
            raise self.refuse("paused", "admission is paused (the node is draining)")
        over = self._over_budget(tokens)
        if over is not None:
            raise over
        if self._can_admit(tokens) and not self.queue:
            return self._issue(started, tokens)
        if len(self.queue) >= self.limits.max_queue:
            raise self.refuse(
                "queue_full",
                f"lane {self.name!r} is full: {self.inflight} in flight, "
                f"{len(self.queue)} queued (max_queue {self.limits.max_queue})",
            )
        loop = asyncio.get_running_loop()
        waiter = Waiter(loop.create_future(), started, tokens)
        self.queue.append(waiter)
        timer = loop.call_later(self.limits.queue_timeout_s, self._expire, waiter)
        try:
            return await waiter.future
        except Refused:
            raise
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
                self.pump()  # the head may have left: the next one may fit the tokens free
            raise
        finally:
            timer.cancel()

    def _expire(self, waiter: Waiter) -> None:
        if not waiter.future.done():
            self.queue.remove(waiter)
            waiter.future.set_exception(_Expired())
            self.pump()

    def pump(self) -> None:
        """Hand free slots to the head of the queue (after a release or a limit change)."""
        while self.queue:
            waiter = self.queue[0]
            if waiter.future.done():
                # Cancelled (its task has not run its handler yet) or expired: it holds no
                # slot and must not be given one.
                self.queue.popleft()
                continue
            over = self._over_budget(waiter.tokens)
            if over is not None:
                # The budget was lowered under it: it could never be admitted.
                self.queue.popleft()
                waiter.future.set_exception(over)
                continue
            if not self._can_admit(waiter.tokens):
                break  # FIFO: the head waits, even if a smaller request behind it would fit
            self.queue.popleft()
            waiter.future.set_result(self._issue(waiter.since, waiter.tokens))

    def set_limits(self, limits: LaneLimits, paused: bool) -> None:
        self.limits = limits
        self.paused = paused
        self.pump()
