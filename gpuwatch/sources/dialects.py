"""Serving-stack dialects: detection by metric names and mapping to ``EngineSnapshot``.

Each dialect is a table (data, not code): for every normalized field, the sample names that can
give it, first present wins. A name may carry a label selector, ``name{label=value}``, for stacks
that multiplex several quantities into one gauge (Triton's TensorRT-LLM backend).

Aggregation (DESIGN.md): samples are grouped by the model label. Labels that name replicas of
the same work (``tp_rank``, ``pp_rank``, ``moe_ep_rank``) are collapsed by taking rank 0, or the
max where rank 0 is absent. Every other label names separate engines (``engine``, ``dp_rank``,
Ray's ``WorkerId`` ...): summed for counts and counters, max for ratios. ``*_created`` is ignored.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from prometheus_client.samples import Sample

from gpuwatch.errors import GpuwatchError
from gpuwatch.fmt import clip
from gpuwatch.model import LATENCY_KINDS, EngineSnapshot, Histogram

REPLICA_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank"})
MODEL_LABELS = ("model_name", "model")
# Label sets whose grouping is remembered: every series of 8 engines' pages is ~2,000.
GROUP_CACHE_SIZE = 1 << 15
# Fields that are ratios: the max over engines is the honest aggregate, not the sum.
RATIO_FIELDS = frozenset({"kv_cache_usage", "prefix_cache_hit_rate"})
SCALAR_FIELDS = tuple(
    f.name
    for f in fields(EngineSnapshot)
    if f.name not in {"source", "dialect", "model", "histograms"}
)


@dataclass(frozen=True)
class Selector:
    name: str
    labels: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str) -> Selector:
        return _selector(text) if cls is Selector else cls._parse(text)

    @classmethod
    def _parse(cls, text: str) -> Selector:
        if "{" not in text:
            return cls(text)
        name, _, rest = text.partition("{")
        pairs = tuple(
            (k.strip(), v.strip().strip('"'))
            for k, _, v in (p.partition("=") for p in rest.rstrip("}").split(","))
        )
        return cls(name, pairs)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.labels)


@functools.lru_cache(maxsize=1024)
def _selector(text: str) -> Selector:
    """A dialect table's selector, parsed once (frozen): each page mapped asks for ~100."""
    return Selector._parse(text)


@dataclass(frozen=True)
class Dialect:
    name: str
    scalars: Mapping[str, tuple[str, ...]]
    histograms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Fields whose prefix-cache queries are the sum of these fields (llama.cpp).
    derived_queries: tuple[str, ...] = ()
    # Fields read from a label's value (an ``*_info`` gauge): field -> (sample name, label).
    label_values: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def selectors(self) -> Iterable[Selector]:
        for names in self.scalars.values():
            yield from map(Selector.parse, names)

    def histogram_names(self) -> Iterable[str]:
        for names in self.histograms.values():
            yield from names


