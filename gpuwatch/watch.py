"""``gpuwatch watch``: the dashboard's numbers without the screen, like ``vmstat 1``.

Polls the same sources with the same code as the dashboard (``gpuwatch.polling`` into a
``Monitor``) and prints, once per interval, one line per engine (a table) or one JSON object per
interval (``--json``), with the same windowed values the dashboard shows, each named with its
window. For scripts and monitoring checks.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import IO, Any

from gpuwatch import polling
from gpuwatch.alerts.node import node_alerts
from gpuwatch.config import AlertSettings, ScrapeSettings
from gpuwatch.control.gate import GateClient
from gpuwatch.control.guard import Guard
from gpuwatch.fmt import clip, duration, num, pct, seconds
from gpuwatch.monitor.figures import (
    EngineFigures,
    all_figures,
    ttft_breakdown,
    users_json,
    users_now,
)
from gpuwatch.monitor.health import badge_text
from gpuwatch.monitor.state import Monitor
from gpuwatch.sources.nvml import NvmlReader

HEADER_EVERY = 20  # the table's header comes back every so many lines, as vmstat's does


@dataclass
class WatchOptions:
    urls: list[str]
    interval_s: float = 1.0
    count: int | None = None  # None: until interrupted
    as_json: bool = False
    admin_url: str | None = None
    admin_token: str | None = None
    slo: dict[str, float | None] = field(default_factory=dict)
    nvml: NvmlReader | None = None
    scrape: ScrapeSettings = field(default_factory=ScrapeSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)


def frame(monitor: Monitor) -> dict[str, Any]:
    """One interval's state: the badge, each engine's figures, the GPUs, the gate's lanes."""
    engines = [f.to_json() for f in all_figures(monitor)]
    down = [
        {"source": ep.url, "state": ep.status.state, "reason": ep.status.reason}
        for ep in monitor.endpoints.values()
        if ep.status.state != "UP"
    ]
    breakdown = ttft_breakdown(monitor)
    users = users_now(monitor)
    gate = monitor.gate
    lanes = None
    if gate is not None and gate.limits is not None:
        lanes = {
            name: {
                "inflight": live.inflight if live else None,
                "queued": live.queued if live else None,
                "max_inflight": lane.max_inflight,
                "max_queue": lane.max_queue,
                # "upstream_stalled" while the gate sheds the lane for a stalled upstream.
                "shed": live.shed if live else None,
                f"refused_per_s_{gate.refusal_window}": {
                    reason: round(gate.refusal_rate(name, reason), 6)
                    for (lane_name, reason) in gate.refusals
                    if lane_name == name
                },
            }
            for name, lane in gate.limits.lanes.items()
            for live in (gate.lanes.get(name),)
        }
    gpus = None
    if monitor.gpus is not None:
        gpus = [
            {
                "index": g.index,
                "utilization_gpu": g.utilization_gpu,
                "memory_used_bytes": g.memory_used_bytes,
                "memory_total_bytes": g.memory_total_bytes,
                "power_w": g.power_w,
                "temperature_c": g.temperature_c,
            }
            for g in monitor.gpus.gpus
        ]
    return {
        "time": monitor.wall(),
        "health": {"level": monitor.verdict.level, "reason": monitor.verdict.reason},
        "ttft_breakdown": breakdown.to_json() if breakdown else None,
        "users": users_json(users) if users is not None else None,
        "engines": engines,
        "unavailable": down,
        "gate": None if gate is None else {"url": gate.url, "state": gate.status.state,
                                            "lanes": lanes},
        "gpus": gpus,
    }  # fmt: skip


COLUMNS = (
    ("engine", 28),
    ("state", 11),  # UP, DOWN, STALE, or STALLED with how long: STALLED 4m05s
    ("run", 5),
    ("wait", 5),
    ("kv", 5),
    ("ttft50", 7),
    ("ttft99", 7),
    ("itl99", 7),
    ("gen/s", 7),
    ("health", 10),
)


def header(f: EngineFigures | None) -> str:
    window = f"latency over {f.window}, gen/s over {f.rate_window}" if f else ""
    cells = " ".join(f"{name:>{width}}" if i else f"{name:<{width}}" for i, (name, width)
                     in enumerate(COLUMNS))  # fmt: skip
    return f"{cells}   {window}".rstrip()


