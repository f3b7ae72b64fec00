"""The one entry point: ``gpuwatch <subcommand>``; each subcommand calls one package."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from gpuwatch import __version__, config

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", type=Path, metavar="FILE", help=f"config file (default {config.default_path()})"
    )


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuwatch",
        description="htop for LLM serving on a GPU node: VRAM, KV cache, queues, tail latency.",
    )
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

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
    return parser


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
        )
    )
    if nvml:
        nvml.close()
    if args.json:
        json.dump(snapshot.to_json(snap), sys.stdout, indent=2, allow_nan=False, default=str)
        sys.stdout.write("\n")
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


COMMANDS = {"snapshot": cmd_snapshot, "sim": cmd_sim}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return COMMANDS[args.command](args)
    except config.ConfigError as exc:
        print(f"gpuwatch: config error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