def _prefixed(base: Dialect, name: str, old: str, new: str) -> Dialect:
    def swap(names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(new + n[len(old) :] if n.startswith(old) else n for n in names)

    return Dialect(
        name,
        {k: swap(v) for k, v in base.scalars.items()},
        {k: swap(v) for k, v in base.histograms.items()},
        base.derived_queries,
        {k: (swap((n,))[0], label) for k, (n, label) in base.label_values.items()},
    )


# vLLM: V1 names first, V0 names after them (vllm/v1/metrics/loggers.py; V0 engine/metrics.py).
VLLM = Dialect(
    "vllm",
    scalars={
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "prefix_cache_hits_total": (
            "vllm:prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_hits_total",
        ),
        "prefix_cache_queries_total": (
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
        ),
        "prefix_cache_hit_rate": ("vllm:gpu_prefix_cache_hit_rate",),
        "preemptions_total": ("vllm:num_preemptions_total",),
        "prompt_tokens_total": ("vllm:prompt_tokens_total",),
        "generation_tokens_total": ("vllm:generation_tokens_total",),
    },
    histograms={
        "ttft": ("vllm:time_to_first_token_seconds",),
        "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        "e2e": ("vllm:e2e_request_latency_seconds",),
        "queue": ("vllm:request_queue_time_seconds",),
        # TTFT taken apart: waiting for a batch slot, then prefill (V1 exports both).
        "prefill": ("vllm:request_prefill_time_seconds",),
        "decode": ("vllm:request_decode_time_seconds",),
    },
    label_values={
        "kv_blocks_total": ("vllm:cache_config_info", "num_gpu_blocks"),
        "kv_block_size": ("vllm:cache_config_info", "block_size"),
    },
)

SGLANG = Dialect(
    "sglang",
    scalars={
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_cache_usage": ("sglang:token_usage",),
        "kv_tokens_used": ("sglang:num_used_tokens",),
        "kv_tokens_total": ("sglang:max_total_num_tokens",),
        "prefix_cache_hit_rate": ("sglang:cache_hit_rate",),
        "preemptions_total": ("sglang:num_retracted_requests_total",),
        "prompt_tokens_total": ("sglang:prompt_tokens_total",),
        "generation_tokens_total": ("sglang:generation_tokens_total",),
    },
    histograms={
        "ttft": ("sglang:time_to_first_token_seconds",),
        "itl": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        "e2e": ("sglang:e2e_request_latency_seconds",),
        "queue": ("sglang:queue_time_seconds",),
    },
)

# TGI's router (text-generation-inference/router/src): token totals exist only as histograms.
TGI = Dialect(
    "tgi",
    scalars={
        "running": ("tgi_batch_current_size",),
        "waiting": ("tgi_queue_size",),
        "prompt_tokens_total": ("tgi_request_input_length_sum",),
        "generation_tokens_total": ("tgi_request_generated_tokens_sum",),
    },
    histograms={
        "itl": ("tgi_request_mean_time_per_token_duration",),
        "e2e": ("tgi_request_duration",),
        "queue": ("tgi_request_queue_duration",),
    },
)

# llama.cpp's server (tools/server/server.cpp): prompt_tokens_total excludes cached tokens,
# so prefix-cache queries are cached + processed.
LLAMACPP = Dialect(
    "llamacpp",
    scalars={
        "running": ("llamacpp:requests_processing",),
        "waiting": ("llamacpp:requests_deferred",),
        "kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",),
        "kv_tokens_used": ("llamacpp:kv_cache_tokens",),
        "prefix_cache_hits_total": ("llamacpp:prompt_tokens_cached_total",),
        "prompt_tokens_total": ("llamacpp:prompt_tokens_total",),
        "generation_tokens_total": ("llamacpp:tokens_predicted_total",),
        "decode_steps_total": ("llamacpp:n_decode_total",),
    },
    derived_queries=("prefix_cache_hits_total", "prompt_tokens_total"),
)

# TensorRT-LLM: trtllm-serve's MetricsCollector (prefix added by Dynamo), and Triton's
# tensorrtllm_backend gauges keyed by a discriminator label, plus Triton's pending count.
TRTLLM = Dialect(
    "trtllm",
    scalars={
        "running": (
            "trtllm_num_requests_running",
            "nv_trt_llm_request_metrics{request_type=active}",
        ),
        "waiting": (
            "trtllm_num_requests_waiting",
            "nv_trt_llm_request_metrics{request_type=waiting}",
            "nv_inference_pending_request_count",
        ),
        "kv_cache_usage": (
            "trtllm_kv_cache_utilization",
            "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}",
        ),
        "kv_blocks_used": ("nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=used}",),
        "kv_blocks_total": ("nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max}",),
        "prefix_cache_hit_rate": ("trtllm_kv_cache_hit_rate",),
    },
    histograms={
        "ttft": ("trtllm_time_to_first_token_seconds",),
        "itl": ("trtllm_time_per_output_token_seconds",),
        "e2e": ("trtllm_e2e_request_latency_seconds",),
        "queue": ("trtllm_request_queue_time_seconds",),
    },
)
TRTLLM_COLON = _prefixed(TRTLLM, "trtllm", "trtllm_", "trtllm:")

