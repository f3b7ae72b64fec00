"""``gpuwatch`` / ``gpuwatch top``: the live dashboard."""

from __future__ import annotations

import argparse
import asyncio

from gpuwatch.cli import fleet
from gpuwatch.cli.common import EXIT_OK, fail
from gpuwatch.cli.record import add_recording_args, recorder_from
from gpuwatch.cli.sources import (
    PROBE_PORTS,
    add_dashboard_args,
    add_source_args,
    gpu_reader,
    probe_local,
    source_settings,
)


def register(top: argparse.ArgumentParser) -> None:
    top.description = (
        "The live dashboard. Without --metrics it probes localhost ports "
        + ", ".join(map(str, PROBE_PORTS))
        + "."
    )
    add_dashboard_args(top)
    add_source_args(top, "a gpuwatch gate to show and steer")
    fleet.add_prometheus_args(top)
    fleet.add_fleet_screen_args(top)
    add_recording_args(top)
    top.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpuwatch.session.node import DashboardOptions, live_session
    from gpuwatch.tui.app import GpuwatchApp

    try:
        settings, token = source_settings(args)
    except ValueError as exc:
        return fail("gpuwatch", str(exc))
    prometheus = fleet.prometheus_url(args, settings)
    if prometheus and not args.metrics:
        return fleet.dashboard(args, settings, prometheus)
    urls = list(settings.metrics)
    hint = None
    if not urls:
        urls = asyncio.run(probe_local())
        if not urls:
            ports = ", ".join(map(str, PROBE_PORTS))
            hint = (
                f"no serving endpoint answered on localhost ports {ports}: "
                "point gpuwatch at one with --metrics URL, or try `gpuwatch demo`"
            )
    options = DashboardOptions(
        urls=urls,
        interval_s=args.interval or settings.interval_s,
        admin_url=settings.admin or None,
        admin_token=token,
        theme=settings.theme,
        slo=settings.slo.thresholds(),
        nvml=gpu_reader(args.fake_gpu_from, settings.no_gpu),
        hint=hint,
        read_only=settings.read_only,
        slow_link=settings.slow_link,
        scrape=settings.scrape,
        alerts=settings.alerts,
        knobs=settings.knobs,
        knob_audit=settings.knob_audit,
    )
    from gpuwatch.record.store import RecordingError

    recorder = recorder_from(args, args.record)
    jobs = [] if recorder is None else [lambda: recorder.run(options.admin_url, token)]
    session = live_session(options)
    app = GpuwatchApp(session, background=jobs)
    try:
        if recorder is not None:
            recorder.attach(
                session.monitor, host=options.hostname, max_engines=options.scrape.max_engines
            )
    except RecordingError as exc:
        return fail("gpuwatch", str(exc))
    try:
        app.run()
    finally:
        if recorder is not None:
            recorder.close()
    return EXIT_OK
