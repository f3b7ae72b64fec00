"""Every real scrape in tests/fixtures/metrics is detected as its dialect with the values in the file."""

from __future__ import annotations

import math

import pytest
from prometheus_client.samples import Sample

from gpuwatch.fmt import clip
from gpuwatch.model import EngineSnapshot
from gpuwatch.snapshot import latency_summary
from gpuwatch.sources import dialects
from gpuwatch.sources.scrape import ParseCache, map_page
from tests.conftest import FIXTURES, fixture_text


def engines(name: str) -> list[EngineSnapshot]:
    result = map_page(name, fixture_text(name))
    assert result.error is None, result.error
    return result.engines


def only(name: str) -> EngineSnapshot:
    found = engines(name)
    assert len(found) == 1, found
    return found[0]


def test_vllm_v0() -> None:
    e = only("vllm-1.prom")
    assert (e.dialect, e.model) == ("vllm", "facebook/opt-125m")
    assert (e.running, e.waiting, e.kv_cache_usage) == (0, 0, 0)
    assert (e.prompt_tokens_total, e.generation_tokens_total, e.preemptions_total) == (5, 7, 0)
    assert e.prefix_cache_hit_rate is None  # V0 page without prefix caching: unknown, not 0
    # V0's time_per_output_token is the ITL histogram; 6 gaps for 7 tokens.
    assert e.histograms["itl"].count == 6
    assert e.histograms["ttft"].count == 1 and e.histograms["e2e"].count == 1


def test_vllm_hand_merged_v1_families() -> None:
    e = only("vllm-2.prom")
    assert (e.prefix_cache_hits_total, e.prefix_cache_queries_total) == (64, 117)
    assert e.prefix_cache_hit_rate == pytest.approx(64 / 117)
    assert e.histograms["itl"].count == 144  # V1 inter_token_latency wins over V0 TPOT
    assert e.histograms["queue"].count == 6


def test_vllm_v1_real_scrape_with_engine_label() -> None:
    e = only("vllm-3.prom")
    assert (e.model, e.running, e.waiting, e.kv_cache_usage) == ("Qwen/Qwen3-0.6B", 0, 0, 0)
    assert (e.prompt_tokens_total, e.generation_tokens_total) == (66, 600)
    assert (e.prefix_cache_hits_total, e.prefix_cache_queries_total) == (0, 0)
    assert e.prefix_cache_hit_rate is None  # 0 of 0 queries: unknown
    ttft = e.histograms["ttft"]
    assert ttft.count == 2 and len(ttft.buckets) == 23
    assert e.histograms["itl"].count == 598


def test_vllm_two_models_in_one_family() -> None:
    found = {e.model: e for e in engines("vllm-4.prom")}
    assert set(found) == {"sql-lora", "meta-llama/Llama-2-7b-hf"}
    assert latency_summary(found["sql-lora"].histograms["ttft"])["count"] == 1
    # The base model's series is cut before +Inf: quantiles unknown, with a warning.
    assert latency_summary(found["meta-llama/Llama-2-7b-hf"].histograms["ttft"])["p50"] is None
    warnings = map_page("v4", fixture_text("vllm-4.prom")).warnings
    assert warnings == [
        "vllm:time_to_first_token_seconds has no +Inf bucket: ttft quantiles unknown"
    ]


def test_ray_serve_reexport() -> None:
    e = only("rayserve-vllm-1.prom")
    assert (e.dialect, e.model) == ("ray", "neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8")
    assert e.kv_cache_usage == pytest.approx(5.882698982295764e-05)
    assert (e.prompt_tokens_total, e.generation_tokens_total) == (58, 300)
    assert e.prefix_cache_hit_rate is None  # V0 reports -1 for "not tracked"
    assert e.histograms["itl"].count == 299


