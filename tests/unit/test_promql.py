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


REPLICAS = 'moe_ep_rank=~"0|",pp_rank=~"0|",tp_rank=~"0|"'
BY = "by (instance, node, model_name, model)"


def tagged(expr: str, dialect: str = "vllm") -> str:
    return f'label_replace({expr}, "gpuwatch_dialect", "{dialect}", "__name__", ".*")'


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("running", f'(sum {BY} ({{__name__="vllm:num_requests_running",{REPLICAS}}}))'),
        (
            "kv",
            f'(max {BY} ({{__name__="vllm:kv_cache_usage_perc",{REPLICAS}}})) or '
            f'(max {BY} ({{__name__="vllm:gpu_cache_usage_perc",{REPLICAS}}}))',
        ),
        (
            "preempt_per_min",
            f'(sum {BY} (rate({{__name__="vllm:num_preemptions_total",{REPLICAS}}}[1m])) * 60)',
        ),
        (
            "gen_tps",  # a scale of 1 is no scale at all
            f'(sum {BY} (rate({{__name__="vllm:generation_tokens_total",{REPLICAS}}}[1m])))',
        ),
        (
            "running_min",
            f'(sum {BY} (min_over_time({{__name__="vllm:num_requests_running",{REPLICAS}}}[1m])))',
        ),
        (
            "ttft_p99",
            "(histogram_quantile(0.99, sum by (le, instance, node, model_name, model) (rate("
            f'{{__name__="vllm:time_to_first_token_seconds_bucket",{REPLICAS}}}[1m]))))',
        ),
    ],
)
def test_each_kind_of_signal_is_its_exact_query(key: str, expected: str) -> None:
    """Pinned whole: Prometheus itself runs them in tests/functional/test_fleet.py."""
    assert promql.dialect_expr(VLLM, SIGNAL[key], "node") == tagged(expected)


def test_a_drill_down_names_its_instance_node_label_and_window() -> None:
    expr = promql.dialect_expr(LLAMACPP, SIGNAL["gen_tps"], "host", instance="a:1", window="5m")
    assert expr == tagged(
        "(sum by (instance, host, model_name, model) (rate({__name__="
        f'"llamacpp:tokens_predicted_total",instance="a:1",{REPLICAS}}}[5m])))',
        "llamacpp",
    )
    query = promql.signal_query(SIGNAL["ttft_p50"], [VLLM], "host", "a:1", "5m")
    assert query is not None
    assert query.startswith("label_replace((histogram_quantile(0.5, sum by (le, instance, host,")
    assert 'instance="a:1",' in query and "[5m]" in query
    both = promql.signal_query(SIGNAL["running"], [VLLM, SGLANG])
    assert both == " or ".join(
        e for d in (VLLM, SGLANG) if (e := promql.dialect_expr(d, SIGNAL["running"], "node"))
    )


def test_the_gate_s_queries() -> None:
    assert promql.gate_query("gate_inflight", "host") == (
        f'sum by (instance, host) ({{__name__="gpuwatch_gate_inflight",{REPLICAS}}})'
    )
    assert promql.gate_query("gate_refused_ps") == (
        f'sum by (instance, node) (rate({{__name__="gpuwatch_gate_rejected_total",{REPLICAS}}}[1m]))'
    )


def test_raw_samples_and_node_selectors_quote_what_they_match() -> None:
    assert promql.raw_samples_query(["b", "a.b", "a", "b"], 'i:1"', 0.2) == (
        '{__name__=~"a|a\\\\.b|b",instance="i:1\\""}[1s]'
    )
    assert promql.raw_samples_query(["a"], "i", 64.2).endswith("[65s]")
    assert promql.node_selector_query("X.*", "10.0.0.5", "host") == (
        '{__name__=~"X.*",host="10.0.0.5"} or '
        '{__name__=~"X.*",host="",instance=~"10\\\\.0\\\\.0\\\\.5(:[0-9]+)?"}'
    )
    assert promql.node_selector_query("X", "n").startswith('{__name__=~"X",node="n"} or ')


def test_a_row_s_dialect_names_its_engine_dialects() -> None:
    assert [d.name for d in promql.dialects_named("vllm")] == ["vllm"]
    assert len(promql.dialects_named("trtllm")) == 2  # two spellings of one stack
    assert promql.dialects_named("gate") == [] and promql.dialects_named("nope") == []


