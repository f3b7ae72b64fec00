"""The simulator's /metrics: vLLM V1's names, types, labels and bucket bounds, exactly.

Names and buckets follow vllm/v1/metrics/loggers.py (checked against the real V1 scrape in
tests/fixtures/metrics/vllm-3.prom). prometheus_client writes them, as it does for vLLM.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpuwatch.buckets import (
    ITERATION_BUCKETS,
    ITL_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
)
from gpuwatch.sim.engine import Engine, Request, StepResult
from gpuwatch.sim.profiles import Profile

FINISH_REASONS = ("stop", "length", "abort", "error")


def buckets_1_2_5(limit: int) -> list[int]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to ``limit``."""
    out: list[int] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > limit:
                return out
            out.append(value)
        exponent += 1


# attribute -> (kind, vLLM name, help, buckets). Help strings are vLLM's own.
FAMILIES: dict[str, tuple[str, str, str, str | None]] = {
    "running": (
        "gauge",
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        None,
    ),
    "waiting": (
        "gauge",
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        None,
    ),
    "kv": ("gauge", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", None),
    "prefix_queries": (
        "counter",
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        None,
    ),
    "prefix_hits": (
        "counter",
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        None,
    ),
    "preemptions": (
        "counter",
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        None,
    ),
    "prompt_tokens": ("counter", "vllm:prompt_tokens", "Number of prefill tokens processed.", None),
    "generation_tokens": (
        "counter",
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        None,
    ),
    "req_prompt": (
        "histogram",
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        "tokens",
    ),
    "req_gen": (
        "histogram",
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        "tokens",
    ),
    "iteration": (
        "histogram",
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        "iteration",
    ),
    "max_gen": (
        "histogram",
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        "tokens",
    ),
    "params_n": (
        "histogram",
        "vllm:request_params_n",
        "Histogram of the n request parameter.",
        "n",
    ),
    "params_max_tokens": (
        "histogram",
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        "tokens",
    ),
    "ttft": (
        "histogram",
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        "ttft",
    ),
    "itl": (
        "histogram",
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        "itl",
    ),
    # Deprecated in V1 but still exported, with the same per-token gaps as inter_token_latency
    # (vllm/v1/metrics/loggers.py), and it is what vLLM's Grafana dashboard plots as TPOT.
    "tpot_token": (
        "histogram",
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds. "
        "DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
        "itl",
    ),
    "tpot": (
        "histogram",
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        "itl",
    ),
    "e2e": (
        "histogram",
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        "latency",
    ),
    "queue": (
        "histogram",
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        "latency",
    ),
    "inference": (
        "histogram",
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        "latency",
    ),
    "prefill": (
        "histogram",
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        "latency",
    ),
    "decode": (
        "histogram",
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        "latency",
    ),
}
_KINDS = {"gauge": Gauge, "counter": Counter, "histogram": Histogram}
LABELS = ["model_name", "engine"]
CACHE_CONFIG_LABELS = [
    "block_size",
    "cache_dtype",
    "enable_prefix_caching",
    "engine",
    "gpu_memory_utilization",
    "num_gpu_blocks",
]


class SimMetrics:
    """One registry for all engines; each engine writes with its own ``engine`` label."""

    def __init__(self, profile: Profile, model_name: str, engines: int) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        buckets = {
            "tokens": buckets_1_2_5(profile.model.max_model_len),
            "iteration": ITERATION_BUCKETS,
            "n": [1, 2, 5, 10, 20],
            "ttft": TTFT_BUCKETS,
            "itl": ITL_BUCKETS,
            "latency": REQUEST_LATENCY_BUCKETS,
        }
        self.families: dict[str, Gauge | Counter | Histogram] = {}
        for attr, (kind, name, doc, bucket_key) in FAMILIES.items():
            extra = {"buckets": buckets[bucket_key]} if bucket_key else {}
            self.families[attr] = _KINDS[kind](name, doc, LABELS, registry=self.registry, **extra)
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*LABELS, "finished_reason"],
            registry=self.registry,
        )
        cache_config = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            CACHE_CONFIG_LABELS,
            registry=self.registry,
        )
        kv_dtype = "fp8" if profile.model.kv_dtype_bytes == 1 else "auto"
        for i in range(engines):
            cache_config.labels(
                str(profile.block_size),
                kv_dtype,
                "True",
                str(i),
                str(profile.gpu_memory_utilization),
                str(profile.num_blocks),
            ).set(1)


class EngineRecorder:
    """Turns one engine's step results into metric updates, in wall-clock seconds."""

    def __init__(self, metrics: SimMetrics, index: int, engine: Engine, time_scale: float) -> None:
        labels = (metrics.model_name, str(index))
        # Labelled children resolved once: .labels() costs more than .observe() per token.
        self.m: dict[str, Any] = {a: f.labels(*labels) for a, f in metrics.families.items()}
        self.success = {r: metrics.success.labels(*labels, r) for r in FINISH_REASONS}
        self.engine = engine
        self.scale = time_scale
        self._totals = {"preemptions": 0, "prefix_queries": 0, "prefix_hits": 0}

    def _wall(self, sim_seconds: float) -> float:
        return sim_seconds / self.scale

    def gauges(self) -> None:
        e = self.engine
        self.m["running"].set(len(e.running))
        self.m["waiting"].set(len(e.waiting))
        self.m["kv"].set(e.kv_usage)
        for name in self._totals:
            total = getattr(e, name)
            if total > self._totals[name]:
                self.m[name].inc(total - self._totals[name])
                self._totals[name] = total

    def step(self, result: StepResult) -> None:
        if result.tokens:
            self.m["iteration"].observe(result.tokens)
        generated = 0
        for ev in result.events:
            req = ev.request
            if ev.kind == "token":
                generated += 1
                if ev.gap is None:
                    self.m["prompt_tokens"].inc(req.prompt_len)
                    self.m["ttft"].observe(self._wall(ev.time - req.arrival))
                else:
                    gap = self._wall(ev.gap)
                    self.m["itl"].observe(gap)
                    self.m["tpot_token"].observe(gap)
            elif ev.kind == "scheduled":
                self.m["queue"].observe(self._wall(ev.time - req.arrival))
            elif ev.kind == "finished":
                self.finished(req, req.finish.value if req.finish else "stop", ev.time)
        if generated:
            self.m["generation_tokens"].inc(generated)
        self.gauges()

    def finished(self, req: Request, reason: str, now: float) -> None:
        self.success[reason].inc()
        if reason == "abort":
            return
        self.m["e2e"].observe(self._wall(now - req.arrival))
        self.m["req_prompt"].observe(req.prompt_len)
        self.m["req_gen"].observe(req.output)
        self.m["max_gen"].observe(req.max_output)
        self.m["params_max_tokens"].observe(req.max_output)
        self.m["params_n"].observe(1)
        if req.first_scheduled is not None:
            self.m["inference"].observe(self._wall(now - req.first_scheduled))
            if req.first_token is not None:
                self.m["prefill"].observe(self._wall(req.first_token - req.first_scheduled))
        if req.first_token is not None:
            self.m["decode"].observe(self._wall(now - req.first_token))
            if req.output > 1:
                self.m["tpot"].observe(self._wall((now - req.first_token) / (req.output - 1)))
