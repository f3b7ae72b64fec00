"""``gpuwatch demo``: simulator + gate + bursty load + dashboard, all on this machine."""

from __future__ import annotations

import argparse

from gpuwatch.cli.common import fail, positive_float
from gpuwatch.cli.record import add_recording_args, recorder_from
from gpuwatch.cli.sources import add_dashboard_args, dashboard_settings


def register(demo: argparse.ArgumentParser) -> None:
    demo.description = "Start a simulated GPU node, a gate in front of it and a spiky load; watch."
    add_dashboard_args(demo)
    demo.add_argument("--profile", help="simulator profile (gpuwatch sim --list-profiles)")
    demo.add_argument("--rate", type=positive_float, default=1.5, help="base requests/s (1.5)")
    demo.add_argument("--burstiness", type=positive_float, default=0.5, help="gamma shape (0.5)")
    add_recording_args(demo)
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpuwatch.demo import run_demo

    try:
        settings = dashboard_settings(args)
    except ValueError as exc:
        return fail("gpuwatch demo", str(exc))
    return run_demo(
        args.profile,
        args.rate,
        args.burstiness,
        settings.theme,
        settings.read_only,
        settings.slo.thresholds(),
        recorder_from(args, args.record),
        slow_link=settings.slow_link,
    )
