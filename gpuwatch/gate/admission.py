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

Classes and tenants (``fairqueue.py``, ``tenants.py``): the queue serves higher priority
first and takes turns across tenants within a priority, FIFO within one tenant and class. When
the queue is full, an arrival may evict the newest waiter of a lower, sheddable class (429
``evicted``), else the newest waiter of the tenant holding the most places at its priority,
while that tenant holds two more than its own; else it gets ``queue_full``.

Time (``deadline.py``): each queued request has a deadline, the sooner of ``queue_timeout_s``
(503 ``queue_timeout``) and the lane's queue-wait budget (429 ``queue_deadline``). An arrival
whose estimated wait is already past the budget is refused at once rather than queued; a
waiter still queued at its deadline is shed. Refusals that a client should retry carry
``retry_after_s``, from the lane's measured drain rate. Every reading of time goes through
``clock`` so the planner can run this very code on simulated time (``plan/simulate.py``): it
calls ``shed_overdue()`` as its clock moves, where the gate has one timer per waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from gpuwatch.errors import GpuwatchError
from gpuwatch.gate import deadline
from gpuwatch.gate.classes import Who
from gpuwatch.gate.fairqueue import FairQueue
from gpuwatch.gate.lanetimes import LaneTimes
from gpuwatch.gate.limits import LaneLimits
from gpuwatch.gate.tenants import TenantBook


