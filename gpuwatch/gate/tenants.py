"""Per-tenant limits (part of the limits document) and a lane's live count per tenant and
class. Pure: no I/O.

A tenant limit applies in every lane, each lane counting the tenant's requests on its own:
``paused`` refuses the tenant's new requests (503 ``tenant_paused``; its queued ones wait),
``max_inflight`` holds its requests in the queue while it has that many in flight, and the
turn passes to the next tenant.

Memory: the live counts hold a tenant only while it has a request in flight (entries at zero
are dropped), and the limits document holds at most ``MAX_TENANT_LIMITS`` entries, each keyed
by a short plain id (``classes.TENANT_ID``). A million fairness ids cost nothing once their
requests are gone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuwatch.adminapi import TenantLimits as TenantLimits
from gpuwatch.gate.classes import Who, count_down

MAX_TENANT_LIMITS = 1024
TOP_TENANTS = 8  # tenants shown per lane in /admin/status


@dataclass
class TenantBook:
    """A lane's requests in flight by tenant and by class, and the tenant limits in force."""

    limits: Mapping[str, TenantLimits] = field(default_factory=dict)
    inflight: Counter[str] = field(default_factory=Counter)
    classes: Counter[str] = field(default_factory=Counter)
    # Refusals by (class, reason): configured classes x known reasons, so bounded.
    refused: Counter[tuple[str, str]] = field(default_factory=Counter)

    def take(self, who: Who) -> None:
        self.inflight[who.tenant] += 1
        self.classes[who.klass] += 1

    def give(self, who: Who) -> None:
        count_down(self.inflight, who.tenant)
        count_down(self.classes, who.klass)

    def paused(self, tenant: str) -> bool:
        limits = self.limits.get(tenant)
        return limits is not None and limits.paused

    def blocked(self, tenant: str) -> bool:
        """May not get a slot now: paused, or at its in-flight cap."""
        limits = self.limits.get(tenant)
        if limits is None:
            return False
        cap = limits.max_inflight
        return limits.paused or (cap is not None and self.inflight[tenant] >= cap)

    def top(self, queued: Mapping[str, int], n: int = TOP_TENANTS) -> list[tuple[str, int, int]]:
        """(tenant, in flight, queued) of the ``n`` busiest tenants, busiest first."""
        tenants = set(self.inflight) | set(queued)
        ranked = sorted(tenants, key=lambda t: (-(self.inflight.get(t, 0) + queued.get(t, 0)), t))
        return [(t, self.inflight.get(t, 0), queued.get(t, 0)) for t in ranked[:n]]