def test_sglang_doc_scrape() -> None:
    e = only("sglang-1.prom")
    assert (e.dialect, e.running, e.waiting) == ("sglang", 162, 2826)
    assert e.kv_cache_usage == 0.28 and e.kv_tokens_used == 123859
    assert e.prefix_cache_hit_rate == pytest.approx(0.007507552643049313)
    assert (e.prompt_tokens_total, e.generation_tokens_total) == (8128902, 7557572)
    assert e.histograms["ttft"].count == 11008
    assert e.histograms["e2e"].count == 11228


def test_sglang_modern_names_with_tp_rank() -> None:
    e = only("sglang-2.prom")
    assert (e.model, e.kv_cache_usage, e.kv_tokens_used, e.kv_tokens_total) == (
        "facebook/opt-125m",
        0.25,
        37,
        430839,
    )
    assert (e.prefix_cache_hit_rate, e.generation_tokens_total) == (0.2, 32)
    assert latency_summary(e.histograms["queue"])["count"] == 1
    assert e.histograms["itl"].count == 31


def test_tgi() -> None:
    e = only("tgi-1.prom")
    assert (e.dialect, e.model, e.running, e.waiting) == ("tgi", None, 0, 0)
    assert e.prompt_tokens_total == 662  # from the input-length histogram's sum
    assert e.generation_tokens_total is None  # that family is past the excerpt's end


@pytest.mark.parametrize(
    ("name", "running", "waiting", "prompt", "generated"),
    [
        ("llamacpp-1.prom", None, None, 143, 673),
        ("llamacpp-2.prom", 0, 0, None, None),
        ("llamacpp-3.prom", 2, 4, 56, 0),
    ],
)
def test_llamacpp(
    name: str, running: float, waiting: float, prompt: float, generated: float
) -> None:
    e = only(name)
    assert (e.dialect, e.model) == ("llamacpp", None)
    assert (e.running, e.waiting) == (running, waiting)
    assert (e.prompt_tokens_total, e.generation_tokens_total) == (prompt, generated)
    assert e.kv_cache_usage is None  # dropped upstream; never a fake 0


def test_llamacpp_prefix_cache_queries_include_cached_tokens() -> None:
    e = only("llamacpp-3.prom")
    assert (e.prefix_cache_hits_total, e.prefix_cache_queries_total) == (0, 56)
    assert e.prefix_cache_hit_rate == 0


def test_triton_trtllm_backend() -> None:
    e = only("triton-trtllm-1.prom")
    assert (e.dialect, e.model, e.running, e.waiting) == ("trtllm", "tensorrt_llm", 0, 1)
    assert (e.kv_cache_usage, e.kv_blocks_used, e.kv_blocks_total) == (0.4875, 1, 6239)


def test_triton_base_metrics() -> None:
    e = only("triton-trtllm-2.prom")
    assert (e.dialect, e.model, e.waiting, e.running) == ("trtllm", "tensorrt_llm", 0, None)


def test_dynamo_frontend() -> None:
    e = only("dynamo-1.prom")
    assert (e.dialect, e.model, e.running, e.waiting) == ("dynamo", "qwen/qwen3-0.6b", 0, 0)
    assert (e.prompt_tokens_total, e.generation_tokens_total) == (33, 300)
    assert e.histograms["itl"].count == 299
    assert e.histograms["ttft"].buckets[0] == (0.0, 0)  # Rust exporter's le="0" first bucket


def _page(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def test_engines_are_summed_and_ratios_maxed() -> None:
    page = _page(
        [
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="m"} 3',
            'vllm:num_requests_running{engine="1",model_name="m"} 4',
            "# TYPE vllm:kv_cache_usage_perc gauge",
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2',
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7',
            "# TYPE vllm:generation_tokens counter",
            'vllm:generation_tokens_total{engine="0",model_name="m"} 100',
            'vllm:generation_tokens_total{engine="1",model_name="m"} 50',
            'vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9',
            "# TYPE vllm:time_to_first_token_seconds histogram",
            'vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} 2',
            'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2',
            'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2',
            'vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0",model_name="m"} 0',
            'vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 2',
            'vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 2',
        ]
    )
    [e] = map_page("p", page).engines
    assert (e.running, e.kv_cache_usage, e.generation_tokens_total) == (7, 0.7, 150)
    assert e.histograms["ttft"].buckets == ((1.0, 2), (math.inf, 4))
    assert e.histograms["ttft"].count == 4


