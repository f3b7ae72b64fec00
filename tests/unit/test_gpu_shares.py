"""The GPU panel's serving share split per container (tui/widgets/gpus.py)."""

from __future__ import annotations

from gpuwatch.model import ContainerInfo, GpuSample, MigInstance, ProcessInfo
from gpuwatch.tui.widgets.gpus import gpu_line, shares

GIB = 2**30
VLLM = ContainerInfo("a" * 64, "docker", "vllm")
EMBED = ContainerInfo("b" * 64, "podman", "embed")


def sample(*procs: ProcessInfo, used: int = 70 * GIB) -> GpuSample:
    return GpuSample(0, "NVIDIA H100 80GB HBM3", memory_total_bytes=80 * GIB,
                     memory_used_bytes=used, processes=list(procs))  # fmt: skip


def test_shares_by_container_largest_first() -> None:
    g = sample(
        ProcessInfo(1, container=VLLM, used_memory_bytes=40 * GIB),
        ProcessInfo(2, container=VLLM, used_memory_bytes=10 * GIB),  # same container, summed
        ProcessInfo(3, used_memory_bytes=6 * GIB),
        ProcessInfo(4, container=EMBED, used_memory_bytes=8 * GIB),
        ProcessInfo(5, visible=False, used_memory_bytes=2 * GIB),
        ProcessInfo(6, container=EMBED, used_memory_bytes=None),  # NVML gave no figure
    )
    assert shares(g) == [
        ("vllm", 50 * GIB), ("embed", 8 * GIB), ("no container", 6 * GIB),
        ("not visible", 2 * GIB),
    ]  # fmt: skip
    line = gpu_line(g, 20, compact=False, width=160)
    assert "serving 66.0G:" in line and "vllm 50.0G" in line and "embed 8.0G" in line
    assert "no container 6.0G" in line and "not visible 2.0G" in line


def test_one_holder_or_no_container_is_not_split() -> None:
    alone = sample(ProcessInfo(1, container=VLLM, used_memory_bytes=60 * GIB))
    bare = sample(ProcessInfo(1, used_memory_bytes=30 * GIB), ProcessInfo(2, used_memory_bytes=GIB))
    assert "[$kv]serving 60.0G[/]" in gpu_line(alone, 20, compact=False, width=160)
    assert "[$kv]serving 31.0G[/]" in gpu_line(bare, 20, compact=False, width=160)


def test_the_bar_is_split_and_scaled_to_used_memory() -> None:
    # Per-process figures adding up to more than "used": the bar never passes the used memory.
    g = sample(
        ProcessInfo(1, container=VLLM, used_memory_bytes=60 * GIB),
        ProcessInfo(2, container=EMBED, used_memory_bytes=20 * GIB),
        used=40 * GIB,
    )
    line = gpu_line(g, 40, compact=True)
    assert "[$kv]" + "█" * 15 + "[/]" in line and "[$ttft]" + "█" * 5 + "[/]" in line
    assert "░" * 20 in line


def test_mig_devices_line() -> None:
    g = sample(ProcessInfo(1, used_memory_bytes=GIB))
    g.mig = [MigInstance(1, 0, "3g.40gb", None, 40 * GIB, 30 * GIB),
             MigInstance(2, 0, "4g.40gb", None, 40 * GIB, 0, utilization_gpu=0.5)]  # fmt: skip
    line = gpu_line(g, 20, compact=False, width=160)
    assert "MIG 3g.40gb 30.0G/40.0G" in line and "MIG 4g.40gb 0.0G/40.0G 50%" in line
