"""What ``/admin/status`` and ``/metrics`` say about classes and tenants.

Metrics carry the class, never the tenant: classes are the operator's (at most 16), tenants
are whatever clients send, and a label per tenant would let a client grow the gate's metrics
without bound. Tenants are in the status JSON only: the busiest few per lane, by id (a hash
for keys and odd ids) or the name the config gives them, never a raw key.

The numbers are read from the lanes when asked (a custom collector), so a request costs
nothing here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuwatch.adminapi import ClassStatus, TenantStatus
from gpuwatch.gate.admission import AdmissionLane
from gpuwatch.gate.classes import Fairness


class Shares(NamedTuple):
    """A lane's ``classes``, ``tenants`` and ``tenant_count`` in ``/admin/status``."""

    classes: dict[str, ClassStatus]
    tenants: tuple[TenantStatus, ...]
    tenant_count: int


def lane_status(lane: AdmissionLane, fairness: Fairness) -> Shares:
    """``classes`` (in flight, queued, refused by reason, for each configured class) and
    ``tenants`` (the busiest, with their in-flight and queued counts) of one lane."""
    book, queued = lane.tenants, lane.queue
    classes: dict[str, ClassStatus] = {}
    for klass in fairness.by_priority():
        refused = {r: n for (k, r), n in book.refused.items() if k == klass}
        classes[klass] = ClassStatus(
            fairness.classes[klass],
            book.classes.get(klass, 0),
            queued.by_class.get(klass, 0),
            refused,
        )
    tenants = tuple(
        TenantStatus(fairness.shown(tenant), tenant, inflight, waiting, book.limits.get(tenant))
        for tenant, inflight, waiting in book.top(queued.by_tenant)
    )
    return Shares(classes, tenants, _live(lane))


def _live(lane: AdmissionLane) -> int:
    return len(set(lane.tenants.inflight) | set(lane.queue.by_tenant))


class ClassCollector(Collector):
    """``gpuwatch_gate_class_{inflight,queued}`` and ``gpuwatch_gate_class_rejected_total``,
    labelled by lane and class."""

    def __init__(self, lanes: Mapping[str, AdmissionLane], fairness: Fairness) -> None:
        self.lanes = lanes
        self.fairness = fairness

    def collect(self) -> Iterator[Any]:
        inflight = GaugeMetricFamily(
            "gpuwatch_gate_class_inflight",
            "Requests in flight, by class.",
            labels=["lane", "class"],
        )
        queued = GaugeMetricFamily(
            "gpuwatch_gate_class_queued", "Requests waiting, by class.", labels=["lane", "class"]
        )
        rejected = CounterMetricFamily(
            "gpuwatch_gate_class_rejected",
            "Requests refused, by class and reason.",
            labels=["lane", "class", "reason"],
        )
        for name, lane in self.lanes.items():
            for klass in self.fairness.classes:
                inflight.add_metric([name, klass], lane.tenants.classes.get(klass, 0))
                queued.add_metric([name, klass], lane.queue.by_class.get(klass, 0))
            for (klass, reason), n in sorted(lane.tenants.refused.items()):
                rejected.add_metric([name, klass, reason], n)
        yield inflight
        yield queued
        yield rejected
