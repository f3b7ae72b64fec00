"""Parse cost per scrape of a generated vLLM V1 page polled at 1 Hz under steady load.

4 models, each served by 2 data-parallel engines, every V1 histogram, as a big node shows it;
``SteadyLoad`` moves its numbers from one scrape to the next as a loaded server's do.

Run: python bench/parse.py   Prints, side by side, the full parse, the prefiltered parse (before)
and the prefiltered parse with a per-source parse cache (after), parse alone and parse + map, in
ms per scrape (median over 25 scrapes), the share of the page each cache parses again, and
whether the results match a full parse.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.bounds import DEFAULT_MAX_ENGINES
from gpuwatch.buckets import ITERATION_BUCKETS, ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS
from gpuwatch.model import EngineSnapshot
from gpuwatch.sim.metrics import buckets_1_2_5
from gpuwatch.sources import dialects
from gpuwatch.sources.dialects import MapResult, index_samples, map_samples
from gpuwatch.sources.scrape import (
    WANTED,
    ParseCache,
    _line_name,
    _model_label,
    map_page,
    parse_families,
    prefilter,
)

TOKENS = buckets_1_2_5(10_000)
ITER = ITERATION_BUCKETS
TTFT, ITL, REQ = TTFT_BUCKETS, ITL_BUCKETS, REQUEST_LATENCY_BUCKETS
HISTOGRAMS: dict[str, Sequence[float]] = {
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
SCRAPES = 25


# How a line moves under steady load, scrape to scrape (1 Hz): see ``SteadyLoad.tick``.
STATIC, BUSY, SOMETIMES, RARE = "static", "busy", "sometimes", "rare"
BUSY_COUNTERS = {
    "prompt_tokens",
    "generation_tokens",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prompt_tokens_cached",
    "prompt_tokens_recomputed",
}
BUSY_LABELS = {"stop", "local_compute", "local_cache_hit"}
# Histograms observed once per token or per engine step: many observations a second.
PER_TOKEN = {"inter_token_latency_seconds", "iteration_tokens_total"}


@dataclass
class Line:
    """A sample line of the page: what it says before the value, the value, how it moves
    (STATIC, BUSY, ...; a bucket's index, "count" or "sum" in a histogram) and the histogram
    (name, engine, model) it belongs to."""

    head: str
    value: float
    how: str | int
    group: tuple[str, int, str] | None


def page_lines(series: Sequence[tuple[int, str]] = SERIES) -> list[str | Line]:
    """The page as comment lines (str) and sample lines [head, value, how it moves, group],
    for ``series``: (engine, model) pairs."""
    out: list[str | Line] = []
    for i in range(60):  # the process/python block every vLLM page starts with
        out += [
            f"# HELP python_gc_objects_collected_{i} x",
            f"# TYPE python_gc_objects_collected_{i} gauge",
            Line(
                f'python_gc_objects_collected_{i}{{generation="0"}}',
                i * 7.0,
                BUSY if i % 12 == 0 else STATIC,
                None,
            ),
        ]
    created = 1.7682643398898673e09
    for name in GAUGES:
        out += [f"# HELP vllm:{name} gauge", f"# TYPE vllm:{name} gauge"]
        for e, model in series:
            how = BUSY if name == "kv_cache_usage_perc" else SOMETIMES
            out.append(
                Line(f'vllm:{name}{{engine="{e}",model_name="{model}"}}', 0.1 * (e + 1), how, None)
            )
    for name in COUNTERS:
        out += [f"# HELP vllm:{name}_total counter", f"# TYPE vllm:{name}_total counter"]
        how = BUSY if name in BUSY_COUNTERS else RARE if name == "num_preemptions" else STATIC
        for e, model in series:
            labels = f'engine="{e}",model_name="{model}"'
            out.append(Line(f"vllm:{name}_total{{{labels}}}", 1000.0 * (e + 1), how, None))
            out.append(Line(f"vllm:{name}_created{{{labels}}}", created, STATIC, None))
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
        for e, model in series:
            for v in values:
                labels = f'engine="{e}",{label}="{v}",model_name="{model}"'
                how = BUSY if v in BUSY_LABELS else SOMETIMES if v == "length" else STATIC
                out.append(
                    Line(
                        f"vllm:{name}{{{labels}}}", 3.0, how if kind == "counter" else STATIC, None
                    )
                )
                if kind == "counter":
                    created_name = f"vllm:{name.removesuffix('_total')}_created"
                    out.append(Line(f"{created_name}{{{labels}}}", created, STATIC, None))
    for name, bounds in HISTOGRAMS.items():
        out += [f"# HELP vllm:{name} histogram", f"# TYPE vllm:{name} histogram"]
        for e, model in series:
            labels = f'engine="{e}",model_name="{model}"'
            group = (name, e, model)
            cumulative = 0
            for k, le in enumerate([*bounds, "+Inf"]):
                cumulative += (k % 5) * (e + 1)
                out.append(
                    Line(f'vllm:{name}_bucket{{{labels},le="{le}"}}', float(cumulative), k, group)
                )
            out.append(Line(f"vllm:{name}_count{{{labels}}}", float(cumulative), "count", group))
            out.append(Line(f"vllm:{name}_sum{{{labels}}}", cumulative * 0.37, "sum", group))
            out.append(Line(f"vllm:{name}_created{{{labels}}}", created, STATIC, None))
    return out


def render(lines: list[str | Line]) -> str:
    return "".join(f"{x}\n" if isinstance(x, str) else f"{x.head} {x.value!r}\n" for x in lines)


def page(series: Sequence[tuple[int, str]] = SERIES) -> str:
    return render(page_lines(series))


class SteadyLoad:
    """A page second after second under steady load: each engine finishes a few requests a
    second and emits tokens all the time. Token counters, busy gauges and the histograms that
    got observations move (every cumulative bucket at or above an observation's); ``_created``,
    info, config, unused features' counters and the python_gc block stay."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.lines = page_lines()
        self.groups: dict[tuple[str, int, str], list[Line]] = {}
        for x in self.lines:
            if not isinstance(x, str) and x.group is not None:
                self.groups.setdefault(x.group, []).append(x)

    def tick(self) -> str:
        rng = self.rng
        for x in self.lines:
            if isinstance(x, str) or x.group is not None:
                continue
            how = x.how
            if (
                how == BUSY
                or (how == SOMETIMES and rng.random() < 0.5)
                or (how == RARE and rng.random() < 0.05)
            ):
                x.value = (
                    round(x.value + rng.uniform(1, 500), 0)
                    if x.value >= 1
                    else round(rng.random(), 4)
                )
        for (name, _e, _model), lines in self.groups.items():
            buckets = [x for x in lines if isinstance(x.how, int)]
            per_token = name in PER_TOKEN
            observed = rng.randint(50, 300) if per_token else rng.choice([0, 1, 2, 3, 4, 5])
            if not observed:
                continue
            if name == "request_params_n":
                lowest = 0  # every request asks for n=1
            else:  # observations spread over the middle of the bucket range
                lowest = int(rng.triangular(0, len(buckets) - 1, len(buckets) * 0.3))
            for x in lines:
                if isinstance(x.how, int) and x.how >= lowest:
                    x.value += float(observed * (1 + (x.how - lowest) // 3))
                elif x.how == "count":
                    x.value += float(observed)
                elif x.how == "sum":
                    x.value = round(x.value + observed * rng.uniform(0.01, 2.0), 6)
        return render(self.lines)


def full_parse(text: str) -> list[EngineSnapshot]:
    families = list(text_string_to_metric_families(text))
    return map_samples("bench", index_samples(s for f in families for s in f.samples)).engines


def per_scrape(fn: Callable[[str], object], pages: list[str]) -> float:
    """Median seconds of ``fn`` over consecutive pages (the first one, which fills a cache, is
    not timed)."""
    fn(pages[0])
    times = []
    for text in pages[1:]:
        t0 = time.perf_counter()
        fn(text)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main_prefilter(text: str, max_models: int) -> str:
    """The prefilter as on main before the cache (``_line_name`` and the model regex on every
    line), for the "before" row."""
    keep: list[str] = []
    models: dict[str, int] = {}
    for line in text.split("\n"):
        if _line_name(line) not in WANTED:
            continue
        if line[0] != "#":
            model = _model_label(line)
            if model is not None and models.setdefault(model, len(models)) >= max_models:
                continue
        keep.append(line)
    keep.append("")
    return "\n".join(keep)


def main_parse(text: str) -> list[Metric]:
    return parse_families(main_prefilter(text, DEFAULT_MAX_ENGINES), filtered=False)


def main_map_page(text: str) -> MapResult:
    families = main_parse(text)
    return map_samples("bench", index_samples(s for f in families for s in f.samples))


def parse_only(text: str, cache: ParseCache | None) -> list[Metric]:
    kept = prefilter(text, max_models=DEFAULT_MAX_ENGINES, cache=cache).text
    return parse_families(kept, filtered=False, cache=cache)


def main() -> None:
    load = SteadyLoad()
    pages = [load.tick() for _ in range(SCRAPES + 1)]
    text = pages[0]
    print(
        f"page: {len(text) / 1024:.0f} KB, {text.count(chr(10))} lines, {len(MODELS)} models, "
        f"{len(HISTOGRAMS)} histograms; {SCRAPES} scrapes 1 s apart under steady load"
    )
    # Share of the page that changes, and what each cache parses again.
    blocks, values = ParseCache(refill=False), ParseCache()
    shares = []
    for page_text in pages:
        kept = prefilter(page_text).text
        assert (
            blocks.parse(kept) == values.parse(kept) == list(text_string_to_metric_families(kept))
        )
        b, v = blocks.stats, values.stats
        shares.append(
            (
                b.blocks_parsed / b.blocks,
                b.lines_parsed / b.lines,
                v.lines_parsed / v.lines,
                v.values_read / v.lines,
                b.blocks,
                b.lines,
            )
        )
    med = [statistics.median(x[i] for x in shares[1:]) for i in range(4)]
    print(
        f"prefiltered text: {shares[0][4]} blocks, {shares[0][5]} lines; per scrape (median): "
        f"{med[0]:.0%} of blocks changed ({med[1]:.0%} of lines in them), "
        f"{med[3]:.0%} of lines changed value; lines parsed by prometheus_client: "
        f"block cache {med[1]:.0%}, block + values cache {med[2]:.0%}"
    )
    caches = {"blocks": ParseCache(refill=False), "values": ParseCache()}
    rows = [
        ("full parse", lambda t: list(text_string_to_metric_families(t)), full_parse),
        ("prefiltered, as on main (before)", main_parse, main_map_page),
        (
            "prefiltered, no cache (snapshot)",
            lambda t: parse_only(t, None),
            lambda t: map_page("bench", t),
        ),
        (
            "prefiltered + block cache",
            lambda t: parse_only(t, caches["blocks"]),
            lambda t: map_page("bench", t, cache=caches["blocks"]),
        ),
        (
            "prefiltered + block+values cache (after)",
            lambda t: parse_only(t, caches["values"]),
            lambda t: map_page("bench", t, cache=caches["values"]),
        ),
    ]
    print(f"{'ms per scrape, median':42} {'parse':>8} {'parse+map':>10}")
    base = None
    for label, parse_fn, map_fn in rows:
        caches["blocks"], caches["values"] = ParseCache(refill=False), ParseCache()
        t_parse = per_scrape(parse_fn, pages)
        t_map = per_scrape(map_fn, pages)
        base = base or t_parse
        print(f"{label:42} {t_parse * 1000:8.2f} {t_map * 1000:10.2f}   ({base / t_parse:5.1f}x)")
    cache = ParseCache()
    same = all(map_page("bench", t, cache=cache).engines == full_parse(t) for t in pages)
    print(f"identical results (cached map_page == full parse, every scrape): {same}")
    if not same:
        raise SystemExit("results differ")
    map_only(pages)


def map_only(pages: list[str]) -> None:
    """The mapping step alone (index + ``map_samples`` of parsed families), with the label-set
    grouping worked out every scrape (before) and remembered (after), taken turn about on the
    same parsed pages so both see the same machine."""
    parsed = [parse_only(t, None) for t in pages]
    memo = dialects._group_of
    times: dict[str, list[float]] = {"before": [], "after": []}
    results: dict[str, list[tuple[list[EngineSnapshot], list[str]]]] = {"before": [], "after": []}
    try:
        for families in parsed:
            for side in ("before", "after"):
                dialects._group_of = memo.__wrapped__ if side == "before" else memo  # type: ignore[assignment]
                t0 = time.perf_counter()
                mapped = map_samples("bench", index_samples(s for f in families for s in f.samples))
                times[side].append(time.perf_counter() - t0)
                results[side].append((mapped.engines, mapped.warnings))
    finally:
        dialects._group_of = memo
    before, after = (statistics.median(times[k][1:]) * 1000 for k in ("before", "after"))
    print(
        f"map alone, ms per scrape (median): label grouping every scrape {before:.2f}, "
        f"remembered {after:.2f} ({before / after:.1f}x); identical: "
        f"{results['before'] == results['after']}"
    )
    if results["before"] != results["after"]:
        raise SystemExit("results differ")


if __name__ == "__main__":
    main()
