"""PromQL for the fleet, generated from the dialect table (which stays the one place that knows
metric names), and the answers assembled into one row per engine.

One query per signal for the whole fleet, never one per node: every dialect's expression for a
signal is tagged with its dialect (``label_replace``) and joined with ``or``. Inside a dialect a
field's candidate names are joined with ``or`` too, so the first name a target exports wins per
series, as on a scraped page. The aggregation mirrors the dialect mapping: a replica label
(``tp_rank`` ...) counts only its rank 0, every other label (``engine``, ``dp_rank`` ...) is
summed per instance and model, and ratios take the max. Quantiles are PromQL's own
``histogram_quantile`` over ``rate(...[1m])``: the same semantics as ``series.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuwatch.sources.dialects import (
    DIALECTS,
    GATE,
    GATE_REFUSED_TOTAL,
    MODEL_LABELS,
    REPLICA_LABELS,
    Dialect,
    Selector,
)

WINDOW = "1m"
WINDOW_S = 60.0
DIALECT_LABEL = "gpuwatch_dialect"
DEFAULT_NODE_LABEL = "node"

# "min": the sum over engines of each one's lowest value in the window (min_over_time).
Kind = Literal["sum", "max", "quantile", "rate", "min"]
Vector = list[tuple[dict[str, str], float | None]]


@dataclass(frozen=True)
class FleetSignal:
    """One column of the fleet table: which dialect field, and how it is aggregated."""

    key: str
    field: str  # a scalar field of EngineSnapshot, or a histogram kind (ttft, itl ...)
    kind: Kind
    q: float = 0.0
    scale: float = 1.0  # preemptions are shown per minute

    @property
    def windowed(self) -> bool:
        return self.kind in ("quantile", "rate", "min")


SIGNALS: tuple[FleetSignal, ...] = (
    FleetSignal("running", "running", "sum"),
    FleetSignal("waiting", "waiting", "sum"),
    FleetSignal("kv", "kv_cache_usage", "max"),
    FleetSignal("ttft_p99", "ttft", "quantile", 0.99),
    FleetSignal("itl_p99", "itl", "quantile", 0.99),
    FleetSignal("gen_tps", "generation_tokens_total", "rate"),
    FleetSignal("preempt_per_min", "preemptions_total", "rate", scale=60.0),
    # A stall (monitor/fleet.py): requests running all through the window, and no progress:
    # no token generated, or (llama.cpp, whose token counter moves when a request ends) no
    # forward pass run.
    FleetSignal("running_min", "running", "min"),
    FleetSignal("steps_ps", "decode_steps_total", "rate"),
)
# The drill-down's charts add these to the table's signals.
CHART_SIGNALS: tuple[FleetSignal, ...] = (
    FleetSignal("ttft_p50", "ttft", "quantile", 0.5),
    FleetSignal("prompt_tps", "prompt_tokens_total", "rate"),
)
# The gate's side of a node, from its own gpuwatch_gate_* families (lanes summed).
GATE_SIGNALS: dict[str, tuple[str, Kind]] = {
    "gate_inflight": (GATE.scalars["running"][0], "sum"),
    "gate_queued": (GATE.scalars["waiting"][0], "sum"),
    "gate_refused_ps": (GATE_REFUSED_TOTAL, "rate"),
}
ENGINE_DIALECTS: tuple[Dialect, ...] = tuple(d for d in DIALECTS if d is not GATE)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _vector(name: str, labels: Iterable[tuple[str, str]] = ()) -> str:
    """A selector that keeps only rank 0 of replica labels (absent counts as rank 0)."""
    matchers = [f"{k}={_quote(v)}" for k, v in labels]
    matchers += [f'{r}=~"0|"' for r in sorted(REPLICA_LABELS)]
    # A name with a colon is valid PromQL; ``__name__`` also takes any name a stack invents.
    return f"{{__name__={_quote(name)},{','.join(matchers)}}}"


def group_labels(node_label: str) -> tuple[str, ...]:
    return ("instance", node_label, *MODEL_LABELS)


def _by(extra: Sequence[str], node_label: str) -> str:
    return f"by ({', '.join((*extra, *group_labels(node_label)))})"


def _candidates(dialect: Dialect, signal: FleetSignal) -> tuple[str, ...]:
    if signal.kind == "quantile":
        return dialect.histograms.get(signal.field, ())
    return dialect.scalars.get(signal.field, ())


def dialect_expr(
    dialect: Dialect,
    signal: FleetSignal,
    node_label: str,
    instance: str | None = None,
    window: str = WINDOW,
) -> str | None:
    """The signal for one dialect (one instance's only, for a drill-down's charts), or None
    where the dialect does not export it. ``window``: the range of its rate."""
    parts = []
    for text in _candidates(dialect, signal):
        sel = Selector.parse(text)
        if instance is not None:
            sel = Selector(sel.name, (*sel.labels, ("instance", instance)))
        if signal.kind == "quantile":
            inner = f"rate({_vector(f'{sel.name}_bucket', sel.labels)}[{window}])"
            parts.append(
                f"histogram_quantile({signal.q:g}, sum {_by(['le'], node_label)} ({inner}))"
            )
        elif signal.kind == "rate":
            inner = f"rate({_vector(sel.name, sel.labels)}[{window}])"
            scaled = f" * {signal.scale:g}" if signal.scale != 1.0 else ""
            parts.append(f"sum {_by([], node_label)} ({inner}){scaled}")
        elif signal.kind == "min":
            inner = f"min_over_time({_vector(sel.name, sel.labels)}[{window}])"
            parts.append(f"sum {_by([], node_label)} ({inner})")
        else:
            parts.append(f"{signal.kind} {_by([], node_label)} ({_vector(sel.name, sel.labels)})")
    if not parts:
        return None
    joined = " or ".join(f"({p})" for p in parts)
    return f'label_replace({joined}, "{DIALECT_LABEL}", {_quote(dialect.name)}, "__name__", ".*")'


def signal_query(
    signal: FleetSignal,
    dialects: Sequence[Dialect],
    node_label: str = DEFAULT_NODE_LABEL,
    instance: str | None = None,
    window: str = WINDOW,
) -> str | None:
    """One query for ``signal`` over every dialect in ``dialects``: the whole fleet at once
    (or the one ``instance``)."""
    exprs = [
        e
        for d in dialects
        if (e := dialect_expr(d, signal, node_label, instance, window)) is not None
    ]
    return " or ".join(exprs) if exprs else None


def gate_query(key: str, node_label: str = DEFAULT_NODE_LABEL) -> str:
    name, kind = GATE_SIGNALS[key]
    by = f"by (instance, {node_label})"
    if kind == "rate":
        return f"sum {by} (rate({_vector(name)}[{WINDOW}]))"
    return f"sum {by} ({_vector(name)})"


def raw_samples_query(names: Iterable[str], instance: str, range_s: float) -> str:
    """The raw samples of ``names`` that ``instance`` exported in the last ``range_s``: an
    instant query of this range selector answers each sample with its scrape time."""
    pattern = "|".join(re.escape(n) for n in sorted(set(names)))
    seconds = max(1, math.ceil(range_s))
    return f"{{__name__=~{_quote(pattern)},instance={_quote(instance)}}}[{seconds}s]"


def node_selector_query(pattern: str, node: str, node_label: str = DEFAULT_NODE_LABEL) -> str:
    """Series whose name matches ``pattern`` on ``node``: by its ``node_label``, or (as
    ``node_of`` says) targets on that host, whatever their port."""
    name = f"__name__=~{_quote(pattern)}"
    host = _quote(re.escape(node) + "(:[0-9]+)?")
    by_label = f"{{{name},{node_label}={_quote(node)}}}"
    return f'{by_label} or {{{name},{node_label}="",instance=~{host}}}'


def dialects_named(name: str) -> list[Dialect]:
    """The engine dialects a row's ``dialect`` names (ray and trtllm have two spellings)."""
    return [d for d in ENGINE_DIALECTS if d.name == name]


