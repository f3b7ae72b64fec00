"""The one entry point: ``gpuwatch <subcommand>``; each subcommand calls one package."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuwatch import __version__, config
from gpuwatch.admintoken import read_token

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", type=Path, metavar="FILE", help=f"config file (default {config.default_path()})"
    )


def _positive(kind: type[int] | type[float]) -> Any:
    """An argparse type: a number of ``kind`` above 0, with a one-line reason otherwise."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            name = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"not {name}: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
        return value

    return parse


_positive_float = _positive(float)
_positive_int = _positive(int)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuwatch",
        description="htop for LLM serving on a GPU node: VRAM, KV cache, queues, tail latency.",
    )
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    top = sub.add_parser(
        "top",
        help="the live dashboard (the default: `gpuwatch` alone runs it)",
        description="The live dashboard. Without --metrics it probes localhost ports "
        + ", ".join(map(str, PROBE_PORTS))
        + ".",
    )
    _add_dashboard_args(top)
    top.add_argument(
        "--metrics", action="append", metavar="URL", help="a /metrics URL (repeatable)"
    )
    top.add_argument("--admin", metavar="URL", help="a gpuwatch gate to show (and later steer)")
    top.add_argument("--admin-token-file", type=Path, metavar="FILE", help=_TOKEN_HELP)
    top.add_argument("--interval", type=_positive_float, metavar="S", help="poll interval (1 s)")
    top.add_argument("--no-gpu", action="store_true", default=None, help="skip NVML")
    top.add_argument("--fake-gpu-from", metavar="URL", help="GPUs from a simulator's /sim/gpu")

    demo = sub.add_parser(
        "demo",
        help="simulator + gate + bursty load + dashboard, all on this machine",
        description="Start a simulated GPU node, a gate in front of it and a spiky load; watch.",
    )
    _add_dashboard_args(demo)
    demo.add_argument("--profile", help="simulator profile (gpuwatch sim --list-profiles)")
    demo.add_argument("--rate", type=_positive_float, default=1.5, help="base requests/s (1.5)")
    demo.add_argument("--burstiness", type=_positive_float, default=0.5, help="gamma shape (0.5)")

    snap = sub.add_parser(
        "snapshot",
        help="read GPUs, host and /metrics endpoints once; print a table or JSON",
        description="Read every source once. Exit 0 when all answered, 1 when any failed.",
    )
    _add_common(snap)
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
    snap.add_argument("--json", action="store_true", help="print the JSON contract (README)")
    snap.add_argument("--pid", type=_positive_int, help="also report this serving process")
    snap.add_argument("--connect-timeout", type=_positive_float, metavar="S")
    snap.add_argument("--timeout", type=_positive_float, metavar="S", help="total per scrape")
    snap.add_argument("--max-bytes", type=_positive_int, metavar="N", help="body size cap")
    snap.add_argument(
        "--max-engines", type=_positive_int, metavar="N", help="engines shown per source (256)"
    )

    sim = sub.add_parser(
        "sim",
        help="a simulated GPU inference node (OpenAI API, vLLM /metrics, virtual GPU)",
        description="Serve a simulated vLLM-like node: continuous batching, paged KV cache.",
    )
    sim.add_argument("--profile", default=None, help="GPU + model profile (see --list-profiles)")
    sim.add_argument("--list-profiles", action="store_true", help="print profiles and exit")
    sim.add_argument("--listen", default="127.0.0.1:8000", metavar="HOST:PORT")
    sim.add_argument("--engines", type=_positive_int, default=1, help="data-parallel engines")
    sim.add_argument(
        "--time-scale", type=_positive_float, default=1.0, metavar="X", help="run X times faster"
    )
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--served-model-name", metavar="NAME")

    gate = sub.add_parser(
        "gate",
        help="admission-control proxy in front of an OpenAI-compatible server, with an admin API",
        description="Bound work in flight, queue fairly, refuse the rest clearly; change it live.",
    )
    gate.add_argument("--upstream", required=True, metavar="URL", help="e.g. http://127.0.0.1:8000")
    gate.add_argument("--listen", default="127.0.0.1:9000", metavar="HOST:PORT")
    gate.add_argument("--config", type=Path, metavar="FILE", help="lanes and limits (TOML)")
    gate.add_argument("--state-file", type=Path, metavar="FILE", help="persisted limits + audit")
    gate.add_argument("--admin-token-file", type=Path, metavar="FILE", help=_TOKEN_HELP)

    limits = sub.add_parser(
        "limits",
        help="a gate's limits: get | set LANE.KEY=VALUE ... | pause | resume | audit | status",
        description="Talk to a gate's admin API. Exit 1 when the gate refuses, with its reason.",
    )
    limits.add_argument(
        "action",
        nargs="?",
        default="get",
        choices=["get", "set", "pause", "resume", "audit", "status"],
    )
    limits.add_argument("assignments", nargs="*", metavar="LANE.KEY=VALUE")
    limits.add_argument(
        "--admin", required=True, metavar="URL", help="the gate, e.g. http://127.0.0.1:9000"
    )
    limits.add_argument("--admin-token-file", type=Path, metavar="FILE", help=_TOKEN_HELP)
    limits.add_argument(
        "--if-match", type=int, metavar="VERSION", help="refuse if the version moved"
    )
    limits.add_argument("--limit", type=_positive_int, default=20, help="audit entries to show")
    limits.add_argument("--read-only", action="store_true", help="refuse every change")
    limits.add_argument("--json", action="store_true", help="print the gate's JSON")

    load = sub.add_parser(
        "load",
        help="bursty load generator: TTFT, TPOT, ITL, E2E, goodput",
        description="Send bursty traffic (gamma arrivals) and report what users feel.",
    )
    load.add_argument(
        "--url", required=True, help="server or gate base URL, e.g. http://127.0.0.1:9000"
    )
    load.add_argument("--model", help="default: the first id of GET /v1/models")
    load.add_argument("--api", choices=["chat", "completions"], default="chat")
    stop = load.add_mutually_exclusive_group(required=True)
    stop.add_argument("--duration", type=_positive_float, metavar="S")
    stop.add_argument("--requests", type=_positive_int, metavar="N")
    load.add_argument("--rate", type=_positive_float, required=True, metavar="R", help="requests/s")
    load.add_argument(
        "--burstiness",
        type=_positive_float,
        default=1.0,
        metavar="B",
        help="gamma shape: 1 = Poisson, below 1 = burstier",
    )
    load.add_argument(
        "--pattern", default="steady", help="steady | spike:period=60,duty=0.2,factor=5"
    )
    load.add_argument("--max-concurrency", type=_positive_int, metavar="C")
    load.add_argument("--prompt-tokens", default="512", metavar="DIST", help=_DIST_HELP)
    load.add_argument("--output-tokens", default="128", metavar="DIST", help=_DIST_HELP)
    load.add_argument("--lane-mix", default="chat=1", metavar="chat=W,embed=W")
    load.add_argument(
        "--slo",
        default="",
        metavar="ttft=S,tpot=S,e2e=S",
        help="seconds; goodput counts requests meeting all",
    )
    load.add_argument("--seed", type=int, default=0)
    load.add_argument("--json", type=Path, metavar="FILE", help="write the report as JSON")
    load.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


