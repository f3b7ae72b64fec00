"""``gpuwatch record``: the dashboard's sources into a recording, headless (a service);
and ``--record FILE`` / ``--keep`` / ``--max-size``, which the dashboard and the demo share."""

from __future__ import annotations

import argparse
import asyncio
import re
from pathlib import Path
from typing import Any

from gpuwatch.cli.common import EXIT_FAILED, EXIT_OK, fail, positive_float
from gpuwatch.cli.sources import (
    PROBE_PORTS,
    add_judging_args,
    add_source_args,
    gpu_reader,
    probe_local,
    source_settings,
)

_AGE = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def age(text: str) -> float:
    """An argparse type: ``7d``, ``12h``, ``30m``, ``90s`` (or plain seconds)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if not found or float(found.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not an age like 7d, 12h, 30m: {text!r}")
    return float(found.group(1)) * _AGE[found.group(2) or "s"]


def size(text: str) -> int:
    """An argparse type: ``500M``, ``2G``, ``100k`` (or plain bytes)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?)i?b?\s*", text.lower())
    if not found or float(found.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a size like 500M, 2G: {text!r}")
    return int(float(found.group(1)) * _SIZE[found.group(2)])


def add_recording_args(p: argparse.ArgumentParser, out: str = "--record") -> None:
    required = out == "--out"
    p.add_argument(
        out,
        type=Path,
        metavar="FILE",
        required=required,
        help="record what is polled into FILE (SQLite; appended to if it is a recording)",
    )
    p.add_argument(
        "--keep", type=age, metavar="AGE", help="drop rows older than AGE, e.g. 7d (keep all)"
    )
    p.add_argument(
        "--max-size",
        type=size,
        metavar="SIZE",
        help="drop the oldest rows past SIZE, e.g. 500M (no limit)",
    )


def recorder_from(args: argparse.Namespace, path: Path | None) -> Any:
    """The recorder the options ask for, or None."""
    from gpuwatch.record.recorder import Recorder

    if path is None:
        return None
    return Recorder(path, keep_s=args.keep, max_bytes=args.max_size)


def register(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Poll the dashboard's sources and record every reading into an SQLite "
        "file, for `gpuwatch replay`. Stops on SIGINT / SIGTERM with the last rows committed."
    )
    add_judging_args(p)
    add_source_args(p, "a gpuwatch gate: its limits, status and audit trail are recorded")
    add_recording_args(p, "--out")
    p.add_argument(
        "--snapshot-to",
        type=Path,
        metavar="COPY",
        help="copy the recording --out names (a recorder may be writing it) to the new file "
        "COPY, consistent as of now, and exit: a plain cp of a live recording misses the rows "
        "still in its -wal file",
    )
    p.add_argument("--duration", type=positive_float, metavar="S", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpuwatch.record.service import RecordOptions, record

    if args.snapshot_to is not None:
        return _snapshot(args.out, args.snapshot_to)
    try:
        settings, token = source_settings(args)
    except ValueError as exc:
        return fail("gpuwatch record", str(exc))
    urls = list(settings.metrics) or asyncio.run(probe_local())
    if not urls and not settings.admin:
        ports = ", ".join(map(str, PROBE_PORTS))
        return fail("gpuwatch record", f"nothing to record: no --metrics, nothing on {ports}")
    options = RecordOptions(
        urls=urls,
        interval_s=args.interval or settings.interval_s,
        admin_url=settings.admin or None,
        admin_token=token,
        slo=settings.slo.thresholds(),
        nvml=gpu_reader(args.fake_gpu_from, settings.no_gpu),
        scrape=settings.scrape,
        alerts=settings.alerts,
        duration_s=args.duration,
    )
    recorder = recorder_from(args, args.out)
    ok = asyncio.run(record(options, recorder))  # RecordingError: exit 2 (cli/main.py)
    return EXIT_OK if ok else EXIT_FAILED


def _snapshot(src: Path, dst: Path) -> int:
    from gpuwatch.record.store import snapshot

    rows = snapshot(src, dst)  # RecordingError: exit 2 (cli/main.py)
    print(f"{dst}: {rows} rows, {dst.stat().st_size} bytes: a consistent copy of {src}")
    return EXIT_OK
