"""The gate's admission lane driven step by step on a simulated clock, with no event loop
running: what ``gpuwatch plan sweep`` (plan/simulate.py) puts in front of the simulator's
engine, so the plan's gate is the gate (admission.py), not a second model of it that drifts.

The lane reads time only through its ``clock``, here a ``SimClock`` the caller sets.
``AdmissionLane.enter`` takes no time; a request that must wait gets a ``Waiter`` whose future
is made on a loop that is never run here (futures are only set and read). What the proxy does
around the lane is done here the way the proxy does it: the ticket told of the first token and
released when the answer ends (the lane learns its prefill time and drain rate from them, for
its queue-wait budget), refusals counted by class. The caller calls ``tick()`` as simulated
time moves (at each arrival and each engine step), so waiters past their deadline are shed
(``AdmissionLane.shed_overdue``) as the gate's timers would shed them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Generic, TypeVar

from gpuwatch.gate.admission import AdmissionLane, Refused, Ticket, Waiter
from gpuwatch.gate.classes import Who
from gpuwatch.gate.limits import LaneLimits

K = TypeVar("K", bound=Hashable)


class SimClock:
    """Simulated seconds, set by whoever drives the simulation."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class OfflineLane(Generic[K]):
    """One lane; requests are named by the caller's keys. Each call returns the keys admitted
    as a result (to start now), in order; refusals go to ``refused`` as (key, reason)."""

    def __init__(self, lane: AdmissionLane) -> None:
        self.lane = lane
        self._loop = asyncio.new_event_loop()  # never run: it only makes the waiters' futures
        self._waiting: dict[Waiter, K] = {}
        self._tickets: dict[K, Ticket] = {}
        self.refused: list[tuple[K, str]] = []

    def close(self) -> None:
        self._loop.close()

    def arrive(self, key: K, tokens: int = 0, who: Who | None = None) -> list[K]:
        """``key`` at the gate now, reserving ``tokens`` of the lane's budget."""
        who = who or Who()
        admitted = self.tick()
        try:
            entered = self.lane.enter(tokens, who, self.lane.clock(), self._loop)
        except Refused as refused:
            self._refused(key, who, refused.reason)
            return admitted
        if isinstance(entered, Ticket):
            self._tickets[key] = entered
            return [*admitted, key]
        self._waiting[entered] = key
        return admitted + self._settled()  # an eviction may have refused a waiter

    def refuse(self, key: K, reason: str, message: str, who: Who | None = None) -> None:
        """``key`` refused before it reached the lane (a cap: ``caps.check_text``),
        counted in the lane's refusals as the proxy counts it."""
        self.lane.refuse(reason, message)
        self._refused(key, who or Who(), reason)

    def first_token(self, key: K) -> list[K]:
        """``key``'s first token came out (the proxy's first body byte from upstream); a
        streaming request's prefill is done, which may admit the next."""
        ticket = self._tickets.get(key)
        if ticket is not None:
            ticket.first_token()
        return self._settled()

    def finished(self, key: K) -> list[K]:
        """``key``'s answer ended: its slot goes back and the queue moves on."""
        ticket = self._tickets.pop(key, None)
        if ticket is not None:
            ticket.release()
        return self._settled()

    def set_limits(self, limits: LaneLimits, paused: bool = False) -> list[K]:
        self.lane.set_limits(limits, paused)
        return self._settled()

    def tick(self) -> list[K]:
        """Shed the waiters whose deadline has passed on the clock (queue_timeout, or
        queue_deadline past the lane's queue-wait budget)."""
        self.lane.shed_overdue()
        return self._settled()

    def next_deadline(self) -> float | None:
        """When the first waiter still queued is shed if nothing admits it first."""
        return min((w.deadline for w in self.lane.queue), default=None)

    @property
    def queued(self) -> int:
        return len(self._waiting)

    def _refused(self, key: K, who: Who, reason: str) -> None:
        self.lane.tenants.refused[(who.klass, reason)] += 1  # as the proxy counts
        self.refused.append((key, reason))

    def _settled(self) -> list[K]:
        admitted = []
        for waiter in [w for w in self._waiting if w.future.done()]:
            key = self._waiting.pop(waiter)
            refused = waiter.future.exception()
            if isinstance(refused, Refused):  # evicted, shed, over a lowered budget
                self._refused(key, waiter.who, refused.reason)
            else:
                self._tickets[key] = waiter.future.result()
                admitted.append(key)
        return admitted
