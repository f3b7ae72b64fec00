"""A stalled engine (the simulator told to stall: /health and /metrics answer, nothing moves):
the gate sheds its lane until it moves again, and the dashboard, ``watch`` and ``snapshot``
say STALLED with how long."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES, LaneLimits
from gpuwatch.gate.server import Gate, start_gate
from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.sim.node import SimNode
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from gpuwatch.tui.app import GpuwatchApp
from tests.functional.test_tui import text
from tests.helpers import eventually

PROFILE = get_profile("rtx4090-llama3-8b-awq")
# Seconds of no progress that make a stall here: short, so the tests take seconds.
AFTER_S = 1.0
LONG = {"prompt": "the node is stuck", "max_tokens": 12000, "ignore_eos": True, "stream": True}
SHORT = {"prompt": "the node moves", "max_tokens": 4}


class Stream:
    """One long streamed completion in the background, counting the chunks it got."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.chunks = 0
        self.status: int | None = None
        self.task = asyncio.create_task(self._run(session, url))

    async def _run(self, session: aiohttp.ClientSession, url: str) -> None:
        async with session.post(f"{url}/v1/completions", json=LONG) as r:
            self.status = r.status
            async for _ in r.content.iter_any():
                self.chunks += 1

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def post(session: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, str], Any]:
    async with session.post(f"{url}/v1/completions", json=SHORT) as r:
        return r.status, dict(r.headers), await r.json()


