"""``gpuwatch snapshot``: read every source once and print a table or the JSON contract."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import httpx

from gpuwatch.bounds import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENGINES
from gpuwatch.config import ScrapeSettings
from gpuwatch.fmt import NA, clip, duration, gib, num, pct, seconds, unit
from gpuwatch.httpclient import async_client, body_too_big
from gpuwatch.model import (
    LATENCY_KINDS,
    EngineSnapshot,
    GpuReading,
    Histogram,
    HostSample,
    ProcessInfo,
    ScrapeResult,
)
from gpuwatch.series import HistogramError, histogram_quantile
from gpuwatch.sources import host as host_source
from gpuwatch.sources.scrape import (
    ScrapeError,
    decode_body,
    map_page,
    scrape,
)
from gpuwatch.stall import StallDetector, progress_of

if TYPE_CHECKING:  # NVML (pynvml) loads only when GPUs are read: not for `--no-gpu`
    from gpuwatch.sources.nvml import NvmlReader

SCHEMA_VERSION = 1
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
# An engine: (source, dialect, model).
StallKey = tuple[str, str, str | None]
# Time over which host CPU % is measured when nothing else takes that long.
_CPU_SAMPLE_S = 0.2


@dataclass
class Snapshot:
    time: dt.datetime
    gpus: GpuReading | None
    host: HostSample
    host_process: ProcessInfo | None
    results: list[ScrapeResult]
    processes: dict[str, ProcessInfo] = field(default_factory=dict)
    # ``--stall-after S``: how long the endpoints were watched for a stall (None: one read),
    # and each STALLED engine's (source, dialect, model) with how long it made no progress.
    stall_check_s: float | None = None
    stalled: dict[StallKey, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        if any(r.error for r in self.results):
            return False
        if self.gpus is None:
            return True
        return not (self.gpus.error or any(g.error for g in self.gpus.gpus))


def read_metrics_file(
    name: str,
    stdin: IO[bytes] | None = None,
    max_engines: int = DEFAULT_MAX_ENGINES,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> ScrapeResult:
    """A saved page, bounded like a scraped one: a file is no more trusted than an endpoint."""
    source = "stdin" if name == "-" else name
    try:
        if name == "-":
            body = (stdin or sys.stdin.buffer).read(max_bytes + 1)
        else:
            with open(name, "rb") as fh:
                body = fh.read(max_bytes + 1)
        if len(body) > max_bytes:
            raise ScrapeError(body_too_big(max_bytes))
        text = decode_body(body)
    except OSError as exc:
        return ScrapeResult(source, error=clip(f"cannot read: {exc.strerror or exc}"))
    except ScrapeError as exc:
        return ScrapeResult(source, error=str(exc))
    return map_page(source, text, max_engines)


def _local_port(url: str) -> int | None:
    parsed = httpx.URL(url)
    if parsed.host in {"127.0.0.1", "localhost", "::1", "0.0.0.0"}:
        return parsed.port or (443 if parsed.scheme == "https" else 80)
    return None


# How often the endpoints are read again while ``--stall-after`` watches them.
STALL_READ_EVERY_S = 1.0


async def watch_stalls(
    read: Callable[[], Awaitable[list[ScrapeResult]]],
    first: list[ScrapeResult],
    after_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[ScrapeResult], dict[StallKey, float]]:
    """Read the endpoints again, once a second, for a little over ``after_s``, and judge each
    engine as the dashboard does (gpuwatch/stall.py). Ends early once every engine has shown
    progress or holds no request. Returns the last reading and the stalled engines."""
    detectors: dict[StallKey, StallDetector] = {}
    started = clock()

    def feed(results: list[ScrapeResult], t: float) -> None:
        for result in results:
            for e in result.engines:
                key = (result.source, e.dialect, e.model)
                detector = detectors.setdefault(key, StallDetector(after_s))
                detector.update(t, progress_of(e), e.running, e.waiting)

    def open_question() -> bool:
        # Busy since the first read and not moved: only more time can tell.
        return any(d.since is not None and d.since <= started for d in detectors.values())

    feed(first, started)
    latest = first
    while open_question():
        elapsed = clock() - started
        if elapsed > after_s:
            break
        # The last read lands just past after_s: the detector's rule is "more than".
        await asyncio.sleep(min(STALL_READ_EVERY_S, after_s - elapsed + 0.05))
        latest = await read()
        feed(latest, clock())
    stalled = {k: d.stalled_for() for k, d in detectors.items() if d.stalled}
    return latest, {k: v for k, v in stalled.items() if v is not None}


async def collect(
    urls: Sequence[str],
    files: Sequence[str] = (),
    *,
    nvml: NvmlReader | None = None,
    pid: int | None = None,
    bounds: ScrapeSettings | None = None,
    stall_after_s: float | None = None,
    cpu_since: float | None = None,
) -> Snapshot:
    """Every source once, concurrently, each scrape held to ``bounds`` (``[scrape]``); with
    ``stall_after_s``, the endpoints are read again for that long to tell a stalled engine.
    ``cpu_since``: when the caller primed the host's CPU counters (``host.prime_cpu``, on
    ``time.monotonic``), so that the time since counts toward the interval CPU % needs."""
    b = bounds or ScrapeSettings()
    if cpu_since is None:
        host_source.prime_cpu()
        cpu_since = time.monotonic()
    gpu_task = asyncio.create_task(asyncio.to_thread(nvml.read)) if nvml else None
    stalled: dict[StallKey, float] = {}
    tls = any(httpx.URL(url).scheme == "https" for url in urls)
    async with async_client(b.connect_timeout_s, b.timeout_s, tls=tls) as client:

        async def read() -> list[ScrapeResult]:
            return list(
                await asyncio.gather(
                    *(scrape(client, url, b.max_bytes, b.timeout_s, b.max_engines) for url in urls)
                )
            )

        scraped = await read()
        if stall_after_s:
            scraped, stalled = await watch_stalls(read, scraped, stall_after_s)
    results = [read_metrics_file(name, None, b.max_engines, b.max_bytes) for name in files]
    results += scraped
    gpus = await gpu_task if gpu_task else None
    table = nvml.processes if nvml else host_source.ProcessTable()
    processes = {}
    for url in urls:
        port = _local_port(url)
        found = await asyncio.to_thread(host_source.pid_listening_on, port) if port else None
        if found:
            processes[url] = table.describe(found)
    remaining = _CPU_SAMPLE_S - (time.monotonic() - cpu_since)
    if remaining > 0:
        await asyncio.sleep(remaining)  # CPU % needs an interval to be measured over
    host = host_source.read_host()
    host_process = table.describe(pid) if pid else None
    return Snapshot(
        dt.datetime.now(dt.timezone.utc),
        gpus,
        host,
        host_process,
        results,
        processes,
        stall_after_s or None,
        stalled,
    )


def latency_summary(hist: Histogram) -> dict[str, float | None]:
    out: dict[str, float | None] = {"count": hist.count, "sum": hist.sum}
    for label, q in QUANTILES:
        try:
            out[label] = histogram_quantile(q, hist.buckets) if hist.buckets else None
        except HistogramError:
            out[label] = None
    return out


LIFETIME = "since the server started"
_ENGINE_FIELDS = tuple(f.name for f in dataclasses.fields(EngineSnapshot) if f.name != "histograms")


def _engine_json(
    engine: EngineSnapshot, process: ProcessInfo | None, stalled_s: float | None = None
) -> dict[str, Any]:
    # The fields but the histograms, all plain values: ``asdict`` deep-copied every bucket only
    # for them to be dropped (a third of a big page's JSON).
    data: dict[str, Any] = {name: getattr(engine, name) for name in _ENGINE_FIELDS}
    data["latency"] = {
        kind: latency_summary(engine.histograms[kind])
        for kind in LATENCY_KINDS
        if kind in engine.histograms
    }
    # One read has no earlier scrape to take a window from: the histograms count every
    # request since the server started, and the field beside them says so.
    data["latency_window"] = LIFETIME
    data["process"] = dataclasses.asdict(process) if process else None
    data["stalled_for_s"] = None if stalled_s is None else round(stalled_s, 1)
    return data


def to_json(snap: Snapshot) -> dict[str, Any]:
    gpus = snap.gpus.gpus if snap.gpus else []
    host = snap.host
    return {
        "schema": SCHEMA_VERSION,
        "time": snap.time.isoformat(),
        "nvml_error": snap.gpus.error if snap.gpus else None,
        "gpus": [dataclasses.asdict(g) for g in gpus],
        "host": {
            "cpu_percent": host.cpu_percent,
            "cpu_per_core": host.cpu_per_core,
            "memory_total_bytes": host.memory_total_bytes,
            "memory_used_bytes": host.memory_used_bytes,
            "swap_total_bytes": host.swap_total_bytes,
            "swap_used_bytes": host.swap_used_bytes,
            "load_1m": host.load_1m,
            "load_5m": host.load_5m,
            "load_15m": host.load_15m,
            "process": dataclasses.asdict(snap.host_process) if snap.host_process else None,
        },
        "stall_check_s": snap.stall_check_s,
        "engines": [
            _engine_json(
                e, snap.processes.get(r.source), snap.stalled.get((r.source, e.dialect, e.model))
            )
            for r in snap.results
            for e in r.engines
        ],
        "errors": [{"source": r.source, "error": r.error} for r in snap.results if r.error],
        "warnings": [{"source": r.source, "warning": w} for r in snap.results for w in r.warnings],
    }


def _nulled(value: Any, path: str, found: list[str]) -> Any:
    """``value`` with every NaN and infinity replaced by None; their paths go to ``found``."""
    if isinstance(value, float) and not math.isfinite(value):
        found.append(f"{path} is {value}")
        return None
    if isinstance(value, dict):
        return {k: _nulled(v, f"{path}.{k}" if path else k, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_nulled(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    return value


def dumps_json(snap: Snapshot) -> str:
    """The whole JSON document as one string, so stdout gets all of it or nothing.

    JSON has no NaN or Infinity: any left after the sources cleaned theirs (a derived value,
    a reading from a new source) becomes null with a warning instead of an invalid document.
    """
    doc = to_json(snap)

    def finite(value: Any, path: str, source: str) -> Any:
        found: list[str] = []
        value = _nulled(value, path, found)
        doc["warnings"] += [{"source": source, "warning": f"{p}: shown as null"} for p in found]
        return value

    doc["gpus"] = finite(doc["gpus"], "gpus", "nvml")
    doc["host"] = finite(doc["host"], "host", "host")
    doc["engines"] = [finite(e, f"engines[{i}]", e["source"]) for i, e in enumerate(doc["engines"])]
    return json.dumps(doc, indent=2, allow_nan=False, default=str)


# Text columns a terminal's width may cut (with an ellipsis), never under this many characters.
_MIN_CUT_WIDTH = 8
_RED, _BOLD_RED = "\x1b[31m", "\x1b[1;31m"


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None, cut: Sequence[int]
) -> list[str]:
    """Rows under their headers, each column as wide as its widest cell, two spaces apart. With
    a ``width`` (a terminal's), the ``cut`` columns are narrowed, the widest first, until a line
    fits; piped output is never cut (a script reads every name whole)."""
    widths = [max(map(len, column)) for column in zip(headers, *rows, strict=True)]
    if width is not None:
        while sum(widths) + 2 * len(widths) > width:
            widest = max(cut, key=widths.__getitem__)
            if widths[widest] <= _MIN_CUT_WIDTH:
                break
            widths[widest] -= 1

    def line(cells: Sequence[str]) -> str:
        padded = (clip(c, w).ljust(w) for c, w in zip(cells, widths, strict=True))
        return (" " + "  ".join(padded)).rstrip()

    return [line(headers), *map(line, rows)]


def _terminal(out: IO[str]) -> tuple[int | None, bool]:
    """(width, colour) for ``out``: a terminal's width and colour (unless NO_COLOR or a dumb
    terminal), or neither for a pipe or a file."""
    if not out.isatty():
        return None, False
    colour = "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
    return shutil.get_terminal_size().columns, colour


def render_text(snap: Snapshot, out: IO[str]) -> None:
    """The human table: GPUs, host, engines, then every error in one line each. Foreign text
    (model names, error messages) goes through ``clip``: one line, control characters escaped,
    so nothing a page says can drive the terminal."""
    width, colour = _terminal(out)

    def paint(text: str, code: str) -> str:
        return f"{code}{text}\x1b[0m" if colour else text

    lines: list[str] = []
    if snap.gpus is not None:
        if snap.gpus.error:
            lines.append(f"GPUs: {clip(snap.gpus.error)}")
        else:
            rows: list[list[str]] = []
            failed: set[int] = set()
            for g in snap.gpus.gpus:
                if g.error:
                    failed.add(len(rows))
                    rows.append([str(g.index), clip(g.name or NA, 40), clip(g.error), *[""] * 4])
                    continue
                rows.append(
                    [
                        str(g.index),
                        clip(g.name or NA, 40),
                        f"{gib(g.memory_used_bytes)} / {gib(g.memory_total_bytes)}",
                        pct(g.utilization_gpu),
                        unit(g.temperature_c, "C"),
                        f"{unit(g.power_w, 'W')} / {unit(g.power_limit_w, 'W')}",
                        str(len(g.processes)),
                    ]
                )
            header, *body = _table(
                ["GPU", "name", "memory", "util", "temp", "power", "procs"], rows, width, [1, 2]
            )
            lines += [header, *(paint(b, _RED) if i in failed else b for i, b in enumerate(body))]
    h = snap.host
    lines.append(
        f"host: cpu {unit(h.cpu_percent, '%')}  load {num(h.load_1m, 2)}  "
        f"mem {gib(h.memory_used_bytes)} / {gib(h.memory_total_bytes)}"
    )
    rows = []
    for result in snap.results:
        for e in result.engines:
            ttft = latency_summary(e.histograms["ttft"]) if "ttft" in e.histograms else {}
            itl = latency_summary(e.histograms["itl"]) if "itl" in e.histograms else {}
            rows.append(
                [
                    clip(result.source, 80),
                    clip(e.dialect, 24),
                    clip(e.model or NA, 60),
                    num(e.running),
                    num(e.waiting),
                    pct(e.kv_cache_usage),
                    pct(e.prefix_cache_hit_rate),
                    num(e.prompt_tokens_total),
                    num(e.generation_tokens_total),
                    seconds(ttft.get("p50")),
                    seconds(ttft.get("p99")),
                    seconds(itl.get("p99")),
                ]
            )
    if rows:
        headers = ["source", "dialect", "model", "run", "wait", "KV", "prefix"]
        headers += ["prompt tok", "gen tok", "TTFT p50*", "TTFT p99*", "ITL p99*"]
        lines += _table(headers, rows, width, [0, 2])
        lines.append(f"* percentiles over every request {LIFETIME} (one read has no window)")
    for (source, dialect, model), stalled_s in snap.stalled.items():
        lines.append(
            f"{paint(f'STALLED {duration(stalled_s)}', _BOLD_RED)}: {clip(source)} "
            f"{clip(dialect)} {clip(model or NA, 60)}: requests in it, no progress "
            f"(watched {num(snap.stall_check_s, 1)} s)"
        )
    for result in snap.results:
        for warning in result.warnings:
            lines.append(f"warning: {clip(result.source)}: {clip(warning)}")
        if result.error:
            lines.append(f"{paint('error:', _RED)} {clip(result.source)}: {clip(result.error)}")
    out.write("".join(f"{line}\n" for line in lines))
