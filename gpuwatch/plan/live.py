"""Probes against a real endpoint, in real time: ``gpuwatch load``'s runner at each rate.

Each probe sends the sweep's traffic with ``LoadRun`` (the same arrivals, lengths and lane mix
as ``gpuwatch load``) for the probe's duration, then waits for what is in flight, at most
``drain_s`` more; whatever has not finished by then is cut off and counts as a miss. While it
runs, the requests in flight are sampled (the batch the endpoint held), and with a
``/metrics`` URL the engine's KV usage, waiting queue and preemptions are read through the
dashboard's own scrape and dialects (vLLM, SGLang, llama.cpp, TGI, the simulator).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuwatch.load.runner import LoadRun, Result
from gpuwatch.load.spec import LoadSpec
from gpuwatch.plan.planner import DEFAULT_HEADROOM, Plan, caveats
from gpuwatch.plan.probe import Outcome, ProbeResult, Target, summarize
from gpuwatch.plan.recommend import recommend
from gpuwatch.plan.sweep import Search, SearchSettings, sequence_seed
from gpuwatch.plan.traffic import Traffic
from gpuwatch.series import sample_quantile


@dataclass
class LiveSettings:
    url: str
    model: str | None = None
    api: str = "chat"
    metrics_url: str | None = None
    drain_s: float = 30.0
    sample_every_s: float = 0.25


@dataclass
class _Watch:
    kv_peak: float | None = None
    waiting_peak: float | None = None
    preempt_first: float | None = None
    preempt_last: float | None = None


def concurrency(results: list[Result]) -> list[int]:
    """Requests in flight as each one was sent (itself included): the batch the endpoint was
    asked to hold, exact from the results (a sampler misses requests shorter than its period)."""
    sent = sorted(r.sent for r in results if r.sent)
    ends = sorted(r.sent + (r.e2e if r.e2e is not None else 0.0) for r in results if r.sent)
    out, j = [], 0
    for i, t in enumerate(sent):
        while j < len(ends) and ends[j] < t:
            j += 1
        out.append(i + 1 - j)
    return out


def outcome(r: Result) -> Outcome:
    if r.ok:
        return Outcome(r.ttft, max(r.itl) if r.itl else None)
    return Outcome(None, None, str(r.status) if r.status is not None else "cancelled")


async def probe(
    settings: LiveSettings,
    traffic: Traffic,
    rate: float,
    duration_s: float,
    target: Target,
    seed: int = 0,
    on_tick: Callable[[LoadRun], None] | None = None,
) -> ProbeResult:
    wall0 = time.perf_counter()
    spec = LoadSpec(
        url=settings.url.rstrip("/"),
        rate=rate,
        model=settings.model,
        api=settings.api,
        duration_s=duration_s,
        burstiness=traffic.burstiness,
        pattern=traffic.pattern,
        prompt_tokens=traffic.prompt_tokens,
        output_tokens=traffic.output_tokens,
        lane_mix=traffic.lane_mix,
        seed=seed,
    )
    shapes = None
    if traffic.recording is not None:
        # The recording's own times and shapes, scaled to this rate, as the simulator replays it.
        shapes = [
            (a.t, a.lane, a.prompt, a.output) for a in traffic.arrivals(rate, duration_s, seed)
        ]
        lanes = sorted({lane for _, lane, _, _ in shapes}) or ["chat"]
        spec = replace(spec, lane_mix={lane: 1 / len(lanes) for lane in lanes})
    run = LoadRun(spec, shapes=shapes)
    watch = _Watch()
    task = asyncio.create_task(run.run())
    scraper = _Scraper(settings.metrics_url) if settings.metrics_url else None
    deadline: float | None = None
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=settings.sample_every_s)
            if scraper is not None:
                await scraper.read(watch)
            if on_tick is not None:
                on_tick(run)
            if run.started and deadline is None:
                deadline = run.started + duration_s + settings.drain_s
            if deadline is not None and time.perf_counter() > deadline and not run.stopped:
                run.stop()  # what is still in flight is cut off after a grace, and misses
        results = task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if scraper is not None:
            await scraper.close()
    settings.model = run.model  # looked up once, reused by the next probes
    chat = [r for r in results if r.lane == "chat"]
    gaps = [g for r in chat if r.ok for g in r.itl]
    elapsed = (run.ended - run.started) if run.ended else duration_s
    result, _ = summarize(rate, duration_s, [outcome(r) for r in chat], gaps, target, elapsed)
    samples = sorted(concurrency(results))
    result.batch_p99 = round(sample_quantile(samples, 0.99)) if samples else None
    result.batch_max = samples[-1] if samples else None
    result.kv_peak = watch.kv_peak
    result.queue_peak = None if watch.waiting_peak is None else round(watch.waiting_peak)
    if watch.preempt_first is not None and watch.preempt_last is not None:
        result.preemptions = round(watch.preempt_last - watch.preempt_first)
    result.wall_s = time.perf_counter() - wall0
    return result


class _Scraper:
    def __init__(self, url: str) -> None:
        from gpuwatch.httpclient import async_client

        self.url = url
        self.client = async_client(timeout_s=1.0)

    async def read(self, watch: _Watch) -> None:
        from gpuwatch.sources.scrape import scrape

        found = await scrape(self.client, self.url, total_timeout_s=1.0)
        if found.error or not found.engines:
            return
        kv = [e.kv_cache_usage for e in found.engines if e.kv_cache_usage is not None]
        waiting = [e.waiting for e in found.engines if e.waiting is not None]
        pre = [e.preemptions_total for e in found.engines if e.preemptions_total is not None]
        if kv:
            watch.kv_peak = max(max(kv), watch.kv_peak or 0.0)
        if waiting:
            watch.waiting_peak = max(sum(waiting), watch.waiting_peak or 0.0)
        if pre:
            total = sum(pre)
            watch.preempt_first = total if watch.preempt_first is None else watch.preempt_first
            watch.preempt_last = total

    async def close(self) -> None:
        await self.client.aclose()


def sweep_live(
    settings: LiveSettings,
    traffic: Traffic,
    target: Target,
    search_settings: SearchSettings,
    seed: int = 0,
    headroom: float = DEFAULT_HEADROOM,
    budget_s: float | None = None,
    gate: str | None = None,
    on_probe: Callable[[ProbeResult], None] | None = None,
    on_tick: Callable[[float, LoadRun], None] | None = None,
) -> Plan:
    """The sweep against a real endpoint; stops searching when ``budget_s`` is spent (the
    probe running then finishes)."""
    wall0 = time.perf_counter()

    def out_of_time() -> bool:
        return budget_s is not None and time.perf_counter() - wall0 >= budget_s

    search = Search(target, search_settings, out_of_time=out_of_time, on_probe=on_probe)

    def prober(rate: float, duration: float, sequence: int) -> ProbeResult:
        def tick(run: LoadRun) -> None:
            if on_tick is not None:
                on_tick(rate, run)

        seq_seed = sequence_seed(seed, sequence)
        return asyncio.run(probe(settings, traffic, rate, duration, target, seq_seed, tick))

    knee = search.run(prober)
    plan = Plan("url", settings.url, target, traffic.describe(), seed, headroom, knee,
                search.probes, None, gate=gate)  # fmt: skip
    plan.judged_as(search)
    at_knee = plan.at_knee
    if knee is not None and at_knee is not None:
        plan.recommended = recommend(knee, at_knee, target, traffic)
    else:
        plan.notes.append("no rate passed: even the lowest rate tried misses the SLO")
    caveats(plan)
    if out_of_time():
        plan.notes.append(f"the time budget ({budget_s:g} s) ended the search")
    plan.simulated_s = sum(p.duration_s * p.sequences for p in search.probes)
    plan.wall_s = time.perf_counter() - wall0
    return plan
