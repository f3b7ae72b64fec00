"""Plain data shared by every part of gpuwatch: what sources read, what the UI and CLI show.

Unknown values are ``None``, never ``0``: a stack that does not export a number must not look
like a node that is idle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The latency histograms every dialect may map; "prefill" and "decode" take TTFT and E2E apart.
LATENCY_KINDS = ("ttft", "itl", "e2e", "queue", "prefill", "decode")


@dataclass(frozen=True)
class Histogram:
    """A cumulative Prometheus histogram: ``buckets`` are (upper bound, cumulative count)."""

    buckets: tuple[tuple[float, float], ...]
    sum: float | None = None
    count: float | None = None


@dataclass
class EngineSnapshot:
    """One serving engine (per endpoint and model) normalized from any dialect."""

    source: str
    dialect: str
    model: str | None
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    kv_blocks_used: float | None = None
    kv_blocks_total: float | None = None
    kv_block_size: float | None = None
    kv_tokens_used: float | None = None
    kv_tokens_total: float | None = None
    prefix_cache_hit_rate: float | None = None
    prefix_cache_hits_total: float | None = None
    prefix_cache_queries_total: float | None = None
    preemptions_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    # Forward passes (batches) the engine ran: a counter that moves every step, where the
    # token counters move only when a request ends (llama.cpp's n_decode_total).
    decode_steps_total: float | None = None
    histograms: dict[str, Histogram] = field(default_factory=dict)


@dataclass(frozen=True)
class ContainerInfo:
    """The container a process runs in, as its cgroup path names it (gpuwatch/sources/cgroups.py).

    ``runtime`` is None for a Kubernetes container whose cgroup path does not say which runtime
    made it (the cgroupfs driver's bare ``pod<uid>/<id>``). ``name`` and ``pod_name`` are known
    only where the runtime or the kubelet tells them without credentials."""

    id: str
    runtime: str | None = None
    name: str | None = None
    pod_uid: str | None = None
    pod_name: str | None = None

    @property
    def label(self) -> str:
        """What a table shows: the name, else the short ID (12 characters, as ``docker ps``);
        in a pod, the pod's name (or its UID's first 8) before it."""
        own = self.name or self.id[:12]
        if self.pod_uid is None:
            return own
        return f"{self.pod_name or 'pod ' + self.pod_uid[:8]}/{own}"


@dataclass
class ProcessInfo:
    pid: int
    name: str | None = None
    user: str | None = None
    cmdline: str | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    threads: int | None = None
    used_memory_bytes: int | None = None
    # None: not in a container this machine's runtimes name (or not readable from here).
    container: ContainerInfo | None = None
    # False when NVML lists the pid but this machine has no /proc entry for it: a process of
    # another PID namespace (gpuwatch in a container), shown as such, never dropped.
    visible: bool = True
    # The MIG GPU instance / compute instance the process runs on; None outside MIG mode.
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass
class MigInstance:
    """One MIG device (a GPU instance with one compute instance) of a GPU in MIG mode."""

    gpu_instance_id: int | None
    compute_instance_id: int | None
    profile: str | None = None  # "3g.40gb": compute slices, memory
    uuid: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    # NVML gives no utilization for a MIG device on most drivers: None there, never 0.
    utilization_gpu: float | None = None
    error: str | None = None


@dataclass
class GpuSample:
    index: int
    name: str | None = None
    uuid: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    utilization_gpu: float | None = None
    utilization_memory: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    clock_sm_mhz: float | None = None
    clock_mem_mhz: float | None = None
    fan_percent: float | None = None
    throttle_reasons: list[str] | None = None
    processes: list[ProcessInfo] = field(default_factory=list)
    error: str | None = None
    # None: NVML does not say (no MIG on this GPU); True: ``mig`` holds its instances.
    mig_mode: bool | None = None
    mig: list[MigInstance] = field(default_factory=list)


@dataclass
class GpuReading:
    """One NVML poll: ``error`` is set (and ``gpus`` empty) when NVML itself is unusable."""

    gpus: list[GpuSample]
    error: str | None = None


@dataclass
class HostSample:
    cpu_percent: float | None
    cpu_per_core: list[float]
    load_1m: float | None
    load_5m: float | None
    load_15m: float | None
    memory_total_bytes: int
    memory_used_bytes: int
    swap_total_bytes: int
    swap_used_bytes: int


@dataclass
class SourceError:
    source: str
    error: str


@dataclass
class ScrapeResult:
    """What one /metrics source gave: engines, or an error, plus non-fatal warnings."""

    source: str
    engines: list[EngineSnapshot] = field(default_factory=list)
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    # The endpoint did not answer at all (refused, connect timeout): DOWN, not merely stale.
    unreachable: bool = False
    # When the samples were taken, on the monitor's clock (Prometheus keeps each sample's
    # scrape time); None: as the answer arrives. Windows then hold what PromQL's hold.
    at: float | None = None
    # The prefiltered page the engines were mapped from: the wanted families only, what a
    # recording keeps so that a replay maps it again through the same dialects.
    page: str | None = field(default=None, repr=False, compare=False)
