"""``gpuwatch snapshot``: read every source once; a table or the JSON contract."""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time

from gpuwatch import config
from gpuwatch.cli import fleet
from gpuwatch.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    positive_float,
    positive_int,
)
from gpuwatch.cli.sources import add_config_arg, gpu_reader


def register(snap: argparse.ArgumentParser) -> None:
    snap.description = "Read every source once. Exit 0 when all answered, 1 when any failed."
    add_config_arg(snap)
    snap.add_argument(
        "--metrics", action="append", metavar="URL", help="a /metrics URL (repeatable)"
    )
    snap.add_argument(
        "--metrics-file",
        action="append",
        default=[],
        metavar="FILE",
        help="a saved /metrics page, - for stdin (repeatable)",
    )
    snap.add_argument("--no-gpu", action="store_true", default=None, help="skip NVML")
    snap.add_argument(
        "--fake-gpu-from",
        metavar="URL",
        help="read GPUs from a simulator's /sim/gpu instead of NVML",
    )
    snap.add_argument("--json", action="store_true", help="print the JSON contract (docs)")
    fleet.add_prometheus_args(snap)
    snap.add_argument("--pid", type=positive_int, help="also report this serving process")
    snap.add_argument(
        "--stall-after",
        type=positive_float,
        metavar="S",
        help="read the endpoints again for up to S s: an engine with requests and no "
        "progress in that time is STALLED (default: one read, no stall judged)",
    )
    snap.add_argument("--connect-timeout", type=positive_float, metavar="S")
    snap.add_argument("--timeout", type=positive_float, metavar="S", help="total per scrape")
    snap.add_argument("--max-bytes", type=positive_int, metavar="N", help="body size cap")
    snap.add_argument(
        "--max-engines", type=positive_int, metavar="N", help="engines shown per source (256)"
    )
    snap.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.stall_after:
        # One read makes a few hundred thousand objects (the modules it imports, a big page's
        # samples and labels) that all live until the process ends; the cycle collector would
        # walk them again and again for garbage there is none of (a third of the parse). A
        # stall watch runs longer: on.
        gc.disable()
    from gpuwatch.sources import host

    # Host CPU % is measured over an interval (0.2 s): it starts here, so the imports below
    # fill part of it rather than a sleep at the end of a quick read.
    host.prime_cpu()
    cpu_since = time.monotonic()
    from gpuwatch import snapshot

    settings = config.apply_cli(
        config.load(args.config),
        {
            "metrics": args.metrics,
            "no_gpu": args.no_gpu,
            "scrape.connect_timeout_s": args.connect_timeout,
            "scrape.timeout_s": args.timeout,
            "scrape.max_bytes": args.max_bytes,
            "scrape.max_engines": args.max_engines,
        },
    )
    url = fleet.prometheus_url(args, settings)
    if url and not args.metrics and not args.metrics_file:
        return fleet.snapshot(settings, url, args.json)
    nvml = gpu_reader(args.fake_gpu_from, settings.no_gpu)
    snap = asyncio.run(
        snapshot.collect(
            settings.metrics,
            args.metrics_file,
            nvml=nvml,
            pid=args.pid,
            bounds=settings.scrape,
            stall_after_s=args.stall_after,
            cpu_since=cpu_since,
        )
    )
    if nvml:
        nvml.close()
    if args.json:
        sys.stdout.write(snapshot.dumps_json(snap) + "\n")
    else:
        snapshot.render_text(snap, sys.stdout)
    return EXIT_OK if snap.ok else EXIT_FAILED