def test_tp_rank_collapsed_to_rank_zero_or_max() -> None:
    page = _page(
        [
            "# TYPE sglang:num_running_reqs gauge",
            'sglang:num_running_reqs{model_name="m",tp_rank="0"} 5',
            'sglang:num_running_reqs{model_name="m",tp_rank="1"} 5',
            'sglang:num_running_reqs{model_name="m",tp_rank="2"} 6',
            "# TYPE sglang:num_queue_reqs gauge",
            'sglang:num_queue_reqs{model_name="m",tp_rank="3"} 2',
            'sglang:num_queue_reqs{model_name="m",tp_rank="1"} 9',
            "# TYPE sglang:generation_tokens_total counter",
            'sglang:generation_tokens_total{dp_rank="0",model_name="m",tp_rank="0"} 10',
            'sglang:generation_tokens_total{dp_rank="0",model_name="m",tp_rank="1"} 10',
            'sglang:generation_tokens_total{dp_rank="1",model_name="m",tp_rank="0"} 30',
            'sglang:generation_tokens_total{dp_rank="1",model_name="m",tp_rank="1"} 30',
        ]
    )
    [e] = map_page("p", page).engines
    assert e.running == 5  # rank 0, not 16
    assert e.waiting == 9  # no rank 0: the max
    assert e.generation_tokens_total == 40  # dp ranks summed, tp ranks collapsed


def test_gate_lanes_are_summed() -> None:
    page = _page(
        [
            "# TYPE gpuwatch_gate_inflight gauge",
            'gpuwatch_gate_inflight{lane="chat"} 6',
            'gpuwatch_gate_inflight{lane="embed"} 1',
            "# TYPE gpuwatch_gate_queued gauge",
            'gpuwatch_gate_queued{lane="chat"} 12',
        ]
    )
    [e] = map_page("gate", page).engines
    assert (e.dialect, e.running, e.waiting) == ("gate", 7, 12)


def test_unknown_page_names_its_first_families() -> None:
    page = _page(["# TYPE foo_total counter", "foo_total 1", "bar 2", "baz 3"])
    result = map_page("p", page)
    assert result.engines == []
    assert result.error == "no known serving metrics (first families: foo_total, bar, baz)"


def test_nan_and_inf_values_become_unknown_with_a_warning() -> None:
    page = _page(
        [
            'vllm:num_requests_running{model_name="m"} NaN',
            'vllm:num_requests_waiting{model_name="m"} +Inf',
            'vllm:kv_cache_usage_perc{model_name="m"} 0.5',
        ]
    )
    result = map_page("p", page)
    [e] = result.engines
    assert (e.running, e.waiting, e.kv_cache_usage) == (None, None, 0.5)
    assert result.warnings == [
        "vllm:num_requests_running is nan: shown as unknown",
        "vllm:num_requests_waiting is inf: shown as unknown",
    ]


def test_a_derived_value_that_overflows_is_unknown_with_a_warning() -> None:
    page = (
        'vllm:num_requests_running{model_name="m"} 1\n'
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="1e308"} 1\n'
    )
    result = map_page("page", page)
    [engine] = result.engines
    assert engine.kv_blocks_total == 1e308 and engine.kv_tokens_total is None
    assert result.warnings == ["kv_tokens_total is inf: shown as unknown"]


