"""``gpuwatch plan sweep`` against real servers on loopback: its advice, run for real, holds the
SLO where the gate's defaults do not; ``--apply`` changes a real gate, audited; read-only
refuses with nothing sent; ``--url`` sweeps a real endpoint."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from gpuwatch.adminapi import LimitsPatch
from gpuwatch.control.gate import GateClient
from gpuwatch.control.guard import Guard
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES, LaneLimits
from gpuwatch.gate.server import start_gate
from gpuwatch.load import LoadRun, LoadSpec
from gpuwatch.load.spec import Dist
from gpuwatch.plan.traffic import DEFAULT_BURSTINESS, DEFAULT_OUTPUT, DEFAULT_PROMPT
from gpuwatch.series import sample_quantile
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from tests.functional.fleetkit import child
from tests.functional.servers import ThreadedServer
from tests.helpers import refusing_port, stop_process

ROOT = Path(__file__).resolve().parents[2]
PROFILE_NAME = "rtx4090-llama3-8b-awq"
# The real runs go this many times faster than simulated time: TTFTs and rates scale with it.
# Every wall second an event loop is late counts TIME_SCALE simulated ones, so the simulator
# and the gate run as their own processes (as operators run them), not on the load generator's
# loop: sharing one loop at 5, a CI run read the boring zone's p99 at 2.9 s where it holds at 2.
TIME_SCALE = 2.5
PROFILE = get_profile(PROFILE_NAME)
RUN_SIM_S = 120.0  # simulated seconds of each real run (48 s of wall time)


async def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str, float]:
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuwatch", "plan", "sweep", *args,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode(), time.perf_counter() - t0


async def _run_for_real(tmp: Path, rate: float, limits: dict[str, Any] | None) -> dict[str, Any]:
    """The sweep's traffic at ``rate`` (simulated req/s) through a fresh gate in front of a
    fresh simulator, for RUN_SIM_S simulated seconds; the gate's goodput and the clients' p99
    TTFT in simulated seconds."""
    tmp.mkdir(parents=True, exist_ok=True)
    sim, sim_url = await asyncio.to_thread(
        child, "sim", "--profile", PROFILE_NAME, "--time-scale", str(TIME_SCALE), "--seed", "3"
    )
    gate, gate_url = await asyncio.to_thread(
        child, "gate", "--upstream", sim_url, "--state-file", str(tmp / "state.json")
    )
    try:
        if limits is not None:
            async with GateClient(gate_url, None, Guard(), actor="test") as client:
                await client.patch(LimitsPatch(lanes={"chat": limits}))
        spec = LoadSpec(
            url=gate_url, rate=rate * TIME_SCALE, duration_s=RUN_SIM_S / TIME_SCALE, seed=11,
            burstiness=DEFAULT_BURSTINESS, prompt_tokens=Dist.parse(DEFAULT_PROMPT, "p"),
            output_tokens=Dist.parse(DEFAULT_OUTPUT, "o"),
        )  # fmt: skip
        results = await LoadRun(spec).run()
        async with httpx.AsyncClient() as c:
            bound = f"{2.0 / TIME_SCALE:g}"
            status = (await c.get(f"{gate_url}/admin/status", params={"ttft_s": bound})).json()
            in_force = (await c.get(f"{gate_url}/admin/limits")).json()["lanes"]["chat"]
    finally:
        stop_process(gate)
        stop_process(sim)
    ttfts = sorted(r.ttft for r in results if r.ok and r.ttft is not None)
    return {
        "goodput": status["lanes"]["chat"]["goodput"]["5m"],
        "ttft_p99_sim_s": sample_quantile(ttfts, 0.99) * TIME_SCALE if ttfts else None,
        "requests": len(results),
        "limits": in_force,
    }


# The sweep, then two real runs of 48 s each: past the suite's 120 s on a busy machine.
@pytest.mark.timeout(360)
async def test_the_boring_zone_holds_for_real_and_1_5x_with_default_limits_does_not(
    tmp_path: Path,
) -> None:
    code, out, err, _ = await _cli(
        "--profile", PROFILE_NAME, "--slo", "ttft_p99_s=2",
        "--json", str(tmp_path / "plan.json"),
        env={"XDG_STATE_HOME": str(tmp_path / "state")},
    )  # fmt: skip
    assert code == 0, err
    # The knee chart, in the terminal: both series, the knee and the boring zone marked.
    assert "rate vs TTFT p99 and goodput" in out and "requests/s" in out
    assert "knee" in out and "boring" in out and "⠉" in out  # braille: the plotted curve
    plan = json.loads((tmp_path / "plan.json").read_text())
    saved = tmp_path / "state" / "gpuwatch" / "plans" / "rtx4090-llama3-8b-awq.json"
    assert json.loads(saved.read_text())["knee_rps"] == plan["knee_rps"]
    knee, boring = plan["knee_rps"], plan["boring_rps"]
    assert knee > 0 and abs(boring - 0.7 * knee) < 1e-9
    limits = {k: plan["recommended"][k] for k in ("max_inflight", "max_queue", "max_output_tokens")}
    assert f"boring zone: <= {boring:.2f} req/s" in out

    good = await _run_for_real(tmp_path / "a", boring, limits)
    assert good["limits"]["max_inflight"] == limits["max_inflight"]  # they were in force
    assert good["requests"] > 0.8 * boring * RUN_SIM_S
    assert good["goodput"]["ratio"] >= 0.99, good
    assert good["ttft_p99_sim_s"] <= 2.0, good

    bad = await _run_for_real(tmp_path / "b", 1.5 * boring, None)
    assert bad["limits"]["max_inflight"] == 16 and bad["limits"]["max_queue"] == 64
    assert bad["goodput"]["ratio"] < 0.99, bad
    assert bad["ttft_p99_sim_s"] is None or bad["ttft_p99_sim_s"] > 2.0, bad


# What --apply does with a plan, not how the plan is judged: few, short sequences a rate.
FAST = ("--min-duration", "60", "--max-duration", "120", "--max-probes", "6", "--no-chart",
        "--min-sequences", "2", "--max-sequences", "4")  # fmt: skip


async def test_apply_changes_a_real_gate_and_the_audit_says_plan(tmp_path: Path) -> None:
    _, sim = await start_sim(PROFILE, time_scale=1.0, seed=1)
    _, gate = await start_gate(sim.url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s.json")
    try:
        code, out, err, _ = await _cli(
            *FAST, "--apply", gate.url, "--yes", "--json", str(tmp_path / "plan.json"),
            env={"XDG_STATE_HOME": str(tmp_path / "state")},
        )  # fmt: skip
        assert code == 0, err
        assert "chat.max_inflight 16 ->" in err and "applied: limits v2" in err
        rec = json.loads((tmp_path / "plan.json").read_text())["recommended"]
        async with httpx.AsyncClient() as c:
            limits = (await c.get(f"{gate.url}/admin/limits")).json()
            audit = (await c.get(f"{gate.url}/admin/audit")).json()["entries"]
        chat = limits["lanes"]["chat"]
        assert limits["version"] == 2
        assert (chat["max_inflight"], chat["max_queue"], chat["max_output_tokens"]) == (
            rec["max_inflight"], rec["max_queue"], rec["max_output_tokens"],
        )  # fmt: skip
        assert len(audit) == 1 and audit[0]["actor"] == "plan" and audit[0]["version"] == 2
        # Keyed by the gate it was applied to: the dashboard's P finds it.
        host_port = gate.url.split("//")[1].replace(":", "-")
        assert (tmp_path / "state" / "gpuwatch" / "plans" / f"{host_port}.json").exists()
    finally:
        await gate.close()
        await sim.close()


async def test_apply_without_a_terminal_or_yes_sends_no_change(tmp_path: Path) -> None:
    _, sim = await start_sim(PROFILE, time_scale=1.0, seed=1)
    _, gate = await start_gate(sim.url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s.json")
    try:
        code, _, err, _ = await _cli(*FAST, "--apply", gate.url, "--no-save")
        assert code == 1 and "pass --yes" in err and "not applied" in err
        async with httpx.AsyncClient() as c:
            assert (await c.get(f"{gate.url}/admin/limits")).json()["version"] == 1
            assert (await c.get(f"{gate.url}/admin/audit")).json()["entries"] == []
    finally:
        await gate.close()
        await sim.close()


def test_read_only_refuses_apply_with_nothing_sent(tmp_path: Path) -> None:
    seen: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path}")
        return web.json_response({})

    with ThreadedServer({"/admin/limits": anything, "/admin/status": anything}) as admin:
        url = admin.url("")
        code, _, err, _ = asyncio.run(_cli(*FAST, "--apply", url, "--read-only", "--yes"))
    assert code == 1
    assert "refused: read-only mode (--read-only)" in err
    assert seen == []  # not even the GET


async def test_url_mode_sweeps_a_real_simulator_through_a_gate(tmp_path: Path) -> None:
    """Real time: tiny probes at a high time scale, with the engine's /metrics read."""
    _, sim = await start_sim(PROFILE, time_scale=20.0, seed=2)
    _, gate = await start_gate(sim.url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s.json")
    try:
        code, out, err, _ = await _cli(
            "--url", gate.url, "--metrics", f"{sim.url}/metrics", "--slo", "ttft_p99_s=0.5",
            "--start-rate", "2", "--min-duration", "2", "--max-duration", "2",
            "--max-probes", "3", "--budget", "30", "--quiet", "--no-chart",
            "--output-tokens", "16", "--prompt-tokens", "64:256",
            "--json", str(tmp_path / "plan.json"), "--no-save",
        )  # fmt: skip
    finally:
        await gate.close()
        await sim.close()
    assert code in (0, 1), err
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["mode"] == "url" and plan["subject"] == gate.url
    probes = plan["probes"]
    assert 1 <= len(probes) <= 3 and probes[0]["rate"] == 2
    first = probes[0]
    assert first["arrived"] >= 2 and first["ttft_p50_s"] is not None
    # Read from the simulator's /metrics (None when nothing was read; light load may show 0).
    assert first["kv_peak"] is not None and first["preemptions"] == 0
    assert first["batch_max"] is not None and first["batch_max"] >= 1


async def test_apply_sends_if_match_so_a_change_in_between_is_never_overwritten(
    tmp_path: Path,
) -> None:
    from gpuwatch.control.gate import GateConflict
    from gpuwatch.plan.apply import apply
    from gpuwatch.plan.recommend import Recommendation

    with refusing_port() as port:  # no upstream: only the admin API is used
        _, gate = await start_gate(f"http://127.0.0.1:{port}", GateConfig(DEFAULT_LANES),
                                   state_file=tmp_path / "s.json")  # fmt: skip
    rec = Recommendation("chat", 40, 9, None)
    other = GateClient(gate.url, None, Guard(), actor="someone@else")
    shown: list[list[str]] = []
    loop = asyncio.get_running_loop()

    def confirm_while_someone_changes_it(lines: list[str], reason: str | None) -> bool:
        shown.append(lines)
        # Another operator changes the limits while this one reads the prompt (on the loop the
        # gate runs on; the plan's apply runs in a thread of its own, as the CLI's would).
        change = other.patch(LimitsPatch(lanes={"chat": {"max_queue": 5}}))
        asyncio.run_coroutine_threadsafe(change, loop).result(10)
        return True

    def run_apply() -> None:
        asyncio.run(apply(gate.url, None, Guard(), rec, confirm_while_someone_changes_it))

    try:
        try:
            await asyncio.to_thread(run_apply)
        except GateConflict as exc:
            conflict = exc
        else:
            raise AssertionError("the plan's PATCH was not refused")
        assert conflict.actor == "someone@else" and conflict.version == 2
        limits = await other.limits()
        assert limits.version == 2 and limits.lanes["chat"].max_queue == 5
        assert shown == [["chat.max_inflight 16 -> 40", "chat.max_queue 64 -> 9",
                          "chat.max_output_tokens null -> null (unchanged)"]]  # fmt: skip
    finally:
        await other.close()
        await gate.close()


async def test_url_mode_replays_a_recording_with_its_own_shapes(tmp_path: Path) -> None:
    """--traffic against a real server: the recorded prompts, scaled in time to the rate."""
    from gpuwatch.plan.traffic import Recording, Traffic
    from gpuwatch.sources.scrape import map_page

    report = {"start_times": [0.0, 0.05, 0.1, 0.5, 0.55, 0.6, 1.0, 1.05],
              "input_lens": [100, 200, 300, 400, 500, 600, 700, 800],
              "output_lens": [4, 4, 4, 4, 4, 4, 4, 4]}  # fmt: skip
    (tmp_path / "run.json").write_text(json.dumps(report))
    expected = list(Traffic(recording=Recording.from_report(report)).arrivals(8.0, 2.0, 0))
    _, sim = await start_sim(PROFILE, time_scale=20.0, seed=2)
    try:
        code, _, err, _ = await _cli(
            "--url", sim.url, "--api", "completions", "--traffic", str(tmp_path / "run.json"),
            "--start-rate", "8", "--min-duration", "2", "--max-duration", "2",
            "--max-probes", "1", "--quiet", "--no-chart", "--no-save",
            "--json", str(tmp_path / "plan.json"),
        )  # fmt: skip
        async with httpx.AsyncClient() as c:
            page = (await c.get(f"{sim.url}/metrics")).text
    finally:
        await sim.close()
    assert code in (0, 1), err
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["traffic"].startswith("replay of")
    [probe] = plan["probes"]
    assert probe["arrived"] == len(expected) > 8  # looped: more than one pass in 2 s
    [engine] = map_page("sim", page).engines
    assert engine.prompt_tokens_total == sum(a.prompt for a in expected)  # the recorded sizes


# -- the plan's gate is the gate -----------------------------------------------------------------

# Overload (this profile's knee is ~3 req/s) through limits that each decide: the token budget
# binds before max_inflight (without it the plan predicts ~10 points more), and the queue-wait
# budget refuses most of the excess at once (estimated from the lane's measured drain rate) and
# sheds the rest at its deadline. So the prediction is only right if the plan's gate makes the
# real gate's decisions, on the same arrivals. Every millisecond the real stack's one event loop
# is late (a busy machine) is AGREE_TIME_SCALE simulated ones, on each token and each release:
# a 14B model streams half the tokens a second of the 8B one, and 2.5 x keeps the lateness small
# where 5 x let it cost up to 10 points of goodput on a loaded 2-core machine.
AGREE_PROFILE = get_profile("rtx4090-qwen2.5-14b-awq")
AGREE_TIME_SCALE = 2.5
AGREE_RATE = 5.0
AGREE_SIM_S = 60.0  # 24 s of wall time
AGREE_LIMITS = LaneLimits(
    max_inflight=32, max_queue=6, queue_timeout_s=30.0, max_queue_wait_s=0.8,
    max_inflight_tokens=12_000,
)  # fmt: skip


def _in_real_time(limits: LaneLimits, scale: float) -> LaneLimits:
    """The same limits for a gate in front of a simulator running ``scale`` x faster: every
    time bound shrinks by that factor; counts and tokens stay."""
    wait = limits.max_queue_wait_s
    return replace(
        limits,
        queue_timeout_s=limits.queue_timeout_s / scale,
        max_queue_wait_s=None if wait is None else wait / scale,
    )


async def test_the_plans_gate_predicts_a_real_gates_goodput_on_the_same_arrivals(
    tmp_path: Path,
) -> None:
    from gpuwatch.plan.probe import Target
    from gpuwatch.plan.simulate import run_probe
    from gpuwatch.plan.traffic import Traffic

    target = Target(2.0)
    traffic = Traffic()
    arrivals = list(traffic.arrivals(AGREE_RATE, AGREE_SIM_S, seed=5))
    predicted = run_probe(AGREE_PROFILE, traffic, AGREE_RATE, AGREE_SIM_S, target, AGREE_LIMITS,
                          seed=5)  # fmt: skip
    assert predicted.arrived == len(arrivals) and predicted.attainment is not None
    no_budget = replace(AGREE_LIMITS, max_inflight_tokens=None)
    loose = run_probe(AGREE_PROFILE, traffic, AGREE_RATE, AGREE_SIM_S, target, no_budget, seed=5)
    assert loose.attainment is not None and loose.attainment - predicted.attainment > 0.05

    lanes = tuple(
        replace(lane, limits=_in_real_time(AGREE_LIMITS, AGREE_TIME_SCALE))
        if lane.name == "chat"
        else lane
        for lane in DEFAULT_LANES
    )
    _, sim = await start_sim(AGREE_PROFILE, time_scale=AGREE_TIME_SCALE, seed=5)
    _, gate = await start_gate(sim.url, GateConfig(lanes), state_file=tmp_path / "state.json")
    try:
        # The very arrivals the plan simulated, sent in real time: each request's time, prompt
        # and max_tokens.
        shapes = [(a.t / AGREE_TIME_SCALE, a.lane, a.prompt, a.output) for a in arrivals]
        spec = LoadSpec(url=gate.url, rate=AGREE_RATE, duration_s=AGREE_SIM_S / AGREE_TIME_SCALE)
        results = await LoadRun(spec, shapes=shapes).run()
        async with httpx.AsyncClient() as c:
            status = (await c.get(f"{gate.url}/admin/status")).json()["lanes"]["chat"]
    finally:
        await gate.close()
        await sim.close()
    assert len(results) == len(arrivals)
    good = sum(r.ok and r.ttft is not None and r.ttft * AGREE_TIME_SCALE <= target.ttft_s
               for r in results)  # fmt: skip
    measured = good / len(results)
    rejected = status["rejected_total"]
    print(f"goodput predicted {predicted.attainment:.3f} (refused {predicted.refusals}), "
          f"measured {measured:.3f} (refused {rejected})")  # fmt: skip
    # The regime where the gate decides: it refused a good share, by its queue-wait budget.
    assert rejected.get("queue_deadline", 0) > 0.2 * len(results)
    # Reason by reason: a model that refused as many for another reason would be wrong too.
    for reason in set(rejected) | set(predicted.refusals):
        off = abs(predicted.refusals.get(reason, 0) - rejected.get(reason, 0))
        assert off <= 0.05 * len(results), (reason, predicted.refusals, rejected)
    assert abs(predicted.attainment - measured) <= 0.05, (predicted.attainment, measured)
