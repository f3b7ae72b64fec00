"""``gpuwatch rules``: the SLOs of ``[slo]`` as Prometheus recording and alerting rules.

Recording rules hold each SLI's error ratio over every window a burn-rate tier reads
(``gpuwatch:slo_errors:ratio_rate5m{sli="ttft"}``); the burn-rate alerts compare a long and a
short window with the workbook's factors; the saturation and fault alerts read the serving
stacks' own series, every dialect gpuwatch reads. Names, labels and annotations follow the
Prometheus community's mixins (``KubeAPIErrorBudgetBurn``: ``long``, ``short``, ``severity``;
``summary``, ``description``, ``runbook_url``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuwatch.alerts.sli import (
    GATE_BOUNDS,
    GATE_REFUSED,
    GATE_TTFT,
    bound_at_or_under,
    le_regex,
    ttft_sources,
)
from gpuwatch.alerts.slo import Objective, objectives, period_s, tiers, window_text, windows
from gpuwatch.config import AlertSettings, Slo
from gpuwatch.sources.dialects import DIALECTS, GATE, Selector
from gpuwatch.stall import PROGRESS_FIELDS

GROUP = "gpuwatch-slo"
RECORD = "gpuwatch:slo_errors:ratio_rate"
BURN_ALERTS = {"ttft": "LLMTTFTErrorBudgetBurn", "goodput": "LLMGoodputErrorBudgetBurn"}


def record_name(window_s: float) -> str:
    return f"{RECORD}{window_text(window_s)}"


@dataclass
class Rules:
    """What ``[slo]`` and ``[alerts]`` make of the rules; ``groups()`` is the file's body."""

    slo: Slo
    alerts: AlertSettings = field(default_factory=AlertSettings)

    @property
    def by(self) -> str:
        return ", ".join(self.alerts.group_by)

    def sum(self, expr: str) -> str:
        return f"sum by ({self.by}) ({expr})"

    def bound(self, objective: Objective, bounds: Sequence[float]) -> float | None:
        return None if objective.bound_s is None else bound_at_or_under(bounds, objective.bound_s)

    # -- the SLIs -------------------------------------------------------------------------

    def sli_records(self) -> list[dict[str, Any]]:
        out = []
        for objective in objectives(self.slo):
            for w in windows(period_s(self.alerts)):
                out.extend(self._sli(objective, window_text(w), record_name(w)))
        return out

    def _sli(self, objective: Objective, w: str, record: str) -> list[dict[str, Any]]:
        if objective.sli == "goodput":
            bound = self.bound(objective, GATE_BOUNDS)
            good = self._under(GATE_TTFT, bound, w)
            arrived = (
                f"{self.sum(f'rate({GATE_TTFT}_count[{w}])')}"
                f" + {self.sum(f'rate({GATE_REFUSED}[{w}])')}"
            )
            labels = {"sli": "goodput", "ttft_bound": _bound_label(bound)}
            return [_record(record, f"1 - ({good}) / ({arrived})", labels)]
        out = []
        for source in ttft_sources():
            bound = self.bound(objective, source.bounds)
            if bound is None:
                continue
            good = self._under(source.histogram, bound, w)
            total = self.sum(f"rate({source.histogram}_count[{w}])")
            labels = {
                "sli": "ttft",
                "dialect": source.dialect,
                "histogram": source.histogram,
                "ttft_bound": _bound_label(bound),
            }
            out.append(_record(record, f"1 - ({good}) / ({total})", labels))
        return out

    def _under(self, histogram: str, bound: float | None, w: str) -> str:
        """Requests under ``bound`` per second (every answered one without a bound)."""
        if bound is None:
            return self.sum(f"rate({histogram}_count[{w}])")
        return self.sum(f'rate({histogram}_bucket{{le=~"{le_regex(bound)}"}}[{w}])')

    # -- the alerts -----------------------------------------------------------------------

    def annotations(self, name: str, summary: str, description: str) -> dict[str, str]:
        out = {"summary": summary, "description": description}
        if self.alerts.runbook_url:
            out["runbook_url"] = f"{self.alerts.runbook_url}#{name.lower()}"
        return out

    def burn_alerts(self) -> list[dict[str, Any]]:
        out = []
        for objective in objectives(self.slo):
            name = BURN_ALERTS[objective.sli]
            budget = objective.budget
            for tier in tiers(period_s(self.alerts)):
                long, short = window_text(tier.long_s), window_text(tier.short_s)
                threshold = f"({tier.factor:g} * {budget:.6g})"
                selector = f'{{sli="{objective.sli}"}}'
                expr = (
                    f"{record_name(tier.long_s)}{selector} > {threshold}\n"
                    f"and\n{record_name(tier.short_s)}{selector} > {threshold}"
                )
                bound = _bound_text(objective)
                out.append(
                    {
                        "alert": name,
                        "expr": expr,
                        "labels": {"severity": tier.severity, "long": long, "short": short},
                        "annotations": {
                            **self.annotations(
                                name,
                                f"{objective.what}: the error budget burns {tier.factor:g}x "
                                f"too fast over {long} and {short}.",
                                f"{{{{ $labels.instance }}}}: {{{{ $value | humanizePercentage"
                                f" }}}} of requests missed the SLO ({objective.what}, target "
                                f"{objective.target:.4g}) over the last {short}, and over "
                                f"{long} more than {tier.factor:g}x the budget of "
                                f"{budget:.4g}.{bound}",
                            ),
                        },
                    }
                )
        return out

    def fault_alerts(self) -> list[dict[str, Any]]:
        p = period_s(self.alerts)
        w = window_text(tiers(p)[0].short_s)  # the fast page's short window: "5m"
        out: list[dict[str, Any]] = []
        slo = self.slo
        if slo.kv_usage_high > 0:
            kv = self._any("kv_cache_usage", lambda s: f"max by ({self.by}) ({s})")
            out.append(
                self._alert(
                    "LLMKVCacheHigh",
                    f"({kv}) > {slo.kv_usage_high:g}",
                    w,
                    "warning",
                    "KV cache nearly full.",
                    "{{ $labels.instance }}: KV cache at {{ $value | humanizePercentage }}, "
                    f"over {slo.kv_usage_high:.0%}: new requests wait and running ones may be "
                    "preempted.",
                )
            )
        if slo.preemptions_per_min > 0:
            rate = self._any("preemptions_total", lambda s: self.sum(f"rate({s}[{w}])"))
            out.append(
                self._alert(
                    "LLMPreemptions",
                    f"60 * ({rate}) > {slo.preemptions_per_min:g}",
                    "0s",
                    "warning",
                    "The engine preempts requests.",
                    f"{{{{ $labels.instance }}}}: {{{{ $value | humanize }}}} preemptions a "
                    f"minute over {w} (more than {slo.preemptions_per_min:g}): the KV cache is "
                    "too small for the requests running; their work is redone.",
                )
            )
        waiting = self._any("waiting", self.sum)
        grew = self._any("waiting", lambda s: self.sum(f"delta({s}[{w}])"))
        out.append(
            self._alert(
                "LLMEngineQueueGrowing",
                f"({waiting}) > {slo.waiting_high:g}\nand\n({grew}) > 0",
                w,
                "warning",
                "The engine's queue keeps growing.",
                f"{{{{ $labels.instance }}}}: {{{{ $value }}}} requests waiting, more than "
                f"{w} ago, for {w}: requests arrive faster than the engine serves them.",
            )
        )
        out.append(
            self._alert(
                "LLMTargetDown",
                f"up{{{self.alerts.target_selector}}} == 0"
                if self.alerts.target_selector
                else "up == 0",
                w,
                "warning",
                "A scrape target is down.",
                "{{ $labels.job }}/{{ $labels.instance }} has not answered Prometheus' scrapes "
                f"for {w}.",
            )
        )
        if slo.stall_after_s > 0:
            out.append(self._stalled(window_text(max(slo.stall_after_s, tiers(p)[0].short_s))))
        if slo.goodput_min > 0:
            refused = self.sum(f"rate({GATE_REFUSED}[{w}])")
            admitted = self.sum(f"rate(gpuwatch_gate_admitted_total[{w}])")
            out.append(
                self._alert(
                    "LLMGateRefusing",
                    f"{refused} / ({admitted} + {refused}) > {1 - slo.goodput_min:.6g}",
                    w,
                    "warning",
                    "The gate refuses requests.",
                    "{{ $labels.instance }}: the gate refused {{ $value | humanizePercentage }}"
                    f" of requests over {w}, more than the SLO's budget of "
                    f"{1 - slo.goodput_min:.4g}.",
                )
            )
        return out

    def _stalled(self, s: str) -> dict[str, Any]:
        parts = []
        for dialect in DIALECTS:
            running = dialect.scalars.get("running", ())
            progress = [n for f in PROGRESS_FIELDS for n in dialect.scalars.get(f, ())]
            if not running or not progress or dialect is GATE:
                continue
            busy = " or ".join(self.sum(_sel(n)) for n in running)
            # Any progress value that changed is progress: their changes are added up.
            names = "|".join(dict.fromkeys(Selector.parse(n).name for n in progress))
            moved = self.sum(f'changes({{__name__=~"{names}"}}[{s}])')
            parts.append(f"(({busy}) > 0 and on ({self.by}) ({moved}) == 0)")
        parts.append(f"max by ({self.by}) (gpuwatch_gate_upstream_stalled) == 1")
        return self._alert(
            "LLMEngineStalled",
            "\nor\n".join(parts),
            "0s",
            "critical",
            "The engine is STALLED: requests in it, nothing moving.",
            "{{ $labels.instance }}: requests are running but no token, step or KV cache "
            f"value has moved for {s}: alive and answering, stuck. Users wait until their "
            "timeouts.",
        )

    def _any(self, field_name: str, wrap: Any) -> str:
        """Every dialect's series for a field, each wrapped (an aggregation), or-ed."""
        names: list[str] = []
        for dialect in DIALECTS:
            if dialect is GATE:
                continue
            for n in dialect.scalars.get(field_name, ()):
                if n not in names:
                    names.append(n)
        return " or ".join(wrap(_sel(n)) for n in names)

    def _alert(
        self, name: str, expr: str, for_: str, severity: str, summary: str, description: str
    ) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": name, "expr": expr}
        if for_ != "0s":
            rule["for"] = for_
        rule["labels"] = {"severity": severity}
        rule["annotations"] = self.annotations(name, summary, description)
        return rule

    def groups(self) -> dict[str, Any]:
        # One group: the alerts after the records, so each evaluation reads records made in it.
        rules = [*self.sli_records(), *self.burn_alerts(), *self.fault_alerts()]
        return {"groups": [{"name": GROUP, "rules": rules}]}


