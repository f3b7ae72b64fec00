"""``gpuwatch load`` in a terminal: a rich progress bar while it runs, the report at the end."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpuwatch.load.report import build, percentile, render, send_errors
from gpuwatch.load.runner import LoadRun, NothingListening
from gpuwatch.load.spec import LoadSpec

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


def _status(run: LoadRun) -> dict[str, Any]:
    results = run.results
    now = time.perf_counter() - run.started if run.started else 0.0
    recent = sum(1 for r in results if r.sent and r.sent > now - 5)
    ttfts = [r.ttft for r in results if r.ttft is not None]
    p99 = f"{percentile(ttfts, 99) * 1000:.0f} ms" if ttfts else "-"
    done = sum(1 for r in results if r.ok)
    failed = sum(1 for r in results if r.status is not None and not r.ok)
    return {
        "sent": str(len(results)),
        "done": str(done),
        "failed": str(failed),
        "rate": f"{recent / min(5.0, max(now, 1e-3)):.1f}",
        "p99": p99,
    }


async def _drive(spec: LoadSpec, quiet: bool) -> tuple[LoadRun, bool]:
    run = LoadRun(spec)
    loop = asyncio.get_running_loop()
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        run.stop()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    total = spec.requests or None
    progress = Progress(
        TextColumn("[bold]load"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn(
            "sent {task.fields[sent]} done {task.fields[done]} failed {task.fields[failed]} "
            "| {task.fields[rate]} req/s | TTFT p99 {task.fields[p99]}"
        ),
        console=Console(file=sys.stderr),
        disable=quiet,
        transient=False,
    )
    task = progress.add_task("load", total=total or spec.duration_s, **_status(run))
    main = asyncio.create_task(run.run())
    with progress:
        while not main.done():
            await asyncio.wait({main}, timeout=0.25)
            done = (
                len(run.results)
                if total
                else (time.perf_counter() - run.started if run.started else 0)
            )
            progress.update(task, completed=done, **_status(run))
    loop.remove_signal_handler(signal.SIGINT)
    main.result()
    return run, interrupted


def run_cli(spec: LoadSpec, quiet: bool, json_path: Path | None) -> int:
    try:
        run, interrupted = asyncio.run(_drive(spec, quiet))
    except NothingListening as exc:
        print(f"gpuwatch load: {exc}", file=sys.stderr)
        return EXIT_FAILED
    spec = LoadSpec(**{**spec.__dict__, "model": run.model})
    report = build(spec, run.results, run.ended - run.started, send_errors(run.results))
    if interrupted:
        print("gpuwatch load: interrupted; partial report", file=sys.stderr)
    render(report, sys.stdout)
    if json_path:
        json_path.write_text(json.dumps(report, indent=2) + "\n")
    return EXIT_INTERRUPTED if interrupted else EXIT_OK