@pytest.mark.parametrize(
    ("labels", "node"),
    [
        ({"node": "gpu-7", "instance": "10.0.0.1:8000"}, "gpu-7"),
        ({"node": "", "instance": "10.0.0.1:8000"}, "10.0.0.1"),
        ({"instance": "[::1]:8000"}, "[::1]"),
        ({"instance": "host"}, "host"),  # no port
        ({"instance": "host:http"}, "host:http"),  # not a port
        ({}, ""),
    ],
)
def test_the_node_of_a_series(labels: dict[str, str], node: str) -> None:
    assert promql.node_of(labels, "node") == node


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ([], "answer is not an instant vector"),
        ({"resultType": "matrix", "result": []}, "answer is not an instant vector"),
        ({"resultType": "vector"}, "answer has no result list"),
        ({"resultType": "vector", "result": {}}, "answer has no result list"),
        ({"resultType": "vector", "result": [1]}, "a result has no metric labels"),
        ({"resultType": "vector", "result": [{"metric": []}]}, "a result has no metric labels"),
        ({"resultType": "vector", "result": [{"metric": {}}]}, 'a sample is not [time, "value"]'),
        (
            {"resultType": "vector", "result": [{"metric": {}, "value": [1, "2", 3]}]},
            'a sample is not [time, "value"]',
        ),
        (
            {"resultType": "vector", "result": [{"metric": {}, "value": (1, "2")}]},
            'a sample is not [time, "value"]',
        ),
    ],
)
def test_an_answer_that_is_not_a_vector_says_why(data: object, why: str) -> None:
    with pytest.raises(ValueError) as refused:
        promql.vector_of(data)
    assert str(refused.value) == why


def test_a_vector_s_labels_and_values() -> None:
    data = {
        "resultType": "vector",
        "result": [
            {"metric": {"instance": "a:1", "n": 5}, "value": [1.0, "2.5"]},
            {"metric": {}, "value": [1.0, "+Inf"]},
            {"metric": {}, "value": [1.0, "-Inf"]},
        ],
    }
    assert promql.vector_of(data) == [({"instance": "a:1", "n": "5"}, 2.5), ({}, None), ({}, None)]
    assert promql.vector_of({"resultType": "vector", "result": []}) == []


def test_rows_group_by_instance_model_and_dialect() -> None:
    answers: dict[str, promql.Vector] = {
        "running": [
            (labels("a:1", model_name="m", model="other", gpuwatch_dialect="vllm"), 3.0),
            (labels("a:1", model="n", gpuwatch_dialect="vllm"), 1.0),
            (labels("a:1", model_name="", gpuwatch_dialect="sglang"), 2.0),
            ({}, 9.0),
        ],
        "waiting": [(labels("a:1", model_name="m", gpuwatch_dialect="vllm"), 4.0)],
    }
    rows, gate_nodes = promql.rows_from(answers, {}, "node")
    assert gate_nodes == {}
    by_key = {r.key: r for r in rows}
    assert set(by_key) == {
        ("a:1", "m", "vllm"),
        ("a:1", "n", "vllm"),
        ("a:1", "", "sglang"),
        ("?", "", "?"),
    }
    m = by_key[("a:1", "m", "vllm")]
    assert (m.values["running"], m.values["waiting"], m.node) == (3.0, 4.0, "a")
    assert by_key[("a:1", "", "sglang")].model is None
    assert by_key[("?", "", "?")].node == ""  # no instance label: no node either
    assert m.to_json() == {
        "instance": "a:1",
        "model": "m",
        "dialect": "vllm",
        "node": "a",
        "gate": None,
        **m.values,
    }
    assert set(m.values) == {s.key for s in promql.SIGNALS}  # every column, None when unknown


def test_one_gate_a_node_the_first_by_instance_and_its_values_go_on_the_node_s_rows() -> None:
    answers: dict[str, promql.Vector] = {
        "running": [(labels("h:8000", model_name="m", gpuwatch_dialect="vllm"), 1.0)]
    }
    gates: dict[str, promql.Vector] = {
        "gate_inflight": [(labels("h:9001"), 7.0), (labels("h:9000"), 5.0)],
        "gate_queued": [(labels("h:9000"), 2.0), (labels("h:9001"), 0.0), ({}, 1.0)],
    }
    rows, gate_nodes = promql.rows_from(answers, gates)
    assert gate_nodes == {"h:9001": "h", "h:9000": "h", "?": ""}
    by_instance = {r.instance: r for r in rows}
    engine = by_instance["h:8000"]
    assert engine.gate == "h:9000"
    assert (engine.values["gate_inflight"], engine.values["gate_queued"]) == (5.0, 2.0)
    # The second gate on the node is not lost: a row of its own.
    other = by_instance["h:9001"]
    assert (other.dialect, other.gate, other.model, other.node) == ("gate", "h:9001", None, "h")
    assert other.values["gate_inflight"] == 7.0 and other.values["running"] is None
    assert by_instance["?"].values["gate_queued"] == 1.0
    assert [r.instance for r in rows] == ["h:8000", "h:9001", "?"]


def test_a_dialect_without_a_scalar_is_left_out_and_a_window_keeps_its_labels() -> None:
    assert promql.dialect_expr(VLLM, SIGNAL["steps_ps"], "node") is None  # not exported
    stall = promql.dialect_expr(TRTLLM, SIGNAL["running_min"], "node")
    assert stall is not None and 'request_type="active"' in stall
    assert stall.count("min_over_time(") == 2


def test_an_engine_row_is_on_the_node_its_label_names() -> None:
    answers: dict[str, promql.Vector] = {
        "running": [(labels("10.0.0.1:8000", "gpu-7", gpuwatch_dialect="vllm"), 1.0)]
    }
    (row,), _ = promql.rows_from(answers, {}, "node")
    assert row.node == "gpu-7"