def dialect_names(dialect: Dialect) -> set[str]:
    """The sample names whose presence says a target speaks ``dialect`` (as ``detect``)."""
    names = {sel.name for sel in dialect.selectors()}
    for hist in dialect.histogram_names():
        names.update({f"{hist}_bucket", f"{hist}_count"})
    return names


def present_dialects(names: Iterable[str]) -> list[Dialect]:
    """The engine dialects with at least one family among ``names`` (Prometheus' __name__s)."""
    have = set(names)
    return [d for d in ENGINE_DIALECTS if dialect_names(d) & have]


def has_gates(names: Iterable[str]) -> bool:
    return any(name.startswith("gpuwatch_gate_") for name in names)


# -- answers -> rows ---------------------------------------------------------------------


@dataclass
class FleetRow:
    """One engine (instance, model, dialect) with the fleet table's values (None: unknown)."""

    instance: str
    model: str | None
    dialect: str
    node: str
    values: dict[str, float | None] = field(default_factory=dict)
    gate: str | None = None  # the instance of the gate on the same node, if there is one

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.instance, self.model or "", self.dialect)

    def to_json(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "model": self.model,
            "dialect": self.dialect,
            "node": self.node,
            "gate": self.gate,
            **{k: v for k, v in self.values.items()},
        }