def test_the_same_problem_on_every_model_is_one_warning() -> None:
    page = "".join(f'vllm:num_requests_waiting{{model_name="m{i}"}} NaN\n' for i in range(5))
    result = map_page("page", page)
    assert len(result.engines) == 5
    assert result.warnings == ["vllm:num_requests_waiting is nan: shown as unknown"]


def test_an_le_label_on_a_gauge_is_an_ordinary_label() -> None:
    """Only buckets have bounds: a gauge with le="..." once raised KeyError in the mapping."""
    page = (
        'vllm:num_requests_running{model_name="m",le="x"} 2\n'
        'vllm:num_requests_running{model_name="m",le="y"} 3\n'
    )
    result = map_page("page", page)
    assert result.error is None and result.engines[0].running == 5


_Mapped = tuple[list[EngineSnapshot], list[str]]  # a page's engines and warnings


def _mapped_both_ways(page: str, cache: ParseCache | None = None) -> tuple[_Mapped, _Mapped]:
    """``map_page`` of ``page`` with each sample's grouping remembered (as shipped) and worked
    out afresh from its labels (as before the memo)."""
    memo = dialects._group_of
    remembered = map_page("p", page, cache=cache)
    dialects._group_of = memo.__wrapped__  # type: ignore[assignment]
    try:
        fresh = map_page("p", page)
    finally:
        dialects._group_of = memo
    return (remembered.engines, remembered.warnings), (fresh.engines, fresh.warnings)


@pytest.mark.parametrize(
    "name", sorted(p.name for p in FIXTURES.glob("*.prom")), ids=lambda name: name
)
def test_remembered_label_grouping_maps_every_fixture_as_grouping_afresh(name: str) -> None:
    text = fixture_text(name)
    remembered, fresh = _mapped_both_ways(text)
    assert remembered == fresh
    # A second scrape of the same series reads every grouping from the memo.
    misses = dialects._group_of.cache_info().misses
    assert _mapped_both_ways(text)[0] == remembered
    assert dialects._group_of.cache_info().misses == misses


def test_remembered_label_grouping_follows_values_and_label_order() -> None:
    """The memo holds only what labels decide: new values on the same series, and the same
    labels written in another order, map as a fresh grouping does."""
    lines = [
        "# TYPE sglang:num_running_reqs gauge",
        'sglang:num_running_reqs{model_name="m",tp_rank="0"} {a}',
        'sglang:num_running_reqs{tp_rank="1",model_name="m"} {b}',
        "# TYPE sglang:generation_tokens_total counter",
        'sglang:generation_tokens_total{dp_rank="0",model_name="m",tp_rank="0"} {a}',
        'sglang:generation_tokens_total{model_name="m",tp_rank="0",dp_rank="1"} {b}',
        'sglang:generation_tokens_total{dp_rank="1",model_name="n",tp_rank="1"} {a}',
    ]
    for a, b in ((5, 9), (7, 2), (7, 2), (11, 3)):
        page = _page([line.replace("{a}", str(a)).replace("{b}", str(b)) for line in lines])
        remembered, fresh = _mapped_both_ways(page)
        assert remembered == fresh
        m = next(e for e in remembered[0] if e.model == "m")
        assert (m.running, m.generation_tokens_total) == (a, a + b)


def test_a_polled_series_maps_as_a_fresh_grouping_every_scrape() -> None:
    """Through a source's parse cache (a changed value gets a new Sample on the same labels),
    the remembered grouping maps every scrape as a grouping worked out afresh does."""
    text = fixture_text("vllm-1.prom")
    cache = ParseCache()
    for step in range(4):
        # every sample value moved (a counter or bucket going up, a gauge changing)
        page = "\n".join(
            line if line[:1] in ("#", "") else f"{line.rsplit(' ', 1)[0]} {float(step * 3 + 1)}"
            for line in text.splitlines()
        )
        remembered, fresh = _mapped_both_ways(page, cache)
        assert remembered == fresh
        assert remembered[0]  # engines were mapped


