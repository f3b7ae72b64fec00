"""A node's GPUs from NVIDIA's DCGM exporter (``DCGM_FI_DEV_*``) as Prometheus holds them: the
GPU panel of a node seen through Prometheus. Pure: the query, and its answer as GPU samples."""

from __future__ import annotations

from gpuwatch.model import GpuReading, GpuSample
from gpuwatch.sources import promql

MIB = 1024 * 1024
# DCGM field -> (GpuSample field, scale to the sample's unit)
FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_gpu", 0.01),  # percent -> fraction, as NVML's
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("utilization_memory", 0.01),
    "DCGM_FI_DEV_FB_USED": ("memory_used_bytes", MIB),
    "DCGM_FI_DEV_FB_FREE": ("memory_free_bytes", MIB),
    "DCGM_FI_DEV_FB_RESERVED": ("memory_reserved_bytes", MIB),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),  # not in the default counters
    "DCGM_FI_DEV_SM_CLOCK": ("clock_sm_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("clock_mem_mhz", 1.0),
}
_BYTES = {"memory_used_bytes", "memory_free_bytes", "memory_reserved_bytes"}


def query(node: str, node_label: str = promql.DEFAULT_NODE_LABEL) -> str:
    return promql.node_selector_query("|".join(sorted(FIELDS)), node, node_label)


def reading_from(vector: promql.Vector, node: str) -> GpuReading:
    """One sample a GPU (label ``gpu``, its index); none at all: N/A, said once as an error."""
    gpus: dict[int, GpuSample] = {}
    for labels, value in vector:
        field = FIELDS.get(labels.get("__name__", ""))
        index = labels.get("gpu", "")
        if field is None or not index.isdigit():
            continue
        gpu = gpus.setdefault(int(index), GpuSample(int(index)))
        gpu.name = gpu.name or labels.get("modelName")
        gpu.uuid = gpu.uuid or labels.get("UUID")
        if value is not None:
            name, scale = field
            setattr(gpu, name, int(value * scale) if name in _BYTES else value * scale)
    if not gpus:
        return GpuReading([], f"N/A: Prometheus holds no DCGM_FI_DEV_* metric for {node}")
    for gpu in gpus.values():
        if gpu.memory_used_bytes is not None and gpu.memory_free_bytes is not None:
            gpu.memory_total_bytes = (
                gpu.memory_used_bytes + gpu.memory_free_bytes + (gpu.memory_reserved_bytes or 0)
            )
    return GpuReading([gpus[i] for i in sorted(gpus)])