_DIST_HELP = "512 (fixed), 128:2048 (uniform), lognormal:mean=800,sigma=0.6"
PROBE_PORTS = (8000, 30000, 8080, 3000, 9000)


def _add_dashboard_args(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("--theme", help="gpuwatch-dark (default), gpuwatch-light, high-contrast, ansi")
    p.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="ttft_p99_s, itl_p99_s, kv_usage_high, waiting_high, preemptions_per_min (0 = off)",
    )
    p.add_argument("--read-only", action="store_true", default=None, help="refuse every change")


_TOKEN_HELP = "admin token file (else $GPUWATCH_ADMIN_TOKEN); never on the command line"


def parse_assignment(text: str) -> tuple[str, str, Any]:
    """``chat.max_inflight=6`` -> ("chat", "max_inflight", 6); ValueError naming the problem."""
    target, sep, raw = text.partition("=")
    lane, dot, key = target.partition(".")
    if not sep or not dot or not lane or not key:
        raise ValueError(f"expected LANE.KEY=VALUE, got {text!r}")
    value: Any
    if raw.lower() in ("null", "none", ""):
        value = None
    elif raw.lower() in ("true", "false"):
        value = raw.lower() == "true"
    else:
        try:
            value = int(raw)
        except ValueError:
            try:
                value = float(raw)
            except ValueError:
                value = raw
    return lane, key, value


