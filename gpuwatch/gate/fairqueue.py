"""A lane's queue: higher priority first, round robin over tenants within a priority, FIFO
within a tenant. Pure: no I/O, no clock.

Round robin by request, not deficit round robin by tokens: what the lane bounds is slots (one
request, one slot) and, with a budget, tokens that the ticket reserves up front. DRR would
charge each tenant what its request *declares* (a prompt estimate plus the output bound it
asks for, not what it will generate), so a tenant would be billed for tokens it never used,
and image and embedding requests have no tokens to charge at all. Each tenant with work
waiting gets the next slot in turn; the token budget keeps its own rule (the head waits until
its reservation fits, so large requests are not starved).

Memory: a tenant exists here only while it has a request waiting, so the table holds at most
``max_queue`` tenants whatever the number of fairness ids clients invent.

Within one tenant and one class the order is the arrival order: with no class or tenant
headers every request is the same (tenant, class) and the queue is the plain FIFO it was.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

from gpuwatch.gate.classes import Who, count_down


class Queued(Protocol):
    """What the queue needs of a waiter (``admission.Waiter``)."""

    since: float
    who: Who


W = TypeVar("W", bound=Queued)


class FairQueue(Generic[W]):
    def __init__(self) -> None:
        # priority -> tenant -> its waiters; a tenant's place in its OrderedDict is its turn.
        self._levels: dict[int, OrderedDict[str, deque[W]]] = {}
        self._count = 0
        # Kept as waiters come and go: read on every status and scrape.
        self.by_tenant: Counter[str] = Counter()
        self.by_class: Counter[str] = Counter()
        self.by_priority: Counter[int] = Counter()
        # A tenant that may not be served now (paused, or at its in-flight cap): skipped,
        # and the turn goes to the next tenant.
        self.blocked: Callable[[str], bool] = lambda tenant: False

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[W]:
        for priority in sorted(self._levels, reverse=True):
            for waiters in self._levels[priority].values():
                yield from waiters

    def append(self, waiter: W) -> None:
        level = self._levels.setdefault(waiter.who.priority, OrderedDict())
        level.setdefault(waiter.who.tenant, deque()).append(waiter)
        self._count += 1
        self.by_tenant[waiter.who.tenant] += 1
        self.by_class[waiter.who.klass] += 1
        self.by_priority[waiter.who.priority] += 1

    def remove(self, waiter: W) -> None:
        """Take ``waiter`` out wherever it is; ValueError when it is not queued."""
        level = self._levels.get(waiter.who.priority)
        waiters = level.get(waiter.who.tenant) if level is not None else None
        if waiters is None or level is None:
            raise ValueError("not queued")
        waiters.remove(waiter)
        self._count -= 1
        count_down(self.by_tenant, waiter.who.tenant)
        count_down(self.by_class, waiter.who.klass)
        count_down(self.by_priority, waiter.who.priority)
        if not waiters:
            del level[waiter.who.tenant]
            if not level:
                del self._levels[waiter.who.priority]

    def peek(self) -> W | None:
        """The next to serve: the first tenant in turn at the highest priority that is not
        blocked, its oldest request. None when nothing may be served."""
        for priority in sorted(self._levels, reverse=True):
            for tenant, waiters in self._levels[priority].items():
                if not self.blocked(tenant):
                    return waiters[0]
        return None

    def served(self, waiter: W) -> None:
        """Take out ``waiter`` (the one ``peek`` gave) and send its tenant to the back of the
        turn at its priority."""
        self.remove(waiter)
        level = self._levels.get(waiter.who.priority)
        if level is not None and waiter.who.tenant in level:
            level.move_to_end(waiter.who.tenant)

    def ahead_of(self, priority: int) -> int:
        """How many waiters a new arrival of ``priority`` would have to let go first: every one
        of its priority or above (the tenants' turns only reorder them)."""
        return sum(n for p, n in self.by_priority.items() if p >= priority)

    def oldest_since(self) -> float | None:
        heads = [w[0].since for level in self._levels.values() for w in level.values()]
        return min(heads) if heads else None

    def hog(self, who: Who) -> tuple[W, int] | None:
        """Whom ``who`` may evict when the queue is full and no class below it is waiting:
        the newest waiter of the tenant holding the most places at ``who``'s priority, and
        how many it holds, if that is at least two more than ``who``'s tenant holds (so the
        swap leaves the shares closer, never the other way round). None otherwise."""
        level = self._levels.get(who.priority)
        if not level:
            return None
        tenant, waiters = max(level.items(), key=lambda item: len(item[1]))
        own = len(level.get(who.tenant, ()))
        if tenant == who.tenant or len(waiters) < own + 2:
            return None
        return waiters[-1], len(waiters)

    def victim(self, below: int) -> W | None:
        """Whom a request of priority ``below`` may evict when the queue is full: the newest
        waiter of the lowest sheddable priority under it, else None."""
        if not self._levels:
            return None
        lowest = min(self._levels)
        if lowest >= below or lowest >= 0:
            return None
        level = self._levels[lowest]
        return max((w[-1] for w in level.values()), key=lambda w: w.since)