def row(f: EngineFigures, health: str) -> str:
    # The model is a label of the page: cleaned of control characters before it is printed.
    name = clip(f"{f.dialect}/{(f.model or '-').rsplit('/', 1)[-1]}", 28)
    values = (
        name,
        f.state if f.stalled_s is None else f"STALLED {duration(f.stalled_s)}",
        num(f.running),
        num(f.waiting),
        pct(f.kv_cache_usage),
        seconds(f.ttft_p50),
        seconds(f.ttft_p99),
        seconds(f.itl_p99),
        num(f.gen_tps),
        health,
    )
    return " ".join(
        f"{v:>{w}}" if i else f"{v:<{w}}"
        for i, (v, (_, w)) in enumerate(zip(values, COLUMNS, strict=True))
    )


class Watch:
    def __init__(self, options: WatchOptions, out: IO[str] = sys.stdout) -> None:
        self.options = options
        self.out = out
        self.monitor = Monitor(options.urls, options.interval_s, options.slo, options.admin_url)
        # The SLO's burn-rate alerts: events, and notifications where [alerts] names receivers.
        self.alerts = node_alerts(self.monitor, options.alerts, report=self._say, bell=self._bell)
        self.lines = 0

    def _say(self, text: str) -> None:
        print(f"gpuwatch watch: {text}", file=sys.stderr, flush=True)

    def _bell(self) -> None:
        print("\a", end="", file=sys.stderr, flush=True)  # the terminal's bell, off stdout

    def emit(self) -> None:
        m = self.monitor
        m.check_stale()
        changes = self.alerts.tick()
        m.evaluate()
        if self.options.as_json:
            data = {**frame(m), "slo_alerts": self.alerts.to_json()}
            self.out.write(json.dumps(data, allow_nan=False) + "\n")
        else:
            for text in changes:
                self.out.write(text + "\n")
            figures = all_figures(m)
            if self.lines % HEADER_EVERY == 0:
                self.out.write(header(figures[0] if figures else None) + "\n")
            for f in figures:
                self.out.write(row(f, badge_text(m.verdict)) + "\n")
            for ep in m.endpoints.values():
                if not ep.engines:
                    reason = clip(ep.status.reason or "")
                    self.out.write(f"{clip(ep.url)} {ep.status.state} {reason}\n")
            self.lines += 1
        self.out.flush()

    def ok(self) -> bool:
        """Every source answered at the last interval (the exit status, like snapshot's)."""
        m = self.monitor
        sources_ok = all(ep.status.state == "UP" for ep in m.endpoints.values())
        gate_ok = m.gate is None or m.gate.status.state == "UP"
        return sources_ok and gate_ok

    def _waiting(self) -> bool:
        m = self.monitor
        statuses = [ep.status for ep in m.endpoints.values()]
        if m.gate is not None:
            statuses.append(m.gate.status)
        # A source that answered uselessly stays WAITING with its error: that is an answer.
        return any(s.state == "WAITING" and s.last_error is None for s in statuses)

    async def _first_answers(self, limit_s: float) -> None:
        """The first line waits for each source's first poll to end, answered or failed, at
        most ``limit_s`` (the scrape's own bounds): printed on the interval alone, a source that
        is merely slower than the interval would read WAITING (``watch --count 1`` from cron on
        a busy machine), which is no answer at all."""
        deadline = time.monotonic() + limit_s
        while self._waiting() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def run(self) -> bool:
        o, m = self.options, self.monitor
        jobs: list[Coroutine[Any, Any, None]] = [
            polling.poll_endpoint(m, url, o.interval_s, o.scrape) for url in o.urls
        ]
        if o.nvml is not None:
            jobs.append(polling.poll_gpus(m, o.nvml, o.interval_s))
        client = None
        if o.admin_url:
            # Read-only: watch never changes anything, and says so to the one guard.
            client = GateClient(o.admin_url, o.admin_token, Guard(read_only=True))
            jobs.append(polling.poll_gate(m, client, o.interval_s))
        jobs.append(self.alerts.run())
        tasks = [asyncio.create_task(job) for job in jobs]
        try:
            printed = 0
            while o.count is None or printed < o.count:
                await asyncio.sleep(o.interval_s)
                if not printed:
                    await self._first_answers(o.scrape.connect_timeout_s + o.scrape.timeout_s)
                self.emit()
                printed += 1
        finally:
            await self.alerts.close()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if client is not None:
                await client.close()
        return self.ok()
