"""Prefiltered vs full prometheus_client parse of a generated vLLM V1 page.

4 models, each served by 2 data-parallel engines, every V1 histogram, as a big node shows it.

Run: python bench/parse.py   Prints both times, the ratio and whether the results match.
"""

from __future__ import annotations

import statistics
import time

from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.buckets import ITERATION_BUCKETS, ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS
from gpuwatch.sim.metrics import buckets_1_2_5
from gpuwatch.sources.dialects import index_samples, map_samples
from gpuwatch.sources.scrape import map_page

TOKENS = buckets_1_2_5(10_000)
ITER = ITERATION_BUCKETS
TTFT, ITL, REQ = TTFT_BUCKETS, ITL_BUCKETS, REQUEST_LATENCY_BUCKETS
HISTOGRAMS = {
    "time_to_first_token_seconds": TTFT,
    "inter_token_latency_seconds": ITL,
    "request_time_per_output_token_seconds": ITL,
    "e2e_request_latency_seconds": REQ,
    "request_queue_time_seconds": REQ,
    "request_inference_time_seconds": REQ,
    "request_prefill_time_seconds": REQ,
    "request_decode_time_seconds": REQ,
    "request_prompt_tokens": TOKENS,
    "request_generation_tokens": TOKENS,
    "request_max_num_generation_tokens": TOKENS,
    "request_params_max_tokens": TOKENS,
    "request_prefill_kv_computed_tokens": TOKENS,
    "iteration_tokens_total": ITER,
    "request_params_n": [1, 2, 5, 10, 20],
}
GAUGES = ["num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"]
COUNTERS = [
    "num_preemptions",
    "prompt_tokens",
    "generation_tokens",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prompt_tokens_cached",
    "prompt_tokens_recomputed",
    "external_prefix_cache_queries",
    "external_prefix_cache_hits",
    "mm_cache_queries",
    "mm_cache_hits",
    "spec_decode_num_drafts",
    "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens",
    "corrupted_requests",
]
# Families with one series per label value, as a V1 page has them.
LABELLED = {
    "engine_sleep_state": ("gauge", "sleep_state", ["awake", "weights_offloaded", "discard_all"]),
    "request_success_total": ("counter", "finished_reason", ["stop", "length", "abort", "error"]),
    "prompt_tokens_by_source_total": (
        "counter",
        "source",
        ["local_compute", "local_cache_hit", "external_kv_transfer"],
    ),
    "spec_decode_num_accepted_tokens_per_pos_total": ("counter", "position", ["0", "1", "2"]),
}
MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-14B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "google/gemma-2-9b-it",
]
SERIES = [(e, model) for model in MODELS for e in range(2)]


def page() -> str:
    out: list[str] = []
    for i in range(60):  # the process/python block every vLLM page starts with
        out += [
            f"# HELP python_gc_objects_collected_{i} x",
            f"# TYPE python_gc_objects_collected_{i} gauge",
            f'python_gc_objects_collected_{i}{{generation="0"}} {i * 7}.0',
        ]
    created = 1.7682643398898673e09
    for name in GAUGES:
        out += [f"# HELP vllm:{name} gauge", f"# TYPE vllm:{name} gauge"]
        for e, model in SERIES:
            out.append(f'vllm:{name}{{engine="{e}",model_name="{model}"}} {0.1 * (e + 1)}')
    for name in COUNTERS:
        out += [f"# HELP vllm:{name}_total counter", f"# TYPE vllm:{name}_total counter"]
        for e, model in SERIES:
            out.append(f'vllm:{name}_total{{engine="{e}",model_name="{model}"}} {1000.0 * (e + 1)}')
            out.append(f'vllm:{name}_created{{engine="{e}",model_name="{model}"}} {created}')
    out += [
        "# HELP vllm:cache_config_info info",
        "# TYPE vllm:cache_config_info gauge",
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",'
        'cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",'
        'is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="7281",'
        'num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",'
        'swap_space="4",swap_space_bytes="4294967296"} 1.0',
    ]
    for name, (kind, label, values) in LABELLED.items():
        out += [f"# HELP vllm:{name} {kind}", f"# TYPE vllm:{name} {kind}"]
        for e, model in SERIES:
            for v in values:
                labels = f'engine="{e}",{label}="{v}",model_name="{model}"'
                out.append(f"vllm:{name}{{{labels}}} 3.0")
                if kind == "counter":
                    out.append(f"vllm:{name.removesuffix('_total')}_created{{{labels}}} {created}")
    for name, bounds in HISTOGRAMS.items():
        out += [f"# HELP vllm:{name} histogram", f"# TYPE vllm:{name} histogram"]
        for e, model in SERIES:
            labels = f'engine="{e}",model_name="{model}"'
            cumulative = 0
            for k, le in enumerate([*bounds, "+Inf"]):
                cumulative += (k % 5) * (e + 1)
                out.append(f'vllm:{name}_bucket{{{labels},le="{le}"}} {float(cumulative)}')
            out.append(f"vllm:{name}_count{{{labels}}} {float(cumulative)}")
            out.append(f"vllm:{name}_sum{{{labels}}} {cumulative * 0.37}")
            out.append(f"vllm:{name}_created{{{labels}}} {created}")
    return "\n".join(out) + "\n"


def full_parse(text: str):  # type: ignore[no-untyped-def]
    families = list(text_string_to_metric_families(text))
    return map_samples("bench", index_samples(s for f in families for s in f.samples)).engines


def best_of(fn, text: str, runs: int = 15) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(text)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    text = page()
    fast = map_page("bench", text).engines
    slow = full_parse(text)
    t_fast = best_of(lambda t: map_page("bench", t), text)
    t_full = best_of(full_parse, text)
    print(
        f"page: {len(text) / 1024:.0f} KB, {text.count(chr(10))} lines, {len(MODELS)} models, "
        f"{len(HISTOGRAMS)} histograms"
    )
    print(f"full parse + map:      {t_full * 1000:8.2f} ms (median of 15)")
    print(f"prefiltered + map:     {t_fast * 1000:8.2f} ms")
    print(f"speed-up:              {t_full / t_fast:8.2f}x (goal >= 4x)")
    print(f"identical results:     {fast == slow} ({len(fast)} engines)")
    if fast != slow:
        raise SystemExit("results differ")


if __name__ == "__main__":
    main()