async def get(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as r:
        assert r.status == 200, await r.text()
        return await r.json()


@dataclass
class Stack:
    node: SimNode
    sim: str
    gate: Gate
    url: str


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    """The simulator behind a gate that reads its /metrics; chat admits one request at a time,
    so a second one waits in its queue."""
    node, sim = await start_sim(PROFILE, seed=5)
    chat = replace(DEFAULT_LANES[0], limits=LaneLimits(max_inflight=1, max_queue=4))
    gate, served = await start_gate(
        sim.url,
        GateConfig((chat, *DEFAULT_LANES[1:])),
        state_file=tmp_path / "state.json",
        upstream_metrics=f"{sim.url}/metrics",
        stall_after_s=AFTER_S,
    )
    yield Stack(node, sim.url, gate, served.url)
    await served.close()
    await sim.close()


async def test_the_gate_sheds_a_stalled_upstream_and_admits_again_when_it_moves(
    stack: Stack,
) -> None:
    async with aiohttp.ClientSession() as s:
        stream = Stream(s, stack.url)
        await eventually(lambda: stream.chunks > 3, message="the stream never started")
        queued = asyncio.create_task(post(s, stack.url))
        status_url = f"{stack.url}/admin/status"

        async def queued_in_chat() -> bool:
            return (await get(s, status_url))["lanes"]["chat"]["queued"] == 1

        await eventually(queued_in_chat)
        assert (await get(s, f"{stack.sim}/sim/stall"))["stalled"] is False
        async with s.post(f"{stack.sim}/sim/stall") as r:
            assert r.status == 200 and (await r.json())["stalled"] is True

        async def stall_seen() -> Any:
            status = await get(s, status_url)
            return status if status["stall"]["stalled"] else None

        status = await eventually(stall_seen, message="the gate never saw the stall")
        now = status["stall"]["now"]
        assert now["signal"] == "metrics" and now["for_s"] > AFTER_S
        assert "1 running" in now["detail"], now
        assert status["stall"]["lanes"] == ["chat"]
        assert status["lanes"]["chat"]["shed"] == "upstream_stalled"
        assert status["lanes"]["embed"]["shed"] is None  # runs apart from the text engine
        # The request that waited in the queue would have waited for nothing: refused.
        code, headers, body = await queued
        assert (code, headers.get("Retry-After")) == (503, "5"), body
        assert body["error"]["code"] == "upstream_stalled"
        # So is a new one, at once, with the error the OpenAI clients read.
        code, headers, body = await post(s, stack.url)
        assert (code, headers.get("Retry-After")) == (503, "5")
        assert body["error"]["code"] == "upstream_stalled"
        assert "the upstream is stalled" in body["error"]["message"]
        async with s.get(f"{stack.url}/metrics") as r:
            page = await r.text()
        assert "gpuwatch_gate_upstream_stalled 1.0" in page
        assert 'gpuwatch_gate_rejected_total{lane="chat",reason="upstream_stalled"} 2.0' in page
        audit = (await get(s, f"{stack.url}/admin/audit"))["entries"]
        assert audit[0]["actor"] == "stall" and audit[0]["reason"].startswith("upstream stalled")
        assert audit[0]["change"] == {"lanes": {"chat": {"shed": "upstream_stalled"}}}
        assert "1 queued refused" in audit[0]["reason"]

        held = stream.chunks
        async with s.post(f"{stack.sim}/sim/resume") as r:
            assert (await r.json())["stalled"] is False

        async def moving_again() -> Any:
            status = await get(s, status_url)
            return status if not status["stall"]["stalled"] else None

        status = await eventually(moving_again, message="the gate never saw the end")
        assert status["lanes"]["chat"]["shed"] is None
        assert status["stall"]["last"]["signal"] == "metrics"
        await eventually(lambda: stream.chunks > held, message="the held stream never resumed")
        audit = (await get(s, f"{stack.url}/admin/audit"))["entries"]
        assert audit[0]["actor"] == "stall"
        assert audit[0]["reason"].startswith("upstream moving again after")
        assert audit[0]["change"] == {"lanes": {"chat": {"shed": None}}}
        await stream.close()  # its slot is free: the one chat admits at a time
        code, _, body = await post(s, stack.url)
        assert code == 200 and body["usage"]["completion_tokens"] == 4


async def test_the_simulator_stalls_for_a_given_time_and_refuses_bad_bodies(
    stack: Stack,
) -> None:
    async with aiohttp.ClientSession() as s:
        for bad in (b"[]", b'{"seconds": -1}', b'{"seconds": true}', b'{"seconds": 1e400}',
                    b'{"seconds": 1, "x": 2}', b"{", b'{"seconds": "3"}'):  # fmt: skip
            async with s.post(f"{stack.sim}/sim/stall", data=bad) as r:
                assert r.status == 400, bad
                assert (await r.json())["error"]["message"], bad
        async with s.post(f"{stack.sim}/sim/stall", data=b"x" * 5000) as r:
            assert r.status == 413
        assert stack.node.stalled_since is None  # none of them stalled it
        async with s.post(f"{stack.sim}/sim/stall", json={"seconds": 0.3}) as r:
            state = await r.json()
        assert state["stalled"] and state["until"] > state["since"]
        await eventually(lambda: stack.node.stalled_since is None, message="never resumed")
        async with s.delete(f"{stack.sim}/sim/stall") as r:
            assert (await r.json())["stalled"] is False


async def watch_lines(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuwatch", "watch", "--no-gpu", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def next_frame(proc: asyncio.subprocess.Process, want: Any) -> dict[str, Any]:
    """The next JSON frame ``want`` accepts (frames come every interval)."""
    assert proc.stdout is not None
    while True:
        line = await proc.stdout.readline()
        assert line, "watch ended"
        frame = json.loads(line)
        if want(frame):
            return frame


async def test_watch_snapshot_and_the_dashboard_say_stalled_with_how_long(
    stack: Stack, tmp_path: Path
) -> None:
    metrics = f"{stack.sim}/metrics"
    async with aiohttp.ClientSession() as s:
        stream = Stream(s, stack.sim)  # straight to the engine
        await eventually(lambda: stream.chunks > 3)
        proc = await watch_lines(
            "--metrics", metrics, "--interval", "0.3", "--json", "--slo", f"stall_after_s={AFTER_S}"
        )
        try:
            engine = await asyncio.wait_for(
                next_frame(proc, lambda f: (f["engines"][0].get("gen_tps_10s") or 0) > 0), 30
            )
            assert engine["engines"][0]["stalled_for_s"] is None
            async with s.post(f"{stack.sim}/sim/stall"):
                pass
            frame = await asyncio.wait_for(
                next_frame(proc, lambda f: f["engines"][0]["stalled_for_s"] is not None), 30
            )
            assert frame["engines"][0]["stalled_for_s"] > AFTER_S
            assert frame["health"]["level"] == "OVERLOADED"
            assert frame["health"]["reason"].startswith("no progress for")
            assert "vllm Llama-3.1-8B-Instruct-AWQ @" in frame["health"]["reason"]
            assert "1 running" in frame["health"]["reason"]

            # One read has no time to see a stall in; --stall-after watches for it.
            snap = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gpuwatch", "snapshot", "--no-gpu", "--json",
                "--metrics", metrics, "--stall-after", "1.5",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(snap.communicate(), 30)
            assert snap.returncode == 0, err
            doc = json.loads(out)
            assert doc["stall_check_s"] == 1.5
            [engine] = doc["engines"]
            assert engine["stalled_for_s"] >= 1.5 and engine["running"] == 1

            app = GpuwatchApp(
                live_session(
                    DashboardOptions(urls=[metrics], interval_s=0.2, slo={"stall_after_s": AFTER_S})
                )
            )
            async with app.run_test(size=(160, 48)) as pilot:
                await eventually(
                    lambda: (
                        "STALLED" in text(app, "EnginePanel")
                        and "STALLED" in text(app, "HeaderBar")
                    ),
                    pause=lambda: pilot.pause(0.1),
                    message=lambda: text(app, "EnginePanel"),
                )
                async with s.post(f"{stack.sim}/sim/resume"):
                    pass
                await eventually(
                    lambda: (
                        "STALLED" not in text(app, "EnginePanel")
                        and "moving again after" in text(app, "EventsPanel")
                    ),
                    pause=lambda: pilot.pause(0.1),
                    message=lambda: text(app, "EnginePanel") + text(app, "EventsPanel"),
                )
            frame = await asyncio.wait_for(
                next_frame(proc, lambda f: f["engines"][0]["stalled_for_s"] is None), 30
            )
            assert (
                frame["health"]["level"] != "OVERLOADED"
                or "no progress" not in frame["health"]["reason"]
            )
        finally:
            proc.kill()
            await proc.wait()
            await stream.close()


def gw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", *args], capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--stall-after", "nan"], "--stall-after"),
        (["--stall-after", "-1"], "from 0 (off) to 3600"),
        (["--stall-after", "1e9"], "from 0 (off) to 3600"),
        (["--stall-lanes", "chat,nope\x1b[31m"], "no lane 'nope\\x1b[31m'"),
    ],
)
def test_the_gate_refuses_bad_stall_flags_with_a_line(flags: list[str], said: str) -> None:
    out = gw("gate", "--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:0", *flags)
    assert out.returncode == 2 and said in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_sigusr1_toggles_the_simulator_s_stall() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "sim", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split(" on ")[1].split()[0]
        proc.send_signal(signal.SIGUSR1)
        assert proc.stdout.readline().strip() == (
            "gpuwatch sim: engines stalled until the next SIGUSR1"
        )
        assert httpx.get(f"{url}/sim/stall").json()["stalled"] is True
        assert httpx.get(f"{url}/health").status_code == 200  # alive, stuck
        proc.send_signal(signal.SIGUSR1)
        assert proc.stdout.readline().strip() == "gpuwatch sim: engines resumed"
        assert httpx.get(f"{url}/sim/stall").json()["stalled"] is False
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
