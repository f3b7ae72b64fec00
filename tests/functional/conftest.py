from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gpuwatch.sim.node import SimNode
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim

PROFILE = get_profile("rtx4090-llama3-8b-awq")


@pytest.fixture
async def sim() -> AsyncIterator[tuple[SimNode, str]]:
    """A simulator at 10x time on a free port: (node, base URL)."""
    node, served = await start_sim(PROFILE, time_scale=10.0, seed=1, model_name="sim-model")
    yield node, served.url
    await served.close()