def parse_slo_args(items: list[str]) -> dict[str, float]:
    from gpuwatch.alerts import SIGNALS

    out: dict[str, float] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in SIGNALS:
            raise ValueError(f"--slo {item!r}: expected one of {', '.join(SIGNALS)} =VALUE")
        try:
            out[key] = float(raw)
        except ValueError:
            raise ValueError(f"--slo {item!r}: {raw!r} is not a number") from None
    return out


def _dashboard_settings(args: argparse.Namespace) -> dict[str, Any]:
    settings = config.load(args.config)
    config.apply_cli(settings, {"theme": args.theme, "read_only": args.read_only})
    settings["slo"].update(parse_slo_args(args.slo))
    # 0 switches a signal off (TOML has no null).
    settings["slo"] = {k: (v or None) for k, v in settings["slo"].items()}
    return settings


async def probe_local() -> list[str]:
    """The localhost /metrics endpoints that answer with serving metrics."""
    from gpuwatch.httpclient import async_client
    from gpuwatch.sources.scrape import scrape

    urls = [f"http://127.0.0.1:{port}/metrics" for port in PROBE_PORTS]
    async with async_client(connect_timeout_s=0.3, timeout_s=1.0) as client:
        results = await asyncio.gather(*(scrape(client, url, total_timeout_s=1.0) for url in urls))
    return [r.source for r in results if not r.error]


def cmd_top(args: argparse.Namespace) -> int:
    from gpuwatch.sources.nvml import FakeNvml, NvmlReader, SimGpuSource
    from gpuwatch.tui.app import DashboardOptions, GpuwatchApp

    try:
        settings = _dashboard_settings(args)
        config.apply_cli(
            settings, {"metrics": args.metrics, "no_gpu": args.no_gpu, "admin": args.admin}
        )
        token = read_token(args.admin_token_file)
    except ValueError as exc:
        print(f"gpuwatch: {exc}", file=sys.stderr)
        return EXIT_USAGE
    urls = list(settings["metrics"])
    hint = None
    if not urls:
        urls = asyncio.run(probe_local())
        if not urls:
            ports = ", ".join(map(str, PROBE_PORTS))
            hint = (
                f"no serving endpoint answered on localhost ports {ports}: "
                "point gpuwatch at one with --metrics URL, or try `gpuwatch demo`"
            )
    nvml = None
    if args.fake_gpu_from:
        nvml = NvmlReader(FakeNvml(SimGpuSource(args.fake_gpu_from)))
    elif not settings["no_gpu"]:
        nvml = NvmlReader()
    options = DashboardOptions(
        urls=urls,
        interval_s=args.interval or settings["interval_s"],
        admin_url=settings["admin"] or None,
        admin_token=token,
        theme=settings["theme"],
        slo=settings["slo"],
        nvml=nvml,
        hint=hint,
        read_only=settings["read_only"],
    )
    GpuwatchApp(options).run()
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from gpuwatch.demo import run_demo

    try:
        settings = _dashboard_settings(args)
    except ValueError as exc:
        print(f"gpuwatch demo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return run_demo(
        args.profile,
        args.rate,
        args.burstiness,
        settings["theme"],
        settings["read_only"],
        settings["slo"],
    )


def _settings(args: argparse.Namespace) -> dict:
    settings = config.load(args.config)
    return config.apply_cli(
        settings,
        {
            "metrics": args.metrics,
            "no_gpu": args.no_gpu,
            "scrape.connect_timeout_s": args.connect_timeout,
            "scrape.timeout_s": args.timeout,
            "scrape.max_bytes": args.max_bytes,
            "scrape.max_engines": args.max_engines,
        },
    )