def test_the_cache_info_labels_one_engine_at_a_time() -> None:
    """Pools add up over engines (two data-parallel ranks: twice the blocks); the block size is
    the same for all (the largest, never a sum); replicas other than rank 0 count once; a label
    that is not a number is skipped, and one that is infinite is unknown with a warning."""
    page = (
        'vllm:num_requests_running{model_name="m"} 1\n'
        'vllm:cache_config_info{model_name="m",dp_rank="0",block_size="16",num_gpu_blocks="100"} 1\n'
        'vllm:cache_config_info{model_name="m",dp_rank="1",block_size="16",num_gpu_blocks="50"} 1\n'
        'vllm:cache_config_info{model_name="m",dp_rank="2",tp_rank="1",block_size="16",num_gpu_blocks="999"} 1\n'
    )
    [engine] = map_page("page", page).engines
    assert (engine.kv_blocks_total, engine.kv_block_size) == (150, 16)
    odd = (
        'vllm:num_requests_running{model_name="m"} 1\n'
        'vllm:cache_config_info{model_name="m",dp_rank="0",block_size="big",num_gpu_blocks="+Inf"} 1\n'
        'vllm:cache_config_info{model_name="m",dp_rank="1",block_size="32",num_gpu_blocks="7"} 1\n'
        'vllm:cache_config_info{model_name="m",dp_rank="2",block_size="32",num_gpu_blocks="8"} 1\n'
    )
    result = map_page("page", odd)
    [engine] = result.engines
    assert (engine.kv_blocks_total, engine.kv_block_size) == (15, 32)
    assert result.warnings == ['vllm:cache_config_info{num_gpu_blocks="+Inf"}: shown as unknown']


@pytest.mark.parametrize("le", ["x", "NaN", "-Inf", "1" * 50])
def test_a_histogram_with_a_bound_that_is_not_a_number_is_skipped_with_a_warning(le: str) -> None:
    page = (
        'vllm:num_requests_running{model_name="m"} 1\n'
        f'vllm:time_to_first_token_seconds_bucket{{model_name="m",le="{le}"}} 1\n'
        'vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 2\n'
        'vllm:time_to_first_token_seconds_count{model_name="m"} 2\n'
    )
    if le == "1" * 50:  # a number after all: read, not refused
        assert "ttft" in map_page("page", page).engines[0].histograms
        return
    result = map_page("page", page)
    assert "ttft" not in result.engines[0].histograms
    assert result.warnings == [
        f'vllm:time_to_first_token_seconds has a bucket bound le="{le}" that is not a number: '
        "skipped"
    ]


def test_a_long_bad_bound_is_clipped_in_the_warning() -> None:
    le = "y" * 60
    page = (
        'vllm:num_requests_running{model_name="m"} 1\n'
        f'vllm:time_to_first_token_seconds_bucket{{model_name="m",le="{le}"}} 1\n'
        'vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 2\n'
    )
    [warning] = map_page("page", page).warnings
    assert f'le="{clip(le, 40)}"' in warning and clip(le, 40) != clip(le, 41)


def _dialect(name: str) -> dialects.Dialect:
    return next(d for d in dialects.DIALECTS if d.name == name)


def test_a_selector_with_several_labels_matches_only_all_of_them() -> None:
    sel = dialects.Selector.parse('m{kind = "a", rank="0"}')
    assert sel == dialects.Selector("m", (("kind", "a"), ("rank", "0")))
    assert sel.matches({"kind": "a", "rank": "0", "other": "x"})
    assert not sel.matches({"kind": "a"}) and not sel.matches({"kind": "b", "rank": "0"})
    assert dialects.Selector.parse("m") == dialects.Selector("m")


def test_created_samples_are_not_indexed() -> None:
    index = dialects.index_samples([Sample("a_total", {}, 1.0), Sample("a_created", {}, 2.0)])
    assert list(index) == ["a_total"]


