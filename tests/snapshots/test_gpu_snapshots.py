"""SVG snapshots of who holds the GPUs: the GPU screen (``g``) and the dashboard's GPU panel on
a node shared by containers of each runtime, one GPU in MIG mode (scripts/shared_gpus.py: the
fake NVML backend through NvmlReader, containers from cgroup lines through the real parser).

Update after an intended change: pytest tests/snapshots --snapshot-update
"""

from __future__ import annotations

import pytest

from scripts import scenario
from scripts.shared_gpus import node_reading, with_shared_gpus
from tests.snapshots.test_dashboard_snapshots import _paint, utc  # noqa: F401


def test_the_reading_behind_the_pictures() -> None:
    """What the pictures show, said in numbers: each process's container and instance."""
    whole, mig = node_reading().gpus
    labels = [p.container.label if p.container else None for p in whole.processes]
    assert labels == ["vllm", "embed", "notebook-0/jupyter", None]
    assert [p.container.runtime for p in whole.processes[:3]] == [  # type: ignore[union-attr]
        "docker", "podman", "containerd",
    ]  # fmt: skip
    assert whole.processes[-1].visible is False and whole.mig_mode is False
    assert [m.profile for m in mig.mig] == ["4g.40gb", "2g.20gb", "1g.10gb"]
    assert [(p.pid, p.gpu_instance_id) for p in mig.processes] == [(2210, 1), (2304, 2)]
    sglang = mig.processes[0].container
    assert sglang is not None and (sglang.runtime, sglang.label) == ("cri-o", "llm-1/7b2e6f01a9c8")


def _app():  # type: ignore[no-untyped-def]
    return scenario.app_for(with_shared_gpus(scenario.build(seconds=20)))


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_gpu_screen(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _paint(pilot)
        await pilot.press("g")
        await pilot.pause()

    assert snap_compare(_app(), terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_gpu_panel_split_by_container(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(_app(), terminal_size=size, run_before=_paint)
