"""Metrics of the simulator's embedding and image work, beside vLLM's in the same registry.

Embeddings use Text Embeddings Inference's names, labels and buckets (TEI router/src: the
``te_*`` counters, gauges and histograms; durations in seconds with TEI's geometric buckets,
0.000015 x 1.5^k). One difference: TEI's Rust exporter writes a counter bare
(``te_request_count``), prometheus_client appends ``_total`` (``te_request_count_total``);
the ``# TYPE`` line says counter in both.

Image generation has no common server whose names could be followed, so the families are the
simulator's own, ``sim_image_*``, documented in docs/sim.md.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpuwatch.buckets import REQUEST_LATENCY_BUCKETS

# TEI's duration buckets: 35 of a geometric sequence from 1.5e-5, ratio 1.5.
TE_DURATION_BUCKETS = [1e-5 * 1.5 ** (k + 1) for k in range(35)]
TE_INPUT_LENGTH_BUCKETS = [float(2**k) for k in range(10)]  # up to 512, the model's limit
TE_BATCH_SIZE_BUCKETS = [float(2**k) for k in range(13)]
TE_BATCH_TOKENS_BUCKETS = [float(2**k) for k in range(21)]


class EmbedMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.request_count = Counter(
            "te_request_count", "Total number of requests", ["method"], registry=registry
        )
        self.request_success = Counter(
            "te_request_success", "Total number of successful requests", ["method"],
            registry=registry,
        )  # fmt: skip
        self.request_failure = Counter(
            "te_request_failure", "Total number of failed requests", ["err"], registry=registry
        )
        self.queue_size = Gauge("te_queue_size", "Queue size", registry=registry)
        self.batch_current_size = Gauge(
            "te_batch_current_size", "Current batch size", registry=registry
        )
        self.request_duration = self._seconds(registry, "te_request_duration", "Request duration")
        self.queue_duration = self._seconds(registry, "te_request_queue_duration", "Queue time")
        self.inference_duration = self._seconds(
            registry, "te_request_inference_duration", "Inference duration"
        )
        self.input_length = Histogram(
            "te_request_input_length", "Input length", registry=registry,
            buckets=TE_INPUT_LENGTH_BUCKETS,
        )  # fmt: skip
        self.batch_next_size = Histogram(
            "te_batch_next_size", "Batch size", registry=registry, buckets=TE_BATCH_SIZE_BUCKETS
        )
        self.batch_next_tokens = Histogram(
            "te_batch_next_tokens", "Batch tokens", registry=registry,
            buckets=TE_BATCH_TOKENS_BUCKETS,
        )  # fmt: skip

    @staticmethod
    def _seconds(registry: CollectorRegistry, name: str, doc: str) -> Histogram:
        return Histogram(name, doc, registry=registry, buckets=TE_DURATION_BUCKETS)


class ImageMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "sim_image_requests",
            "Image generation requests finished, by outcome (ok, abort, queue_full).",
            ["outcome"],
            registry=registry,
        )
        self.images = Counter("sim_image_images", "Images generated.", registry=registry)
        self.steps = Counter(
            "sim_image_steps", "Denoising steps run (steps x n per request).", registry=registry
        )
        self.pixels = Counter(
            "sim_image_pixels", "Pixels generated (width x height x n).", registry=registry
        )
        self.running = Gauge(
            "sim_image_requests_running", "Image requests being generated.", registry=registry
        )
        self.waiting = Gauge(
            "sim_image_requests_waiting",
            "Image requests waiting for VRAM in the image reserve.",
            registry=registry,
        )
        self.memory = Gauge(
            "sim_image_memory_bytes",
            "VRAM held by the activations of the running image requests.",
            registry=registry,
        )
        self.weight = Gauge(
            "sim_image_gpu_weight",
            "Time-slicing weight of the running image requests against the text engine "
            "(1 = one 1024x1024 image; the text engine weighs 1 while busy).",
            registry=registry,
        )
        self.duration = Histogram(
            "sim_image_request_duration_seconds",
            "Arrival to the last image, in seconds.",
            registry=registry,
            buckets=REQUEST_LATENCY_BUCKETS,
        )
        self.queue = Histogram(
            "sim_image_request_queue_seconds",
            "Arrival to the start of generation, in seconds.",
            registry=registry,
            buckets=REQUEST_LATENCY_BUCKETS,
        )