# LMDeploy (lmdeploy/metrics/metrics_processor.py): vLLM-like names, {model_name, engine}.
LMDEPLOY = Dialect(
    "lmdeploy",
    scalars={
        "running": ("lmdeploy:num_requests_running",),
        "waiting": ("lmdeploy:num_requests_waiting",),
        "kv_cache_usage": ("lmdeploy:gpu_cache_usage_perc",),
        "prompt_tokens_total": ("lmdeploy:prompt_tokens_total",),
        "generation_tokens_total": ("lmdeploy:generation_tokens_total",),
    },
    histograms={
        "ttft": ("lmdeploy:time_to_first_token_seconds",),
        "itl": (
            "lmdeploy:inter_token_latency_seconds",
            "lmdeploy:iter_token_latency",
            "lmdeploy:time_per_output_token_seconds",
        ),
        "e2e": ("lmdeploy:e2e_request_latency_seconds",),
        "queue": ("lmdeploy:request_queue_time_seconds",),
    },
)

# NVIDIA Dynamo's HTTP frontend (lib/llm/src/http/service/metrics.rs).
DYNAMO = Dialect(
    "dynamo",
    scalars={
        "running": ("dynamo_frontend_inflight_requests",),
        "waiting": ("dynamo_frontend_queued_requests",),
        "prompt_tokens_total": ("dynamo_frontend_input_sequence_tokens_sum",),
        "generation_tokens_total": ("dynamo_frontend_output_tokens_total",),
    },
    histograms={
        "ttft": ("dynamo_frontend_time_to_first_token_seconds",),
        "itl": ("dynamo_frontend_inter_token_latency_seconds",),
        "e2e": ("dynamo_frontend_request_duration_seconds",),
    },
)

# Ray Serve LLM re-exports vLLM's metrics through Ray's agent with a ray_ prefix; depending on
# the Ray version the colon survives or becomes an underscore.
RAY = _prefixed(VLLM, "ray", "vllm:", "ray_vllm:")
RAY_UNDERSCORE = _prefixed(VLLM, "ray", "vllm:", "ray_vllm_")

# gpuwatch's own admission gateway: lanes are summed like engines.
GATE = Dialect(
    "gate",
    scalars={
        "running": ("gpuwatch_gate_inflight",),
        "waiting": ("gpuwatch_gate_queued",),
    },
    histograms={
        "ttft": ("gpuwatch_gate_ttft_seconds",),
        "e2e": ("gpuwatch_gate_request_duration_seconds",),
        "queue": ("gpuwatch_gate_queue_wait_seconds",),
    },
)

# The gate's refusals (a counter, every lane and reason): the fleet table's "refused" column.
GATE_REFUSED_TOTAL = "gpuwatch_gate_rejected_total"

DIALECTS: tuple[Dialect, ...] = (
    VLLM,
    SGLANG,
    TGI,
    LLAMACPP,
    TRTLLM,
    TRTLLM_COLON,
    LMDEPLOY,
    DYNAMO,
    RAY,
    RAY_UNDERSCORE,
    GATE,
)


def sample_names(dialect: Dialect) -> set[str]:
    """Every sample name ``dialect`` reads (a histogram as its _bucket, _sum and _count)."""
    names = {sel.name for sel in dialect.selectors()}
    for hist in dialect.histogram_names():
        names.update({f"{hist}_bucket", f"{hist}_sum", f"{hist}_count"})
    names.update(sample for sample, _ in dialect.label_values.values())
    return names


def wanted_sample_names() -> frozenset[str]:
    """Every sample name some dialect reads: the scrape prefilter keeps only these families."""
    names: set[str] = set()
    for dialect in DIALECTS:
        names.update(sample_names(dialect))
        names.update(dialect.histogram_names())
    return frozenset(names)


def index_samples(samples: Iterable[Sample]) -> dict[str, list[Sample]]:
    by_name: dict[str, list[Sample]] = defaultdict(list)
    for sample in samples:
        if not sample.name.endswith("_created"):
            by_name[sample.name].append(sample)
    return by_name


def _model_of(labels: Mapping[str, str]) -> str | None:
    for key in MODEL_LABELS:
        if key in labels:
            return labels[key]
    return None


