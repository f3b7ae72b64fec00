"""Which lanes the dashboard judges: a lane of answers in one piece (images, embeddings) is
left out of the TTFT badge while another lane streams, but a token lane that streamed nothing
in the window because the gate refused all of it is the worst case, not a lane to leave out."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from gpuwatch.control.gate import GateClient
from gpuwatch.control.guard import Guard
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import Lane, LaneLimits
from gpuwatch.gate.server import start_gate
from gpuwatch.monitor.state import Monitor
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim

PROFILE = get_profile("rtx4090-llama3-8b-awq")


async def test_a_token_lane_refused_whole_is_judged_beside_a_streaming_one(
    tmp_path: Path,
) -> None:
    node, sim = await start_sim(PROFILE, time_scale=5.0, seed=2)
    config = GateConfig(
        (
            Lane("chat", ("/v1/chat/completions",), LaneLimits(16, 64, 30.0)),
            # A token lane closed to new work: every request is refused (queue_full).
            Lane("batch", ("/v1/completions",), LaneLimits(0, 0, 30.0)),
            Lane("default", (), LaneLimits()),
        )
    )
    _, served = await start_gate(sim.url, config, state_file=tmp_path / "s.json")
    chat = {"model": node.model_name, "messages": [{"role": "user", "content": "hi " * 50}],
            "max_tokens": 16, "stream": True}  # fmt: skip
    batch = {"model": node.model_name, "prompt": "hi " * 50, "max_tokens": 16, "stream": True}
    try:
        async with aiohttp.ClientSession() as s:

            async def post(path: str, body: dict[str, object]) -> int:
                async with s.post(f"{served.url}{path}", json=body) as r:
                    await r.read()
                    return r.status

            chat_codes = await asyncio.gather(
                *(post("/v1/chat/completions", chat) for _ in range(10))
            )
            batch_codes = await asyncio.gather(*(post("/v1/completions", batch) for _ in range(10)))
        async with GateClient(served.url, None, Guard(read_only=True)) as gate:
            limits, status = await gate.limits(), await gate.status(ttft_s=60.0)
    finally:
        await served.close()
        await sim.close()
    assert set(chat_codes) == {200} and 200 not in batch_codes, (chat_codes, batch_codes)

    monitor = Monitor([f"{sim.url}/metrics"], admin_url=served.url)
    monitor.apply_gate(limits, status)
    assert monitor.gate is not None
    users = monitor.gate.users()
    assert users is not None
    # The refusals count against what users felt: 10 good chat answers of 20 requests.
    assert users.totals["ended"] == 20 and users.totals["refused"] == 10, users.totals
