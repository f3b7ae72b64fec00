"""A real llama-server stopped mid-stream (SIGSTOP) and resumed (SIGCONT): the gate sheds its
lane while it is stuck and admits again when it moves.

A stopped server answers nothing, /metrics included: the gate reads its page
(``--upstream-metrics``) while it answers and the stream it relays when it does not.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from tests.helpers import eventually
from tests.realstack.conftest import running_llama_server
from tests.realstack.tinymodel import write_tiny_llama

AFTER_S = 1.0
# Tokens of context: the answer streamed through the gate takes seconds (about 500 tokens a
# second on one idle core), long enough to be stopped in the middle of.
CTX = 8192
# llama-server on 2 busy cores answers in seconds, not milliseconds: room for that.
WAIT_S = 60.0
LONG = aiohttp.ClientTimeout(total=900)


async def status(session: aiohttp.ClientSession, gate: str) -> Any:
    async with session.get(f"{gate}/admin/status") as r:
        return await r.json()


@pytest.fixture
def stoppable(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A llama-server of this test's own (the session's is never stopped): one slot with a
    context long enough for an answer of several seconds. (URL, pid)."""
    model = write_tiny_llama(tmp_path / "tiny.gguf", ctx=CTX)
    with running_llama_server(model, tmp_path / "log", "-np", "1", "-c", str(CTX)) as (url, proc):
        yield url, proc.pid


async def test_a_stopped_llama_server_is_shed_and_admitted_again_when_resumed(
    stoppable: tuple[str, int], tmp_path: Path
) -> None:
    llama_server, pid = stoppable
    gate, served = await start_gate(
        llama_server,
        GateConfig(DEFAULT_LANES),
        state_file=tmp_path / "s.json",
        upstream_metrics=f"{llama_server}/metrics",
        stall_after_s=AFTER_S,
    )
    chunks: list[float] = []  # when each chunk of the long stream came
    stopped = False
    try:
        async with aiohttp.ClientSession(timeout=LONG) as s:
            body = {"prompt": "the node", "max_tokens": CTX - 100, "stream": True,
                    "ignore_eos": True}  # fmt: skip

            async def stream() -> None:
                async with s.post(f"{served.url}/v1/completions", json=body) as r:
                    assert r.status == 200
                    async for _ in r.content.iter_any():
                        chunks.append(time.monotonic())

            task = asyncio.create_task(stream())
            # Working: for several stall times the page says so, though llama.cpp counts a
            # request's tokens only when it ends (its forward passes move every step).
            seen: list[Any] = []

            async def streamed_a_while() -> bool:
                seen.append((await status(s, served.url))["stall"])
                return len(chunks) > 2 and chunks[-1] - chunks[0] > 3 * AFTER_S

            await eventually(
                streamed_a_while,
                WAIT_S,
                message=lambda: f"the stream did not flow: {len(chunks)} chunks, {task}",
            )
            assert not any(st["stalled"] for st in seen), seen
            assert any(st["signal"] == "metrics" for st in seen), seen

            os.kill(pid, signal.SIGSTOP)
            stopped = True
            held = len(chunks)

            async def shed() -> Any:
                st = await status(s, served.url)
                return st if st["stall"]["stalled"] else None

            st = await eventually(shed, WAIT_S, message="the gate never saw the stop")
            # /metrics does not answer a stopped server: the stream the gate relays told it.
            assert st["stall"]["now"]["signal"] == "streams", st["stall"]
            assert st["lanes"]["chat"]["shed"] == "upstream_stalled"
            async with s.post(
                f"{served.url}/v1/completions", json={"prompt": "x", "max_tokens": 2}
            ) as r:
                assert r.status == 503 and r.headers["Retry-After"] == "5"
                assert (await r.json())["error"]["code"] == "upstream_stalled"

            os.kill(pid, signal.SIGCONT)
            stopped = False

            async def admitted() -> Any:
                st = await status(s, served.url)
                return st if not st["stall"]["stalled"] else None

            st = await eventually(admitted, WAIT_S, message="the gate never saw it move")
            assert st["lanes"]["chat"]["shed"] is None
            await eventually(lambda: len(chunks) > held, WAIT_S, message="no chunk after SIGCONT")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            async with s.post(
                f"{served.url}/v1/completions", json={"prompt": "x", "max_tokens": 2}
            ) as r:
                assert r.status == 200, await r.text()
            async with s.get(f"{served.url}/admin/audit") as r:
                entries = (await r.json())["entries"]
            reasons = [e["reason"] for e in entries if e["actor"] == "stall"]
            assert reasons[0].startswith("upstream moving again after")
            assert reasons[1].startswith("upstream stalled") and "streams:" in reasons[1]
    finally:
        if stopped:  # a stopped process does not end on SIGTERM: let it go on first
            os.kill(pid, signal.SIGCONT)
        await served.close()