_LabelSet = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


@functools.lru_cache(maxsize=64)
def _not_engine(skip: tuple[str, ...]) -> frozenset[str]:
    """The labels that do not tell engines apart, besides ``skip``."""
    return frozenset({*MODEL_LABELS, *REPLICA_LABELS, *skip})


def _engine_key(labels: Mapping[str, str], skip: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    dropped = _not_engine(skip)
    return tuple(sorted(pair for pair in labels.items() if pair[0] not in dropped))


@functools.lru_cache(maxsize=GROUP_CACHE_SIZE)
def _group_of(
    items: tuple[tuple[str, str], ...], skip: tuple[str, ...]
) -> tuple[tuple[str | None, tuple[tuple[str, str], ...], str], tuple[tuple[str, str], ...]]:
    """A sample's ((model, engine, extra), replica) from its labels. A pure function of the
    label set, which stays the same from one scrape to the next while the values move: worked
    out once per series rather than sorted again every scrape (most of a page's mapping time)."""
    labels = dict(items)
    replica = (
        ()
        if REPLICA_LABELS.isdisjoint(labels)
        else tuple(sorted(p for p in items if p[0] in REPLICA_LABELS))
    )
    # Only a bucket's ``le`` is its bound; on any other sample it is an ordinary label.
    extra = labels.get("le", "") if "le" in skip else ""
    return (_model_of(labels), _engine_key(labels, skip), extra), replica


def _collapse(
    samples: Iterable[Sample], skip: Iterable[str], ratio: bool
) -> dict[str | None, dict[str, float]]:
    """Aggregate samples to {model: {extra-key: value}}; extra-key is ``le`` for buckets."""
    skip = tuple(skip)
    # (model, engine, extra) -> {replica: value}
    grouped: dict[tuple[str | None, _LabelSet, str], dict[_LabelSet, float]] = defaultdict(dict)
    for s in samples:
        key, replica = _group_of(tuple(s.labels.items()), skip)
        grouped[key][replica] = s.value
    out: dict[str | None, dict[str, float]] = defaultdict(dict)
    for (model, _engine, extra), replicas in grouped.items():
        if len(replicas) == 1:  # no replicas (most series): its one value, whatever its rank
            (value,) = replicas.values()
        else:
            rank0 = [v for r, v in replicas.items() if all(val == "0" for _, val in r)]
            value = rank0[0] if rank0 else max(replicas.values())
        slot = out[model]
        if extra in slot:
            slot[extra] = max(slot[extra], value) if ratio else slot[extra] + value
        else:
            slot[extra] = value
    return out


class BadBucket(GpuwatchError, ValueError):
    """A bucket bound that is not a number: the whole histogram family is unusable."""


@functools.lru_cache(maxsize=4096)  # a page's bounds are the same few dozen, page after page
def _parse_le(text: str) -> float:
    """A bucket's upper bound: a finite number or +Inf (NaN and -Inf order nothing)."""
    try:
        bound = math.inf if text in {"+Inf", "Inf", "+inf", "inf"} else float(text)
    except ValueError:
        bound = math.nan
    if math.isnan(bound) or bound == -math.inf:
        raise BadBucket(f'le="{clip(text, 40)}"')
    return bound


@dataclass
class MapResult:
    engines: list[EngineSnapshot]
    warnings: list[str]


def detect(index: Mapping[str, list[Sample]]) -> list[Dialect]:
    found: list[Dialect] = []
    for dialect in DIALECTS:
        names = _detected_by(dialect)
        if any(name in index for name in names) and dialect.name not in {d.name for d in found}:
            found.append(dialect)
    return found


_DETECTED_BY: dict[int, tuple[Dialect, frozenset[str]]] = {}


def _detected_by(dialect: Dialect) -> frozenset[str]:
    """The sample names that say a page is in ``dialect`` (worked out once: the tables are
    constants, and building these sets was two fifths of mapping a page)."""
    kept = _DETECTED_BY.get(id(dialect))
    if kept is None or kept[0] is not dialect:  # the dialect itself is kept: its id stays its
        names = {sel.name for sel in dialect.selectors()}
        for hist in dialect.histogram_names():
            names.update({f"{hist}_bucket", f"{hist}_count"})
        kept = _DETECTED_BY[id(dialect)] = (dialect, frozenset(names))
    return kept[1]


def _scalar(
    dialect: Dialect, field_name: str, index: Mapping[str, list[Sample]]
) -> tuple[str | None, dict[str | None, float]]:
    for text in dialect.scalars.get(field_name, ()):
        sel = Selector.parse(text)
        samples = [s for s in index.get(sel.name, ()) if sel.matches(s.labels)]
        if samples:
            skip = [k for k, _ in sel.labels]
            collapsed = _collapse(samples, skip, field_name in RATIO_FIELDS)
            return sel.name, {m: vals[""] for m, vals in collapsed.items()}
    return None, {}


def _histogram(
    names: tuple[str, ...], index: Mapping[str, list[Sample]], warnings: list[str]
) -> tuple[str | None, dict[str | None, Histogram]]:
    """The first of ``names`` present and usable; a family with a bad bound is skipped."""
    for name in names:
        buckets = index.get(f"{name}_bucket")
        counts = index.get(f"{name}_count")
        if not buckets and not counts:
            continue
        by_model = _collapse(buckets or (), ["le"], ratio=False)
        sums = _collapse(index.get(f"{name}_sum", ()), [], ratio=False)
        cnts = _collapse(counts or (), [], ratio=False)
        out: dict[str | None, Histogram] = {}
        try:
            for model in {*by_model, *cnts}:
                by_le = by_model.get(model, {}).items()
                pairs = tuple(sorted((_parse_le(le), v) for le, v in by_le))
                hist_sum = sums.get(model, {}).get("")
                hist_count = cnts.get(model, {}).get("")
                out[model] = _clean_histogram(name, pairs, hist_sum, hist_count, warnings)
        except BadBucket as exc:
            warnings.append(f"{name} has a bucket bound {exc} that is not a number: skipped")
            continue
        return name, out
    return None, {}


def _clean_histogram(
    name: str,
    pairs: tuple[tuple[float, float], ...],
    hist_sum: float | None,
    hist_count: float | None,
    warnings: list[str],
) -> Histogram:
    """Non-finite sum and count become unknown; a non-finite bucket count voids the buckets."""
    bad = next((v for _, v in pairs if not math.isfinite(v)), None)
    if bad is not None:
        warnings.append(f"{name}_bucket has a count of {bad}: quantiles unknown")
        pairs = ()
    if hist_sum is not None:
        hist_sum = _clean(f"{name}_sum", hist_sum, False, warnings)
    if hist_count is not None:
        hist_count = _clean(f"{name}_count", hist_count, False, warnings)
    return Histogram(pairs, hist_sum, hist_count)


def _label_value(
    samples: Iterable[Sample], label: str, warnings: list[str]
) -> dict[str | None, float]:
    """A numeric label value per model, summed over engines (each engine has its own pool)."""
    out: dict[str | None, dict[_LabelSet, float]] = defaultdict(dict)
    for s in samples:
        try:
            value = float(s.labels[label])
        except (KeyError, ValueError):
            continue
        if not math.isfinite(value):
            warnings.append(f'{s.name}{{{label}="{clip(s.labels[label], 20)}"}}: shown as unknown')
            continue
        replica = tuple(sorted((k, v) for k, v in s.labels.items() if k in REPLICA_LABELS))
        if any(v != "0" for _, v in replica):
            continue
        out[_model_of(s.labels)][_engine_key(s.labels, (label,))] = value
    return {model: _sum_or_same(label, vals) for model, vals in out.items()}


def _sum_or_same(label: str, values: dict[_LabelSet, float]) -> float:
    # A block size is per engine and the same everywhere; a block count adds up across engines.
    return max(values.values()) if label == "block_size" else sum(values.values())


def _clean(name: str, value: float, ratio: bool, warnings: list[str]) -> float | None:
    if math.isnan(value) or math.isinf(value):
        warnings.append(f"{name} is {value}: shown as unknown")
        return None
    if ratio and value < 0:
        # vLLM V0 reports -1 for a hit rate it does not track.
        return None
    return value


def map_samples(source: str, index: Mapping[str, list[Sample]]) -> MapResult:
    """Map one scraped page to engine snapshots, one per (dialect, model)."""
    engines: list[EngineSnapshot] = []
    warnings: list[str] = []
    for dialect in detect(index):
        engines += _map_dialect(source, dialect, index, warnings)
    # The same problem on every model's series is one warning, not one per model.
    return MapResult(engines, list(dict.fromkeys(warnings)))


def _map_dialect(
    source: str, dialect: Dialect, index: Mapping[str, list[Sample]], warnings: list[str]
) -> list[EngineSnapshot]:
    per_model: dict[str | None, EngineSnapshot] = {}

    def engine(model: str | None) -> EngineSnapshot:
        if model not in per_model:
            per_model[model] = EngineSnapshot(source, dialect.name, model)
        return per_model[model]

    for field_name in SCALAR_FIELDS:
        name, values = _scalar(dialect, field_name, index)
        for model, value in values.items():
            cleaned = _clean(name or field_name, value, field_name in RATIO_FIELDS, warnings)
            setattr(engine(model), field_name, cleaned)
    for field_name, (sample, label) in dialect.label_values.items():
        for model, value in _label_value(index.get(sample, ()), label, warnings).items():
            setattr(engine(model), field_name, value)
    for kind in LATENCY_KINDS:
        name, hists = _histogram(dialect.histograms.get(kind, ()), index, warnings)
        for model, hist in hists.items():
            if hist.buckets and not math.isinf(hist.buckets[-1][0]):
                warnings.append(f"{name} has no +Inf bucket: {kind} quantiles unknown")
            engine(model).histograms[kind] = hist
    if len(per_model) > 1:
        # Unlabelled series next to per-model ones are process-wide (vLLM's cache_config_info
        # has no model label): they describe every model's engine.
        extras = per_model.pop(None, None)
        if extras is not None:
            for snap in per_model.values():
                for name in SCALAR_FIELDS:
                    if getattr(snap, name) is None and getattr(extras, name) is not None:
                        setattr(snap, name, getattr(extras, name))
    for snap in per_model.values():
        _derive(dialect, snap)
        _unknown_if_not_finite(snap, warnings)
    return list(per_model.values())


def _unknown_if_not_finite(snap: EngineSnapshot, warnings: list[str]) -> None:
    """Derived values can overflow (1e308 blocks times a block size): unknown, never inf."""
    for name in SCALAR_FIELDS:
        value = getattr(snap, name)
        if value is not None and not math.isfinite(value):
            warnings.append(f"{name} is {value}: shown as unknown")
            setattr(snap, name, None)


def _derive(dialect: Dialect, snap: EngineSnapshot) -> None:
    if dialect.derived_queries and snap.prefix_cache_queries_total is None:
        parts = [getattr(snap, f) for f in dialect.derived_queries]
        if all(p is not None for p in parts):
            snap.prefix_cache_queries_total = sum(parts)
    if (
        snap.prefix_cache_hit_rate is None
        and snap.prefix_cache_hits_total is not None
        and snap.prefix_cache_queries_total
    ):
        snap.prefix_cache_hit_rate = snap.prefix_cache_hits_total / snap.prefix_cache_queries_total
    if snap.kv_tokens_total is None and snap.kv_blocks_total and snap.kv_block_size:
        snap.kv_tokens_total = snap.kv_blocks_total * snap.kv_block_size
    if snap.kv_cache_usage is None:
        for used, total in (
            (snap.kv_blocks_used, snap.kv_blocks_total),
            (snap.kv_tokens_used, snap.kv_tokens_total),
        ):
            if used is not None and total:
                snap.kv_cache_usage = used / total
                break
    if snap.kv_tokens_used is None and snap.kv_cache_usage is not None and snap.kv_tokens_total:
        snap.kv_tokens_used = snap.kv_cache_usage * snap.kv_tokens_total