def test_a_bucket_count_not_finite_voids_the_buckets_and_a_sum_or_count_is_unknown() -> None:
    page = _page(
        [
            'vllm:num_requests_running{model_name="m"} 1',
            'vllm:time_to_first_token_seconds_bucket{model_name="m",le="1.0"} +Inf',
            'vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 2',
            'vllm:time_to_first_token_seconds_sum{model_name="m"} NaN',
            'vllm:time_to_first_token_seconds_count{model_name="m"} 2',
            'vllm:e2e_request_latency_seconds_count{model_name="m"} +Inf',
            'vllm:e2e_request_latency_seconds_sum{model_name="m"} 4',
        ]
    )
    result = map_page("p", page)
    [e] = result.engines
    ttft = e.histograms["ttft"]
    assert (ttft.buckets, ttft.sum, ttft.count) == ((), None, 2)
    # A family with a count and no buckets: its count and sum, no quantiles and no warning
    # about a missing +Inf bucket (there are no buckets to lack one).
    e2e = e.histograms["e2e"]
    assert (e2e.buckets, e2e.sum, e2e.count) == ((), 4, None)
    assert result.warnings == [
        "vllm:time_to_first_token_seconds_bucket has a count of inf: quantiles unknown",
        "vllm:time_to_first_token_seconds_sum is nan: shown as unknown",
        "vllm:e2e_request_latency_seconds_count is inf: shown as unknown",
    ]


def test_a_long_label_value_is_clipped_in_its_warning() -> None:
    value = "1e" + "9" * 30  # a number, too large to be finite
    page = (
        'vllm:num_requests_running{model_name="m"} 1\n'
        f'vllm:cache_config_info{{block_size="{value}"}} 1\n'
    )
    [warning] = map_page("p", page).warnings
    assert warning == f'vllm:cache_config_info{{block_size="{clip(value, 20)}"}}: shown as unknown'
    assert clip(value, 20) != clip(value, 21)


def test_derived_values_from_what_the_engine_reports() -> None:
    llama = _dialect("llamacpp")
    snap = EngineSnapshot("s", "llamacpp", None)
    snap.prefix_cache_hits_total, snap.prompt_tokens_total = 30.0, 90.0
    snap.kv_blocks_total, snap.kv_block_size, snap.kv_blocks_used = 10.0, 16.0, 4.0
    dialects._derive(llama, snap)
    assert snap.prefix_cache_queries_total == 120.0  # cached tokens are prompt tokens too
    assert snap.prefix_cache_hit_rate == 0.25
    assert (snap.kv_tokens_total, snap.kv_cache_usage) == (160.0, 0.4)
    assert snap.kv_tokens_used == 0.4 * 160.0
    # What the engine reports itself is kept; a part missing derives nothing.
    own = EngineSnapshot("s", "llamacpp", None)
    own.prefix_cache_hits_total, own.prefix_cache_queries_total = 1.0, 4.0
    own.prefix_cache_hit_rate, own.kv_cache_usage = 0.5, 0.9
    own.kv_tokens_used, own.kv_tokens_total, own.kv_blocks_used = 5.0, 50.0, 1.0
    own.kv_blocks_total, own.kv_block_size = 2.0, 8.0
    dialects._derive(llama, own)
    assert (own.prefix_cache_queries_total, own.prefix_cache_hit_rate) == (4.0, 0.5)
    assert (own.kv_cache_usage, own.kv_tokens_used, own.kv_tokens_total) == (0.9, 5.0, 50.0)
    part = EngineSnapshot("s", "llamacpp", None)
    part.prefix_cache_hits_total = 3.0
    part.kv_tokens_used, part.kv_tokens_total = 8.0, 32.0  # no blocks: usage from tokens
    dialects._derive(llama, part)
    assert part.prefix_cache_queries_total is None and part.prefix_cache_hit_rate is None
    assert part.kv_cache_usage == 0.25
    zero = EngineSnapshot("s", "vllm", None)
    zero.prefix_cache_hits_total, zero.prefix_cache_queries_total = 0.0, 0.0
    zero.kv_blocks_used, zero.kv_blocks_total, zero.kv_block_size = 0.0, 0.0, 16.0
    dialects._derive(_dialect("vllm"), zero)  # nothing queried yet, no blocks: unknown, not 0
    assert zero.prefix_cache_hit_rate is None and zero.kv_cache_usage is None
    assert zero.kv_tokens_total is None