def _sel(text: str) -> str:
    """A dialect's ``name{label=value}`` as a PromQL selector."""
    sel = Selector.parse(text)
    if not sel.labels:
        return sel.name
    inner = ", ".join(f'{k}="{v}"' for k, v in sel.labels)
    return f"{sel.name}{{{inner}}}"


def _record(record: str, expr: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"record": record, "expr": expr, "labels": labels}


def _bound_label(bound: float | None) -> str:
    return "" if bound is None else f"{bound:g}"


def _bound_text(objective: Objective) -> str:
    if objective.bound_s is None:
        return ""
    return (
        f" A request is good when its TTFT is at or under the largest bucket bound at or "
        f"under {objective.bound_s:g}s ({{{{ $labels.ttft_bound }}}}s for this histogram): "
        "the histogram cannot tell the target itself."
    )


def kubernetes(body: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    """The same groups as a prometheus-operator ``PrometheusRule`` object."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "gpuwatch", "role": "alert-rules"},
        },
        "spec": body,
    }


def to_yaml(value: Any, indent: int = 0) -> str:
    """YAML for plain data: mappings, lists, strings (JSON-quoted, which is YAML), numbers."""
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return "{}\n"
        lines = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{key}:\n{to_yaml(item, indent + 1)}")
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}\n")
        return "".join(lines)
    if isinstance(value, list):
        lines = []
        for item in value:
            body = to_yaml(item, indent + 1) if isinstance(item, (dict, list)) else None
            if body is None:
                lines.append(f"{pad}- {_scalar(item)}\n")
            else:
                lines.append(f"{pad}- {body[len(pad) + 2 :]}")
        return "".join(lines)
    return f"{pad}{_scalar(value)}\n"


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (dict, list)):
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(str(value), ensure_ascii=False)


def render(slo: Slo, alerts: AlertSettings, k8s: str | None = None, namespace: str = "") -> str:
    """The rules file's text; with ``k8s`` (an object name) a ``PrometheusRule`` manifest."""
    body = Rules(slo, alerts).groups()
    if k8s:
        body = kubernetes(body, k8s, namespace or "monitoring")
    return "# Generated by `gpuwatch rules` from [slo] and [alerts]; see docs/alerts.md.\n" + (
        to_yaml(body)
    )
