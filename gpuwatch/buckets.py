"""Histogram bucket bounds: vLLM V1's (vllm/v1/metrics/loggers.py), used by the simulator
and the gate so their latencies bucket the same way."""

# fmt: off
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                           50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
ITERATION_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
# fmt: on

# The gate's latency buckets: each 25% wider than the last from 10 ms to past 120 s, so
# Prometheus' histogram_quantile over them is off by at most a quarter of a bucket's value,
# not the 2x of vLLM's coarse ones (the gate serves the exact figures in /admin/status).
GATE_LATENCY_BUCKETS = [0.001, 0.0025, 0.005] + [
    float(f"{0.01 * 1.25**i:.4g}") for i in range(44)
]  # 0.01 ... 146.9
GATE_DURATION_BUCKETS = [*GATE_LATENCY_BUCKETS, 300.0, 600.0, 1200.0, 2400.0]
