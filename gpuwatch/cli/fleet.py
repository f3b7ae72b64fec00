"""``--prometheus URL`` for the dashboard, ``snapshot`` and ``watch``: the fleet's rows.

Not a subcommand of its own: the options and the two script-facing outputs (one reading as
JSON or a table; one reading per interval) that the three commands share.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import datetime
from typing import IO, Any

from gpuwatch import config
from gpuwatch.cli.common import EXIT_FAILED, EXIT_OK, fail


def add_prometheus_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prometheus",
        metavar="URL",
        help="read the fleet from this Prometheus (or [prometheus] url); auth from the config's "
        "token_file / password_file or $GPUWATCH_PROMETHEUS_TOKEN, never the command line",
    )


def add_fleet_screen_args(p: argparse.ArgumentParser) -> None:
    """What only the fleet screen takes (with --prometheus)."""
    p.add_argument(
        "--direct",
        action="store_true",
        help="with --prometheus: a drilled-into node's dashboard scrapes its /metrics itself",
    )
    p.add_argument(
        "--at",
        type=past_instant,
        metavar="TIME",
        help="with --prometheus: the fleet at a past instant (ISO 8601, or Unix seconds)",
    )


def past_instant(text: str) -> float:
    """An argparse type: a Unix time, or an ISO 8601 date-time (local time without a zone)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (2026-11-30T08:15:00, or Unix seconds)"
        ) from None


def dashboard(args: argparse.Namespace, settings: config.Settings, url: str) -> int:
    """The fleet screen (``gpuwatch --prometheus URL``)."""
    from gpuwatch.session.fleet import FleetOptions
    from gpuwatch.tui.fleet_app import FleetApp

    try:
        source = make_source(settings, url)
    except ValueError as exc:
        return fail("gpuwatch", str(exc))
    options = FleetOptions(
        prometheus=url,
        source=source,
        interval_s=args.interval or settings.interval_s,
        slo=settings.slo.thresholds(),
        read_only=settings.read_only,
        gates=settings.gates,
        direct=bool(args.direct),
        at=args.at,
        theme=settings.theme,
    )
    FleetApp(options).run()
    return EXIT_OK


def prometheus_url(args: argparse.Namespace, settings: config.Settings) -> str | None:
    return getattr(args, "prometheus", None) or settings.prometheus.url or None


def make_source(settings: config.Settings, url: str) -> Any:
    """A ``PrometheusSource`` for ``url`` with the config's auth; ValueError."""
    from gpuwatch.sources.prometheus import PrometheusSource, auth_headers

    p = settings.prometheus
    return PrometheusSource(
        url, auth_headers(p.token_file, p.basic_user, p.password_file), p.node_label
    )


def _emit(reading: Any, state: Any, as_json: bool, out: IO[str]) -> None:
    from gpuwatch.monitor.fleet import stalled, table_lines

    rows = state.view()
    if as_json:
        data = reading.to_json()
        health = {r.key: state.verdict(r) for r in rows}
        data["rows"] = [
            {
                **r.to_json(),
                "health": health[r.key].level,
                "reason": health[r.key].reason,
                "stalled": stalled(r),
            }
            for r in rows
        ]
        out.write(json.dumps(data) + "\n")
    else:
        if reading.error:
            out.write(f"error: {reading.error}\n")
        out.write("\n".join(table_lines(state, rows)) + "\n")
    out.flush()


def snapshot(settings: config.Settings, url: str, as_json: bool) -> int:
    """One reading of the fleet; exit 1 when Prometheus did not answer."""
    from gpuwatch.monitor.fleet import FleetState

    try:
        source = make_source(settings, url)
    except ValueError as exc:
        return fail("gpuwatch snapshot", str(exc))

    async def once() -> Any:
        async with source:
            return await source.read_fleet()

    reading = asyncio.run(once())
    state = FleetState(settings.slo.thresholds())
    state.apply(reading)
    _emit(reading, state, as_json, sys.stdout)
    return EXIT_FAILED if reading.error else EXIT_OK


def watch(
    settings: config.Settings, url: str, interval_s: float, count: int | None, as_json: bool
) -> int:
    """A reading per interval, each on its own lines; exit 1 if any failed."""
    from gpuwatch.monitor.fleet import FleetState

    try:
        source = make_source(settings, url)
    except ValueError as exc:
        return fail("gpuwatch watch", str(exc))
    state = FleetState(settings.slo.thresholds())

    async def loop() -> bool:
        ok = True
        done = 0
        async with source:
            while count is None or done < count:
                started = time.monotonic()
                reading = await source.read_fleet()
                state.apply(reading)
                ok = ok and reading.error is None
                _emit(reading, state, as_json, sys.stdout)
                done += 1
                if count is None or done < count:
                    await asyncio.sleep(max(0.05, interval_s - (time.monotonic() - started)))
        return ok

    return EXIT_OK if asyncio.run(loop()) else EXIT_FAILED
