"""``gpuwatch watch``: the dashboard's numbers, one line per interval, for scripts."""

from __future__ import annotations

import argparse
import asyncio

from gpuwatch.cli import fleet
from gpuwatch.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    fail,
    positive_int,
)
from gpuwatch.cli.sources import (
    PROBE_PORTS,
    add_judging_args,
    add_source_args,
    gpu_reader,
    probe_local,
    source_settings,
)

PROG = "gpuwatch watch"


def register(watch: argparse.ArgumentParser) -> None:
    watch.description = (
        "Poll the dashboard's sources and print their windowed values once per "
        "interval, like vmstat. Exit 0 when every source answered, 1 when any failed."
    )
    add_judging_args(watch)
    add_source_args(watch, "a gpuwatch gate to read (never changed)")
    watch.add_argument("--count", type=positive_int, metavar="N", help="stop after N intervals")
    watch.add_argument("--json", action="store_true", help="one JSON object per interval")
    fleet.add_prometheus_args(watch)
    watch.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpuwatch.watch import Watch, WatchOptions

    try:
        settings, token = source_settings(args)
    except ValueError as exc:
        return fail(PROG, str(exc))
    url = fleet.prometheus_url(args, settings)
    if url and not settings.metrics:
        interval = args.interval or settings.interval_s
        return fleet.watch(settings, url, interval, args.count, args.json)
    urls = list(settings.metrics) or asyncio.run(probe_local())
    if not urls and not settings.admin:
        ports = ", ".join(map(str, PROBE_PORTS))
        return fail(
            PROG, f"no serving endpoint answered on localhost ports {ports}: give --metrics URL",
            EXIT_FAILED,
        )  # fmt: skip
    options = WatchOptions(
        urls=urls,
        interval_s=args.interval or settings.interval_s,
        count=args.count,
        as_json=args.json,
        admin_url=settings.admin or None,
        admin_token=token,
        slo=settings.slo.thresholds(),
        nvml=gpu_reader(args.fake_gpu_from, settings.no_gpu),
        scrape=settings.scrape,
        alerts=settings.alerts,
    )
    ok = asyncio.run(Watch(options).run())
    if options.nvml is not None:
        options.nvml.close()
    return EXIT_OK if ok else EXIT_FAILED
