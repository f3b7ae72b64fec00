"""The fleet's PromQL comes from the dialect table, and its answers become rows as the dialect
mapping would make them; the fleet state judges, sorts, filters and groups them."""

from __future__ import annotations

import argparse

import pytest

from gpuwatch.cli.fleet import past_instant
from gpuwatch.monitor.fleet import FleetState, table_lines
from gpuwatch.sources import promql
from gpuwatch.sources.dialects import GATE, LLAMACPP, SGLANG, TRTLLM, VLLM
from gpuwatch.sources.prometheus import FleetReading

SIGNAL = {s.key: s for s in (*promql.SIGNALS, *promql.CHART_SIGNALS)}


def test_each_dialect_s_query_names_only_its_own_families() -> None:
    running = promql.signal_query(SIGNAL["running"], [SGLANG])
    assert running is not None
    assert '__name__="sglang:num_running_reqs"' in running
    assert "vllm" not in running and '"sglang"' in running  # tagged with its dialect
    # vLLM's V1 name first, V0 after it: "first present wins" per series.
    kv = promql.signal_query(SIGNAL["kv"], [VLLM])
    assert kv is not None
    assert kv.index("vllm:kv_cache_usage_perc") < kv.index("vllm:gpu_cache_usage_perc")
    assert kv.startswith("label_replace((max by") and " or " in kv


def test_a_selector_with_labels_becomes_matchers() -> None:
    running = promql.signal_query(SIGNAL["running"], [TRTLLM])
    assert running is not None
    assert 'request_type="active"' in running


def test_replicas_count_once_and_quantiles_are_histogram_quantile_over_1m() -> None:
    ttft = promql.signal_query(SIGNAL["ttft_p99"], [VLLM])
    assert ttft is not None
    assert 'tp_rank=~"0|"' in ttft and 'pp_rank=~"0|"' in ttft
    assert "histogram_quantile(0.99, sum by (le, instance, node, model_name, model)" in ttft
    assert "vllm:time_to_first_token_seconds_bucket" in ttft and "[1m]" in ttft


def test_a_dialect_without_the_signal_is_left_out_of_the_one_query() -> None:
    # llama.cpp exports no TTFT histogram: the fleet's query is vLLM's alone.
    query = promql.signal_query(SIGNAL["ttft_p99"], [LLAMACPP, VLLM])
    assert query is not None and "llamacpp" not in query
    assert promql.signal_query(SIGNAL["ttft_p99"], [LLAMACPP]) is None


def test_one_instance_for_a_drill_down() -> None:
    query = promql.signal_query(SIGNAL["gen_tps"], [VLLM], instance='h:1"x')
    assert query is not None and 'instance="h:1\\"x"' in query


def test_discovery_from_names() -> None:
    found = promql.present_dialects(["up", "sglang:num_queue_reqs", "gpuwatch_gate_inflight"])
    assert [d.name for d in found] == ["sglang"]
    assert GATE not in promql.ENGINE_DIALECTS
    assert promql.has_gates(["gpuwatch_gate_inflight"])


def labels(instance: str, node: str | None = None, **extra: str) -> dict[str, str]:
    out = {"instance": instance, **extra}
    if node:
        out["node"] = node
    return out


def test_rows_carry_the_gate_of_their_node_and_a_lone_gate_is_its_own_row() -> None:
    answers: dict[str, promql.Vector] = {
        "running": [
            (labels("10.0.0.1:8000", model_name="m", gpuwatch_dialect="vllm"), 3.0),
            (labels("10.0.0.2:8000", model_name="m", gpuwatch_dialect="vllm"), 1.0),
        ]
    }
    gates: dict[str, promql.Vector] = {
        "gate_inflight": [(labels("10.0.0.1:9000"), 5.0), (labels("10.0.0.9:9000", "x"), 1.0)]
    }
    rows, _ = promql.rows_from(answers, gates)
    by_instance = {r.instance: r for r in rows}
    assert by_instance["10.0.0.1:8000"].gate == "10.0.0.1:9000"  # same host, no node label
    assert by_instance["10.0.0.1:8000"].values["gate_inflight"] == 5.0
    assert by_instance["10.0.0.2:8000"].gate is None
    lone = by_instance["10.0.0.9:9000"]
    assert lone.dialect == "gate" and lone.node == "x" and lone.gate == "10.0.0.9:9000"
    # Unknown is None, never 0.
    assert by_instance["10.0.0.2:8000"].values["ttft_p99"] is None


def test_nan_is_unknown_and_a_bad_sample_is_refused() -> None:
    assert promql.sample_value([1.0, "NaN"]) is None
    with pytest.raises(ValueError):
        promql.sample_value([1.0, 5])
    with pytest.raises(ValueError):
        promql.vector_of({"resultType": "matrix", "result": []})


def reading(rows: dict[str, dict[str, float | None]]) -> FleetReading:
    out = []
    for instance, values in rows.items():
        row = promql.FleetRow(instance, "m" if instance < "c" else "z", "vllm", instance)
        unknown: dict[str, float | None] = {s.key: None for s in promql.SIGNALS}
        row.values = unknown | values
        out.append(row)
    return FleetReading(0.0, out)


def test_the_sickest_first_then_filter_and_group() -> None:
    state = FleetState({"ttft_p99_s": 2.0, "kv_usage_high": 0.95})
    state.apply(
        reading(
            {
                "a": {"ttft_p99": 0.1, "kv": 0.2},
                "b": {"ttft_p99": 3.0},  # over the SLO: OVERLOADED
                "c": {"ttft_p99": 1.8},  # 90% of it: TIGHT
                "d": {},  # nothing to judge
            }
        )
    )
    assert [r.instance for r in state.view()] == ["b", "c", "a", "d"]
    assert [state.verdict(r).level for r in state.view()] == [
        "OVERLOADED",
        "TIGHT",
        "OK",
        "NO DATA",
    ]
    assert [r.instance for r in state.view("ttft_p99")] == ["b", "c", "a", "d"]
    assert [r.instance for r in state.view("ttft_p99", reverse=True)] == ["d", "a", "c", "b"]
    assert [r.instance for r in state.view("instance")] == ["a", "b", "c", "d"]
    assert [r.instance for r in state.view(text="C")] == ["c"]
    assert [r.model for r in state.view(by_model=True)] == ["m", "m", "z", "z"]
    lines = table_lines(state, state.view())
    assert lines[0].startswith("health") and "TTFT p99 1m" in lines[0]
    assert lines[1].startswith("OVERLOADED  b")


def test_a_failed_reading_keeps_the_last_rows_and_says_it_once() -> None:
    state = FleetState()
    state.apply(reading({"a": {"running": 1.0}}))
    for _ in range(3):
        state.apply(FleetReading(1.0, error="Prometheus http://p unreachable: ConnectError"))
    assert [r.instance for r in state.rows] == ["a"]
    assert sum("unreachable" in e.text for e in state.events) == 1
    state.apply(reading({"a": {"running": 2.0}}))
    assert state.events[-1].text == "Prometheus answers again"


def test_past_instant() -> None:
    assert past_instant("1700000000") == 1700000000.0
    assert past_instant("2026-11-30T08:15:00+00:00") == 1796026500.0
    with pytest.raises(argparse.ArgumentTypeError):
        past_instant("yesterday")