def node_of(labels: Mapping[str, str], node_label: str) -> str:
    """The node a series is on: its ``node_label`` (a relabelled name) or the instance's host."""
    if labels.get(node_label):
        return labels[node_label]
    instance = labels.get("instance", "")
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() else instance


def sample_value(raw: Any) -> float | None:
    """A vector sample's value, ``[ts, "1.5"]``: finite floats only (NaN is unknown)."""
    if not isinstance(raw, list) or len(raw) != 2 or not isinstance(raw[1], str):
        raise ValueError('a sample is not [time, "value"]')
    value = float(raw[1])
    return value if math.isfinite(value) else None


def vector_of(data: Any) -> Vector:
    """(labels, value) pairs from a ``query`` answer's ``data``; ValueError when it is not one."""
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise ValueError("answer is not an instant vector")
    result = data.get("result")
    if not isinstance(result, list):
        raise ValueError("answer has no result list")
    out = []
    for item in result:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise ValueError("a result has no metric labels")
        labels = {str(k): str(v) for k, v in item["metric"].items()}
        out.append((labels, sample_value(item.get("value"))))
    return out


def rows_from(
    answers: Mapping[str, Vector],
    gates: Mapping[str, Vector],
    node_label: str = DEFAULT_NODE_LABEL,
) -> tuple[list[FleetRow], dict[str, str]]:
    """Rows from each signal's answer; the gate values go on the rows of the gate's node.

    Returns the rows and {gate instance: node}. A gate on a node without an engine is a row of
    its own (dialect ``gate``), so it can still be seen and changed.
    """
    rows: dict[tuple[str, str, str], FleetRow] = {}
    for key, vector in answers.items():
        for labels, value in vector:
            model = next((labels[m] for m in MODEL_LABELS if labels.get(m)), None)
            dialect = labels.get(DIALECT_LABEL, "?")
            instance = labels.get("instance", "?")
            row_key = (instance, model or "", dialect)
            row = rows.get(row_key)
            if row is None:
                row = rows[row_key] = FleetRow(
                    instance, model, dialect, node_of(labels, node_label)
                )
            row.values[key] = value
    gate_nodes: dict[str, str] = {}
    gate_values: dict[str, dict[str, float | None]] = {}
    for key, vector in gates.items():
        for labels, value in vector:
            instance = labels.get("instance", "?")
            gate_nodes[instance] = node_of(labels, node_label)
            gate_values.setdefault(instance, {})[key] = value
    by_node: dict[str, str] = {}
    for instance in sorted(gate_nodes):
        by_node.setdefault(gate_nodes[instance], instance)  # one gate a node: the first
    out = list(rows.values())
    served = set()
    for row in out:
        gate = by_node.get(row.node)
        if gate is not None:
            row.gate = gate
            row.values.update(gate_values[gate])
            served.add(gate)
    for instance, node in gate_nodes.items():
        if instance not in served:
            out.append(
                FleetRow(instance, None, "gate", node, dict(gate_values[instance]), instance)
            )
    for row in out:
        for signal in SIGNALS:
            row.values.setdefault(signal.key, None)
    return out, gate_nodes