def cmd_snapshot(args: argparse.Namespace) -> int:
    from gpuwatch import snapshot
    from gpuwatch.sources.nvml import FakeNvml, NvmlReader, SimGpuSource

    settings = _settings(args)
    nvml = None
    if args.fake_gpu_from:
        nvml = NvmlReader(FakeNvml(SimGpuSource(args.fake_gpu_from)))
    elif not settings["no_gpu"]:
        nvml = NvmlReader()
    scrape_cfg = settings["scrape"]
    snap = asyncio.run(
        snapshot.collect(
            settings["metrics"],
            args.metrics_file,
            nvml=nvml,
            pid=args.pid,
            connect_timeout_s=scrape_cfg["connect_timeout_s"],
            timeout_s=scrape_cfg["timeout_s"],
            max_bytes=scrape_cfg["max_bytes"],
            max_engines=scrape_cfg["max_engines"],
        )
    )
    if nvml:
        nvml.close()
    if args.json:
        sys.stdout.write(snapshot.dumps_json(snap) + "\n")
    else:
        snapshot.render_text(snap, sys.stdout)
    return EXIT_OK if snap.ok else EXIT_FAILED


def cmd_sim(args: argparse.Namespace) -> int:
    from gpuwatch.aioserve import parse_listen, run_until_signalled
    from gpuwatch.sim.profiles import DEFAULT_PROFILE, PROFILES, ProfileError, get_profile
    from gpuwatch.sim.server import start_sim

    if args.list_profiles:
        for profile in PROFILES.values():
            print(profile.describe())
        return EXIT_OK
    try:
        profile = get_profile(args.profile or DEFAULT_PROFILE)
        host, port = parse_listen(args.listen, 8000)
    except (ProfileError, ValueError) as exc:
        print(f"gpuwatch sim: {exc}", file=sys.stderr)
        return EXIT_USAGE

    async def run() -> int:
        try:
            node, served = await start_sim(
                profile,
                host,
                port,
                engines=args.engines,
                time_scale=args.time_scale,
                seed=args.seed,
                model_name=args.served_model_name,
            )
        except OSError as exc:
            print(f"gpuwatch sim: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
            return EXIT_FAILED
        print(
            f"gpuwatch sim: {node.model_name} on {served.url} ({profile.name}, "
            f"{args.engines} engine(s), {profile.kv_tokens:,} KV tokens each, "
            f"time x{args.time_scale:g})",
            flush=True,
        )
        await run_until_signalled(served)
        return EXIT_OK

    return asyncio.run(run())


def cmd_gate(args: argparse.Namespace) -> int:
    from gpuwatch.aioserve import parse_listen, run_until_signalled
    from gpuwatch.gate.config import load_gate_config
    from gpuwatch.gate.server import start_gate
    from gpuwatch.gate.state import StateError

    try:
        host, port = parse_listen(args.listen, 9000)
        token = read_token(args.admin_token_file)
    except ValueError as exc:
        print(f"gpuwatch gate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if token is None and not is_loopback(host):
        print(
            f"gpuwatch gate: refusing to listen on {host} without an admin token: anyone who can "
            "reach it could change the limits. Set --admin-token-file or GPUWATCH_ADMIN_TOKEN.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    gate_config = load_gate_config(args.config)

    async def run() -> int:
        try:
            gate, served = await start_gate(
                args.upstream, gate_config, host, port, token=token, state_file=args.state_file
            )
        except StateError as exc:
            print(
                f"gpuwatch gate: {exc}; fix or remove it (limits are never reset silently)",
                file=sys.stderr,
            )
            return EXIT_FAILED
        except OSError as exc:
            print(f"gpuwatch gate: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
            return EXIT_FAILED
        lanes = ", ".join(
            f"{n} {lane.limits.max_inflight}/{lane.limits.max_queue}"
            for n, lane in gate.lanes.items()
        )
        print(
            f"gpuwatch gate: {served.url} -> {args.upstream} (lanes in-flight/queue: {lanes}; "
            f"state {gate.state.path}; admin {'token required' if token else 'open on loopback'})",
            flush=True,
        )
        await run_until_signalled(served)
        return EXIT_OK

    _use_uvloop()
    return asyncio.run(run())


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _use_uvloop() -> None:
    try:
        import uvloop  # type: ignore[import-not-found]
    except ImportError:
        return
    uvloop.install()


def cmd_load(args: argparse.Namespace) -> int:
    from gpuwatch.load import progress
    from gpuwatch.load.spec import Dist, LoadSpec, Pattern, SpecError, parse_lane_mix, parse_slo

    try:
        spec = LoadSpec(
            url=args.url.rstrip("/"),
            rate=args.rate,
            model=args.model,
            api=args.api,
            duration_s=args.duration,
            requests=args.requests,
            burstiness=args.burstiness,
            pattern=Pattern.parse(args.pattern),
            max_concurrency=args.max_concurrency,
            prompt_tokens=Dist.parse(args.prompt_tokens, "--prompt-tokens"),
            output_tokens=Dist.parse(args.output_tokens, "--output-tokens"),
            lane_mix=parse_lane_mix(args.lane_mix),
            slo=parse_slo(args.slo),
            seed=args.seed,
        )
    except SpecError as exc:
        print(f"gpuwatch load: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _use_uvloop()
    return progress.run_cli(spec, quiet=args.quiet, json_path=args.json)


def cmd_limits(args: argparse.Namespace) -> int:
    from gpuwatch.control.gate import GateClient, GateError
    from gpuwatch.control.guard import Guard, ReadOnlyError

    try:
        token = read_token(args.admin_token_file)
        assignments = [parse_assignment(a) for a in args.assignments]
    except ValueError as exc:
        print(f"gpuwatch limits: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.action == "set" and not assignments:
        print("gpuwatch limits: set needs at least one LANE.KEY=VALUE", file=sys.stderr)
        return EXIT_USAGE
    if args.action != "set" and assignments:
        print(f"gpuwatch limits: {args.action} takes no LANE.KEY=VALUE", file=sys.stderr)
        return EXIT_USAGE

    async def run() -> Any:
        async with GateClient(args.admin, token, Guard(read_only=args.read_only)) as client:
            if args.action == "get":
                return await client.limits()
            if args.action == "status":
                return await client.status()
            if args.action == "audit":
                return await client.audit(args.limit)
            if args.action in ("pause", "resume"):
                return await client.patch({"paused": args.action == "pause"}, args.if_match)
            lanes: dict[str, dict[str, Any]] = {}
            for lane, key, value in assignments:
                lanes.setdefault(lane, {})[key] = value
            return await client.patch({"lanes": lanes}, args.if_match)

    try:
        result = asyncio.run(run())
    except (GateError, ReadOnlyError) as exc:
        print(f"gpuwatch limits: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json or args.action in ("status", "audit"):
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_limits(result)
    return EXIT_OK


def print_limits(limits: dict[str, Any]) -> None:
    print(f"version {limits['version']}  paused {str(limits['paused']).lower()}")
    print(
        f"{'lane':<10}{'inflight':>9}{'queue':>7}{'timeout':>9}{'prompt':>8}{'output':>8}  policy"
    )
    for name, lane in limits["lanes"].items():

        def show(v: Any) -> str:
            return "-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)

        print(
            f"{name:<10}{lane['max_inflight']:>9}{lane['max_queue']:>7}{show(lane['queue_timeout_s']):>9}"
            f"{show(lane['max_prompt_tokens']):>8}{show(lane['max_output_tokens']):>8}"
            f"  {lane['output_tokens_policy']}"
        )


COMMANDS = {
    "top": cmd_top,
    "demo": cmd_demo,
    "snapshot": cmd_snapshot,
    "sim": cmd_sim,
    "gate": cmd_gate,
    "limits": cmd_limits,
    "load": cmd_load,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # `gpuwatch` alone, or with dashboard options only, is the dashboard.
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "top")
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except config.ConfigError as exc:
        print(f"gpuwatch: config error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` that closed early: not an error worth a traceback.
        sys.stderr.close()
        return EXIT_OK
