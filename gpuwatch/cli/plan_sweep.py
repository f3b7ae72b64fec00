"""``gpuwatch plan sweep``: the knee under bursty load, the boring zone, the gate's limits."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from gpuwatch.admintoken import read_token
from gpuwatch.cli.common import (
    DIST_HELP,
    EXIT_FAILED,
    EXIT_OK,
    TOKEN_HELP,
    fail,
    positive_float,
    positive_int,
)
from gpuwatch.cli.sources import add_config_arg, parse_slo_args
from gpuwatch.plan.sweep import MAX_SEQUENCES, SIM_MAX_SEQUENCES, SIM_MIN_SEQUENCES

PROG = "gpuwatch plan sweep"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sweep",
        help="find the knee under bursty load and recommend the gate's limits",
        description="Run bursty load at a search of rates (the simulator in simulated time by "
        "default, or a real endpoint with --url) and find the highest rate that meets the SLO "
        "with confidence; report the boring zone and the gate limits that hold it.",
    )
    where = p.add_argument_group("what to sweep")
    where.add_argument(
        "--profile", default=None, help="simulator profile (default rtx4090-llama3-8b-awq)"
    )
    where.add_argument("--url", help="a real server or gate (real time) instead of the simulator")
    where.add_argument("--model", help="with --url: default the first id of GET /v1/models")
    where.add_argument("--api", choices=["chat", "completions"], default="chat")
    where.add_argument("--metrics", metavar="URL", help="with --url: the engine's /metrics")
    where.add_argument(
        "--budget", type=positive_float, metavar="S", help="with --url: wall seconds (600)"
    )
    judge = p.add_argument_group("the SLO")
    add_config_arg(judge)
    judge.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="ttft_p99_s, itl_p99_s, goodput_min (the dashboard's keys; else [slo] of the config)",
    )
    judge.add_argument("--headroom", type=positive_float, default=0.7, help="boring = knee x this")
    load = p.add_argument_group("the traffic (as gpuwatch load)")
    load.add_argument("--burstiness", type=positive_float, default=None, metavar="B")
    load.add_argument(
        "--pattern", default="steady", help="steady | spike:period=60,duty=0.2,factor=5"
    )
    load.add_argument("--prompt-tokens", default=None, metavar="DIST", help=DIST_HELP)
    load.add_argument("--output-tokens", default=None, metavar="DIST", help=DIST_HELP)
    load.add_argument("--lane-mix", default="chat=1", metavar="chat=W,embed=W")
    load.add_argument(
        "--traffic", type=Path, metavar="FILE", help="replay a gpuwatch load --json report"
    )
    load.add_argument("--seed", type=int, default=0)
    search = p.add_argument_group("the search")
    search.add_argument("--start-rate", type=positive_float, default=1.0, metavar="R")
    search.add_argument(
        "--min-duration",
        type=positive_float,
        metavar="S",
        help="per arrival sequence (120; 30 with --url)",
    )
    search.add_argument(
        "--max-duration",
        type=positive_float,
        metavar="S",
        help="per sequence, when one sequence is run longer to be decided (960; 120 with --url)",
    )
    search.add_argument(
        "--precision",
        type=positive_float,
        default=0.05,
        help="the rate search's resolution: stop when the lowest failing rate is within this "
        "fraction of the highest passing one (0.05)",
    )
    search.add_argument("--max-probes", type=positive_int, default=14, help="rates tried (14)")
    search.add_argument(
        "--goodput-precision",
        type=positive_float,
        metavar="P",
        help="each rate is judged across independent arrival sequences: one centred below the "
        "SLO's goodput stops adding them once its 95%% interval is within +-P (default: half "
        "the miss budget, (1 - goodput_min) / 2: 0.005 at 99%%); a pass takes "
        "--max-sequences, a clear fail --min-sequences",
    )
    search.add_argument(
        "--min-sequences",
        type=positive_int,
        metavar="N",
        help=f"arrival sequences each rate runs first (default {SIM_MIN_SEQUENCES} in the "
        "simulator, 1 with --url)",
    )
    search.add_argument(
        "--max-sequences",
        type=positive_int,
        metavar="N",
        help=f"the most a rate runs, and what a pass takes (default {SIM_MAX_SEQUENCES} in the "
        "simulator, 1 with --url: real time is the cost); 1 judges each rate on one sequence, "
        "over its requests",
    )
    out = p.add_argument_group("output")
    out.add_argument("--json", nargs="?", const="-", metavar="FILE", help="the plan as JSON")
    out.add_argument("--svg", type=Path, metavar="FILE", help="the knee chart as SVG")
    out.add_argument("--html", type=Path, metavar="FILE", help="a report to paste into a ticket")
    out.add_argument("--no-chart", action="store_true", help="no terminal chart")
    out.add_argument("--no-save", action="store_true", help="do not save it for the dashboard")
    out.add_argument("--quiet", action="store_true", help="no progress on stderr")
    gate = p.add_argument_group("the gate")
    gate.add_argument("--gate", metavar="ADMIN_URL", help="the gate this plan is for (the key)")
    gate.add_argument("--apply", metavar="ADMIN_URL", help="send the limits to this gate")
    gate.add_argument("--admin-token-file", type=Path, metavar="FILE", help=TOKEN_HELP)
    gate.add_argument("--read-only", action="store_true", help="refuse every change")
    gate.add_argument("--yes", action="store_true", help="apply without asking")
    p.set_defaults(func=run)


def _target(args: argparse.Namespace) -> Any:
    from gpuwatch import config
    from gpuwatch.plan.probe import Target

    settings = config.load(args.config)
    items = [part for item in args.slo for part in item.split(",") if part]
    for key, value in parse_slo_args(items).items():
        setattr(settings.slo, key, value)
    slo = settings.slo
    if slo.ttft_p99_s <= 0:
        raise ValueError("--slo ttft_p99_s must be above 0: the sweep judges TTFT")
    if not 0 < slo.goodput_min < 1:
        raise ValueError("--slo goodput_min must be between 0 and 1 (exclusive)")
    return Target(slo.ttft_p99_s, slo.itl_p99_s or None, slo.goodput_min)


def _traffic(args: argparse.Namespace) -> Any:
    from gpuwatch.load.spec import Dist, Pattern, parse_lane_mix
    from gpuwatch.plan import traffic as t

    recording = t.Recording.load(args.traffic) if args.traffic else None
    return t.Traffic(
        burstiness=args.burstiness or t.DEFAULT_BURSTINESS,
        pattern=Pattern.parse(args.pattern),
        prompt_tokens=Dist.parse(args.prompt_tokens or t.DEFAULT_PROMPT, "--prompt-tokens"),
        output_tokens=Dist.parse(args.output_tokens or t.DEFAULT_OUTPUT, "--output-tokens"),
        lane_mix=parse_lane_mix(args.lane_mix),
        recording=recording,
    )


def run(args: argparse.Namespace) -> int:
    from gpuwatch.plan import planner
    from gpuwatch.plan.sweep import SearchSettings
    from gpuwatch.sim.profiles import DEFAULT_PROFILE, get_profile

    try:
        if args.url and args.profile:
            raise ValueError("give --profile (the simulator) or --url (a real endpoint), not both")
        if not args.url and (args.budget or args.metrics or args.model):
            raise ValueError("--budget, --metrics and --model go with --url")
        if args.headroom > 1:
            raise ValueError(
                f"--headroom is a fraction of the knee (0 < h <= 1), got {args.headroom:g}"
            )
        target = _target(args)
        traffic = _traffic(args)
        token = read_token(args.admin_token_file) if args.apply else None
        if args.apply and args.read_only:
            from gpuwatch.control.guard import Guard

            # ReadOnlyError: exit 1 (cli/main.py)
            Guard(read_only=True).check(f"applying the plan's limits to {args.apply}")
        profile = None if args.url else get_profile(args.profile or DEFAULT_PROFILE)
    except ValueError as exc:  # SpecError, ProfileError, and the checks above
        return fail(PROG, str(exc))
    real = bool(args.url)
    default_seqs = 1 if real else SIM_MIN_SEQUENCES, 1 if real else SIM_MAX_SEQUENCES
    max_seqs = args.max_sequences or max(default_seqs[1], args.min_sequences or 1)
    settings = SearchSettings(
        start_rate=args.start_rate,
        min_duration_s=args.min_duration or (30.0 if real else 120.0),
        max_duration_s=args.max_duration or (120.0 if real else 960.0),
        precision=args.precision,
        max_probes=args.max_probes,
        min_sequences=args.min_sequences or min(default_seqs[0], max_seqs),
        max_sequences=max_seqs,
        goodput_precision=args.goodput_precision,
    )
    if settings.max_duration_s < settings.min_duration_s:
        return fail(PROG, "--max-duration must be at least --min-duration")
    if settings.max_sequences < settings.min_sequences:
        return fail(PROG, "--max-sequences must be at least --min-sequences")
    if settings.replicated and settings.min_sequences < 2:
        return fail(PROG, "--min-sequences must be at least 2 to judge across sequences")
    if settings.max_sequences > MAX_SEQUENCES:
        return fail(PROG, f"--max-sequences is at most {MAX_SEQUENCES}")
    gate_url = args.gate or args.apply
    progress = None if args.quiet else _Progress(real)
    on_probe = progress.probe if progress else None
    try:
        if profile is not None:
            plan = planner.sweep_sim(
                profile, traffic, target, args.seed, args.headroom, settings, gate_url,
                on_probe=on_probe,
            )  # fmt: skip
        else:
            from gpuwatch.plan.live import LiveSettings, sweep_live

            live = LiveSettings(args.url, args.model, args.api, args.metrics)
            plan = sweep_live(  # NothingListening: exit 1 (cli/main.py)
                live, traffic, target, settings, args.seed, args.headroom,
                args.budget or 600.0, gate_url, on_probe=on_probe,
                on_tick=progress.tick if progress else None,
            )  # fmt: skip
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    finally:
        if progress:
            progress.close()
    return _finish(args, plan, token)


def _finish(args: argparse.Namespace, plan: Any, token: str | None) -> int:
    from gpuwatch.plan import planner, report

    if args.json == "-":
        json.dump(plan.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        report.render(plan, sys.stdout, chart=not args.no_chart)
        if args.json:
            Path(args.json).write_text(json.dumps(plan.to_json(), indent=2) + "\n")
    if args.svg:
        args.svg.write_text(report.svg(plan), encoding="utf-8")
    if args.html:
        args.html.write_text(report.html_report(plan), encoding="utf-8")
    if not args.no_save:
        try:
            path = planner.save(plan)
            print(f"{PROG}: saved for the dashboard's P key: {path}", file=sys.stderr)
        except OSError as exc:
            print(f"{PROG}: could not save the plan: {exc}", file=sys.stderr)
    if args.apply:
        if plan.recommended is None:
            return fail(PROG, "nothing to apply: no knee was found", EXIT_FAILED)
        return _apply(args, plan, token)
    return EXIT_OK if plan.knee is not None else EXIT_FAILED


def _apply(args: argparse.Namespace, plan: Any, token: str | None) -> int:
    from gpuwatch.control.guard import Guard
    from gpuwatch.plan.apply import apply

    def confirm(lines: list[str], reason: str | None) -> bool:
        print(f"apply to {args.apply} as one change (audited as 'plan'):", file=sys.stderr)
        for line in lines:
            print(f"  {line}", file=sys.stderr)
        if reason:
            print(f"  why confirm: {reason}", file=sys.stderr)
        if args.yes:
            return True
        if not sys.stdin.isatty():
            print(f"{PROG}: not a terminal: pass --yes to apply without asking", file=sys.stderr)
            return False
        print("apply? [y/N] ", end="", file=sys.stderr, flush=True)
        return sys.stdin.readline().strip().lower() in ("y", "yes")

    # GateError, ReadOnlyError: exit 1 (cli/main.py)
    after = asyncio.run(
        apply(args.apply, token, Guard(read_only=args.read_only), plan.recommended, confirm)
    )
    if after is None:
        print(f"{PROG}: not applied", file=sys.stderr)
        return EXIT_FAILED
    print(f"{PROG}: applied: limits v{after.version} on {args.apply}", file=sys.stderr)
    return EXIT_OK


class _Progress:
    """One line per probe on stderr; with --url, a live bar for the probe running."""

    def __init__(self, real: bool) -> None:
        from rich.console import Console

        self.console = Console(file=sys.stderr, highlight=False)
        self.real = real
        self.t0 = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None
        self._rate: float | None = None

    def probe(self, p: Any) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        verdict = {True: "pass", False: "fail", None: "?"}[p.passed]
        good = "-" if p.attainment is None else f"{p.attainment:.1%}"
        p99 = "-" if p.ttft_p99_s is None else f"{p.ttft_p99_s:.2f} s"
        seqs = f" x{p.sequences:<2}" if p.sequences > 1 else ""
        self.console.print(
            f"probe {p.rate:8.2f} req/s  {p.duration_s:5.0f} s{seqs}  n={p.arrived:<5} goodput "
            f"{good:>6} [{p.low:.3f}, {p.high:.3f}]  TTFT p99 {p99:>8}  {verdict}"
        )

    def tick(self, rate: float, run: Any) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        if self._bar is None or rate != self._rate:
            if self._bar is not None:
                self._bar.stop()
            self._bar = Progress(
                TextColumn(f"[bold]probe {rate:.2f} req/s"),
                BarColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[info]}"),
                console=self.console,
                transient=True,
            )
            self._task = self._bar.add_task("probe", total=run.spec.duration_s, info="")
            self._bar.start()
            self._rate = rate
        elapsed = time.perf_counter() - run.started if run.started else 0.0
        done = sum(1 for r in run.results if r.status is not None)
        self._bar.update(
            self._task,
            completed=min(elapsed, run.spec.duration_s or 0.0),
            info=f"sent {len(run.results)} done {done} in flight {run.inflight} | "
            f"sweep {time.perf_counter() - self.t0:.0f} s",
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