def test_selectors_keep_what_their_values_hold() -> None:
    parse = dialects.Selector.parse
    assert parse('m{k="a=b"}') == dialects.Selector("m", (("k", "a=b"),))
    assert parse('m{k="XaX"}').labels == (("k", "XaX"),)
    assert parse("m{k=aX}").labels == (("k", "aX"),)
    vllm = _dialect("vllm")
    names = dialects.sample_names(vllm)
    assert {"vllm:time_to_first_token_seconds_bucket", "vllm:cache_config_info"} <= names
    assert "vllm:num_requests_running" in names


def test_a_histogram_without_its_inf_bucket_is_named_and_the_sums_add_up() -> None:
    page = _page(
        [
            'vllm:num_requests_running{model_name="m"} 1',
            'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="0.5"} 1',
            'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="1.0"} 2',
            'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="2.0"} 3',
            'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 3',
            'vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 4',
            'vllm:e2e_request_latency_seconds_bucket{model_name="m",le="0.5"} 1',
            'vllm:e2e_request_latency_seconds_bucket{model_name="m",le="1.0"} 1',
            'vllm:e2e_request_latency_seconds_bucket{model_name="m",le="+Inf"} 1',
        ]
    )
    result = map_page("p", page)
    [e] = result.engines
    assert e.source == "p" and e.histograms["ttft"].sum == 7  # two engines' sums add up
    assert result.warnings == [
        "vllm:time_to_first_token_seconds has no +Inf bucket: ttft quantiles unknown"
    ]


def test_the_next_itl_family_is_read_when_the_first_is_unusable() -> None:
    page = _page(
        [
            'vllm:num_requests_running{model_name="m"} 1',
            'vllm:inter_token_latency_seconds_bucket{model_name="m",le="x"} 1',
            'vllm:time_per_output_token_seconds_bucket{model_name="m",le="+Inf"} 5',
            'vllm:time_per_output_token_seconds_count{model_name="m"} 5',
        ]
    )
    [e] = map_page("p", page).engines
    assert e.histograms["itl"].count == 5


def test_per_model_label_values_and_process_wide_ones() -> None:
    page = _page(
        [
            'vllm:num_requests_running{model_name="a"} 1',
            'vllm:num_requests_running{model_name="b"} 2',
            'vllm:cache_config_info{model_name="a",num_gpu_blocks="10",tp_rank="1"} 1',
            'vllm:cache_config_info{model_name="a",num_gpu_blocks="20",tp_rank="0"} 1',
            'vllm:cache_config_info{num_gpu_blocks="99",block_size="16"} 1',
            'sglang:num_running_reqs{model_name="c"} 3',
        ]
    )
    found = {e.model: e for e in map_page("p", page).engines}
    assert set(found) == {"a", "b", "c"}  # two dialects' engines, both kept
    a, b = found["a"], found["b"]
    assert a.kv_blocks_total == 20  # its own rank 0's, not the process-wide value
    assert b.kv_blocks_total == 99 and a.kv_block_size == b.kv_block_size == 16
    assert found["c"].dialect == "sglang"


def test_a_dialect_without_derived_queries_derives_none() -> None:
    snap = EngineSnapshot("s", "vllm", None)
    snap.prefix_cache_hits_total = 3.0
    dialects._derive(_dialect("vllm"), snap)
    assert snap.prefix_cache_queries_total is None and snap.prefix_cache_hit_rate is None
