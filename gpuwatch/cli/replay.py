"""``gpuwatch replay FILE``: a recording in the dashboard (read-only), or a time range of it
exported (``--export``) or written up (``--report``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpuwatch.cli.common import EXIT_OK, EXIT_USAGE, fail


def register(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Open a recording (gpuwatch record, --record) in the same dashboard: "
        "space play/pause, left/right step, [ ] -/+1 min, { } previous/next event, "
        ": go to a time, < > speed 1x..60x."
    )
    p.add_argument("file", type=Path, metavar="FILE", help="a recording")
    p.add_argument("--from", dest="start", metavar="TIME", help="HH:MM[:SS], a date and time, +5m")
    p.add_argument("--to", dest="end", metavar="TIME", help="the end of the range (the end)")
    p.add_argument("--export", type=Path, metavar="OUT.db", help="write the range to a new file")
    p.add_argument("--report", type=Path, metavar="OUT.html|.md", help="write an incident report")
    p.add_argument("--theme", help="gpuwatch-dark (default), gpuwatch-light, high-contrast, ansi")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpuwatch.record.player import Player, parse_when

    prog = "gpuwatch replay"
    if args.report is not None and args.report.suffix.lower() not in (".html", ".htm", ".md"):
        return fail(prog, f"--report {args.report}: a report is .html or .md")
    player = Player(args.file)  # RecordingError: exit 2 (cli/main.py)
    try:
        view_from = player.meta.get("view_from")
        start = float(view_from) if isinstance(view_from, (int, float)) else player.start
        end = player.end
        if args.start:
            start = parse_when(args.start, player.start, player.end)
        if args.end:
            end = parse_when(args.end, player.start, player.end)
    except ValueError as exc:
        player.close()
        return fail(prog, str(exc), EXIT_USAGE)
    if end < start:
        player.close()
        return fail(prog, "--to is before --from", EXIT_USAGE)
    if args.export is None and args.report is None:
        return _show(player, start, args.theme)
    player.close()
    try:
        if args.export is not None:
            from gpuwatch.record.export import export

            count = export(args.file, args.export, start, end)
            print(f"{args.export}: {count} rows, {args.export.stat().st_size} bytes")
        if args.report is not None:
            from gpuwatch.record import report

            incident = report.build(args.file, start, end)
            report.write(incident, args.report)
            skipped = f" ({incident.bad_rows} damaged row(s) skipped)" if incident.bad_rows else ""
            print(f"{args.report}: incident report{skipped}")
    except OSError as exc:  # RecordingError: exit 2 (cli/main.py)
        return fail(prog, str(exc), EXIT_USAGE)
    return EXIT_OK


def _show(player: Any, start: float, theme: str | None) -> int:
    from gpuwatch.config import DEFAULT_THEME
    from gpuwatch.session.node import DashboardOptions, replay_session
    from gpuwatch.tui.replay import ReplayApp

    meta = player.meta
    player.seek(start)
    options = DashboardOptions(
        urls=list(meta.get("urls") or []),
        interval_s=float(meta.get("interval_s") or 1.0),
        admin_url=meta.get("admin_url"),
        theme=theme or DEFAULT_THEME,
        slo=dict(meta.get("slo") or {}),
        title_endpoint=meta.get("title"),
        hostname=str(meta.get("host") or "?"),
    )
    try:
        ReplayApp(replay_session(player, options)).run()
    finally:
        player.close()
    return EXIT_OK