class Refused(GpuwatchError):
    def __init__(self, reason: str, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        # When to come back, from the lane's drain rate (None: the reason's fixed answer).
        self.retry_after_s = retry_after_s


@dataclass(eq=False)
class Ticket:
    """Proof of a slot; ``release()`` gives it back, once (later calls do nothing)."""

    lane: AdmissionLane
    queue_wait_s: float = 0.0
    tokens: int = 0
    released: bool = False
    who: Who = field(default_factory=Who)
    admitted_at: float = 0.0
    first_at: float | None = None
    # A streamed answer: until its first token it holds one of the lane's prefills.
    streams: bool = False

    def first_token(self) -> None:
        """The request's first token came out: the lane learns its time to it (once), and a
        streaming request's prefill is done."""
        if self.first_at is None:
            self.first_at = self.lane.clock()
            self.lane.times.first_token(self.first_at, self.first_at - self.admitted_at)
            if self.streams and not self.released:
                self.lane.prefilling -= 1
                self.lane.pump()

    def release(self) -> None:
        if not self.released:
            self.released = True
            now = self.lane.clock()
            self.lane.times.released(now, now - self.admitted_at)
            if self.streams and self.first_at is None:
                self.lane.prefilling -= 1
            self.lane._live.discard(self)
            self.lane.inflight_tokens -= self.tokens
            self.lane.tenants.give(self.who)
            self.lane.pump()


@dataclass(eq=False)
class Waiter:
    future: asyncio.Future[Ticket]
    since: float
    tokens: int = 0
    who: Who = field(default_factory=Who)
    # When it is shed if still queued, and as what (queue_timeout or queue_deadline).
    deadline: float = math.inf
    deadline_reason: str = "queue_timeout"
    budget_s: float | None = None
    streams: bool = False


@dataclass(eq=False)
class AdmissionLane:
    name: str
    limits: LaneLimits
    paused: bool = False
    queue: FairQueue[Waiter] = field(default_factory=FairQueue)
    admitted_total: int = 0
    rejected_total: Counter[str] = field(default_factory=Counter)
    # The sum of the live tickets' reservations; changed only with ``_live``.
    inflight_tokens: int = 0
    _live: set[Ticket] = field(default_factory=set)
    tenants: TenantBook = field(default_factory=TenantBook)
    # The gate's TTFT objective ([slo] ttft_p99_s): a lane without a target of its own
    # derives its queue-wait budget from it.
    slo_ttft_s: float | None = None
    clock: Callable[[], float] = time.monotonic
    times: LaneTimes = field(default_factory=LaneTimes)
    # (reason, message) every new request is refused with while the upstream is stalled
    # (stallwatch.py); None: admitted as usual.
    shed: tuple[str, str] | None = None
    # Streaming requests admitted that have no first token yet (deadline.prefill_cap).
    prefilling: int = 0

    def __post_init__(self) -> None:
        self.queue.blocked = self.tenants.blocked

    @property
    def inflight(self) -> int:
        return len(self._live)

    def oldest_queued_s(self, now: float | None = None) -> float:
        since = self.queue.oldest_since()
        if since is None:
            return 0.0
        return (now if now is not None else self.clock()) - since

    def wait_budget(self) -> float | None:
        """The queue-wait budget in force now (``deadline.budget``); None: none."""
        return deadline.budget(self.limits, self.slo_ttft_s, self.times.prefill_s(self.clock()))

    def drain_per_s(self) -> float | None:
        return self.times.drain_per_s(self.clock(), self.inflight)

    def prefill_cap(self) -> int | None:
        """How many streaming requests may wait for their first token (``deadline``)."""
        rate = self.times.first_tokens_per_s(self.clock())
        return deadline.prefill_cap(self.limits, self.slo_ttft_s, rate)

    def _can_admit(self, tokens: int = 0, streams: bool = False) -> bool:
        if self.paused or self.inflight >= self.limits.max_inflight:
            return False
        if streams:
            cap = self.prefill_cap()
            if cap is not None and self.prefilling >= cap:
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

    def refuse(self, reason: str, message: str, retry_after_s: int | None = None) -> Refused:
        self.rejected_total[reason] += 1
        return Refused(reason, message, retry_after_s)

    def _issue(self, since: float, tokens: int, who: Who, streams: bool = False) -> Ticket:
        now = self.clock()
        ticket = Ticket(self, now - since, tokens, who=who, admitted_at=now, streams=streams)
        self.prefilling += streams
        self._live.add(ticket)
        self.inflight_tokens += tokens
        self.tenants.take(who)
        self.admitted_total += 1
        return ticket

    @contextlib.asynccontextmanager
    async def slot(
        self, tokens: int = 0, who: Who | None = None, streams: bool = False
    ) -> AsyncIterator[Ticket]:
        """Hold a slot (and ``tokens`` of the lane's token budget) for the block; raises
        Refused (paused, queue full, queue timeout, over the token budget, evicted).
        ``streams``: a streamed answer, which holds one of the lane's prefills until its first
        token (``Ticket.first_token``)."""
        ticket = await self.admit(tokens, who, streams)
        try:
            yield ticket
        finally:
            ticket.release()

    def enter(
        self,
        tokens: int,
        who: Who,
        started: float,
        loop: asyncio.AbstractEventLoop,
        streams: bool = False,
    ) -> Ticket | Waiter:
        """The step of ``admit`` that takes no time: a ticket at once, or a ``Waiter`` put in
        the queue (its future, made on ``loop``, gets the ticket); raises Refused. Apart so
        the dashboard's scenarios (scripts/scenario.py) drive the very same admission on
        simulated time."""
        if self.paused:
            raise self.refuse("paused", "admission is paused (the node is draining)")
        if self.shed is not None:
            raise self.refuse(*self.shed)
        if self.tenants.paused(who.tenant):
            raise self.refuse("tenant_paused", f"tenant {who.tenant!r} is paused")
        over = self._over_budget(tokens)
        if over is not None:
            raise over
        if (
            self._can_admit(tokens, streams)
            and self.queue.peek() is None
            and not self.tenants.blocked(who.tenant)
        ):
            return self._issue(started, tokens, who, streams)
        budget = self.wait_budget()
        drain = self.drain_per_s()
        ahead = self.queue.ahead_of(who.priority)
        if budget is not None:
            wait = deadline.estimated_wait(ahead, drain)
            if budget <= 0 or (wait is not None and wait > budget):
                about = f"about {wait:.1f} s" if wait is not None else "no free slot"
                raise self.refuse(
                    "queue_deadline",
                    f"lane {self.name!r} cannot start this request within its queue-wait "
                    f"budget of {budget:.2f} s: {about} ({ahead} waiting ahead, "
                    f"{self.inflight} in flight)",
                    deadline.retry_after(ahead, drain, budget),
                )
        if len(self.queue) >= self.limits.max_queue and not self._evict_for(who):
            raise self.refuse(
                "queue_full",
                f"lane {self.name!r} is full: {self.inflight} in flight, "
                f"{len(self.queue)} queued (max_queue {self.limits.max_queue})",
                deadline.retry_after(ahead, drain, budget or 0.0),
            )
        waiter = Waiter(
            loop.create_future(), started, tokens, who, budget_s=budget, streams=streams
        )
        timeout = self.limits.queue_timeout_s
        if budget is not None and budget < timeout:
            waiter.deadline, waiter.deadline_reason = started + budget, "queue_deadline"
        else:
            waiter.deadline = started + timeout
        self.queue.append(waiter)
        return waiter

    async def admit(self, tokens: int = 0, who: Who | None = None, streams: bool = False) -> Ticket:
        """A ticket the caller must release (prefer ``slot()``); raises Refused."""
        loop = asyncio.get_running_loop()
        waiter = self.enter(tokens, who or Who(), self.clock(), loop, streams)
        if isinstance(waiter, Ticket):
            return waiter
        timer = loop.call_later(max(0.0, waiter.deadline - self.clock()), self._expire, waiter)
        try:
            return await waiter.future
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
        """``waiter``'s deadline passed while it was queued: refuse it (the timer's call)."""
        if waiter.future.done():
            return
        self.queue.remove(waiter)
        waited = self.clock() - waiter.since
        if waiter.deadline_reason == "queue_deadline":
            drain = self.drain_per_s()
            refused = self.refuse(
                "queue_deadline",
                f"waited {waited:.2f} s in lane {self.name!r}'s queue, past its queue-wait "
                f"budget of {waiter.budget_s or 0.0:.2f} s",
                deadline.retry_after(len(self.queue), drain, waiter.budget_s or 0.0),
            )
        else:
            refused = self.refuse(
                "queue_timeout",
                f"waited {self.limits.queue_timeout_s:g} s in lane {self.name!r}'s queue",
            )
        waiter.future.set_exception(refused)
        self.pump()

    def shed_overdue(self) -> int:
        """Refuse every waiter whose deadline has passed on the lane's clock; how many. The
        gate's timers do this one waiter at a time; a driver on simulated time calls this."""
        now = self.clock()
        overdue = [w for w in self.queue if w.deadline <= now]
        for waiter in overdue:
            self._expire(waiter)
        return len(overdue)

    def _evict_for(self, who: Who) -> bool:
        """Make room in a full queue for ``who`` by refusing the newest waiter of a lower,
        sheddable class; False when there is none."""
        victim = self.queue.victim(who.priority)
        why = f"for a {who.klass} request (class {victim.who.klass} is sheddable)" if victim else ""
        if victim is None:
            # A tenant's in-flight cap bounds its slots, not its places in the queue: one
            # tenant could hold them all and every other tenant would get queue_full.
            hog = self.queue.hog(who)
            if hog is None:
                return False
            victim, held = hog
            why = (
                f"for another tenant's request (tenant {victim.who.tenant!r} held {held} of "
                f"{len(self.queue)} places)"
            )
        self.queue.remove(victim)
        if not victim.future.done():
            victim.future.set_exception(
                self.refuse("evicted", f"evicted from lane {self.name!r}'s full queue {why}")
            )
        return True

    def pump(self) -> None:
        """Hand free slots to the head of the queue (after a release or a limit change)."""
        while self.queue:
            waiter = self.queue.peek()
            if waiter is None:
                break  # every tenant waiting is paused or at its in-flight cap
            if waiter.future.done():
                # Cancelled (its task has not run its handler yet) or expired: it holds no
                # slot and must not be given one.
                self.queue.remove(waiter)
                continue
            over = self._over_budget(waiter.tokens)
            if over is not None:
                # The budget was lowered under it: it could never be admitted.
                self.queue.remove(waiter)
                waiter.future.set_exception(over)
                continue
            if not self._can_admit(waiter.tokens, waiter.streams):
                break  # the head waits, even if a smaller request behind it would fit
            self.queue.served(waiter)
            waiter.future.set_result(
                self._issue(waiter.since, waiter.tokens, waiter.who, waiter.streams)
            )

    def refuse_queued(self, reason: str, message: str) -> int:
        """Refuse every request waiting in the queue (a stalled upstream: they would wait for
        nothing); how many were."""
        refused = 0
        for waiter in list(self.queue):
            self.queue.remove(waiter)
            if not waiter.future.done():
                waiter.future.set_exception(self.refuse(reason, message))
                refused += 1
        return refused

    def set_limits(self, limits: LaneLimits, paused: bool) -> None:
        self.limits = limits
        self.paused = paused
        self.pump()
