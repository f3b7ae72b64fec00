"""``gpuwatch gate``: the admission-control proxy with its admin API."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
from dataclasses import replace
from pathlib import Path

from gpuwatch.admintoken import read_token
from gpuwatch.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    TOKEN_HELP,
    fail,
    positive_float,
    use_uvloop,
)
from gpuwatch.fmt import clip
from gpuwatch.otlp import PROTOCOLS, endpoint_argument
from gpuwatch.stall import DEFAULT_STALL_AFTER_S

PROG = "gpuwatch gate"


def register(gate: argparse.ArgumentParser) -> None:
    gate.description = (
        "Bound work in flight, queue fairly, refuse the rest clearly; change it live."
    )
    gate.add_argument("--upstream", required=True, metavar="URL", help="e.g. http://127.0.0.1:8000")
    gate.add_argument("--listen", default="127.0.0.1:9000", metavar="HOST:PORT")
    gate.add_argument("--config", type=Path, metavar="FILE", help="lanes and limits (TOML)")
    gate.add_argument("--state-file", type=Path, metavar="FILE", help="persisted limits + audit")
    gate.add_argument("--admin-token-file", type=Path, metavar="FILE", help=TOKEN_HELP)
    gate.add_argument(
        "--upstream-metrics",
        metavar="URL",
        help="the upstream's /metrics: KV usage and preemptions for adaptive lanes",
    )
    gate.add_argument(
        "--controller",
        choices=("aimd", "gradient"),
        default="aimd",
        help="adaptive lanes' controller (gradient: the rejected alternative, for comparison)",
    )
    gate.add_argument(
        "--adaptive-pace",
        type=positive_float,
        default=1.0,
        metavar="X",
        help="the controller's timings x X (1/N in front of a simulator at --time-scale N)",
    )
    gate.add_argument(
        "--stall-after",
        type=stall_seconds,
        default=DEFAULT_STALL_AFTER_S,
        metavar="S",
        help="requests upstream and no progress for S s is a stall: shed until it moves "
        f"(default {DEFAULT_STALL_AFTER_S:g}; 0: off)",
    )
    gate.add_argument(
        "--stall-lanes",
        metavar="LANE,...",
        help="the lanes a stall sheds (default: the lanes of chat, completions, responses)",
    )
    gate.add_argument(
        "--otlp-endpoint",
        type=endpoint_argument,
        metavar="URL",
        help="send a span per request and the GenAI metrics to this OpenTelemetry collector "
        "(e.g. http://127.0.0.1:4318, or :4317 with --otlp-protocol grpc; "
        "overrides [otlp] endpoint; docs/otel.md)",
    )
    gate.add_argument(
        "--otlp-protocol",
        choices=PROTOCOLS,
        help="OTLP/HTTP (a collector's port 4318, the default) or gRPC (4317; needs the "
        "otlp-grpc extra); overrides [otlp] protocol",
    )
    gate.set_defaults(func=run)


def stall_seconds(text: str) -> float:
    """``--stall-after``: seconds from 0 (off) to an hour."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 3600:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be from 0 (off) to 3600 s: {text!r}")
    return value


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    from gpuwatch.aioserve import parse_listen, run_until_signalled
    from gpuwatch.gate.config import load_gate_config
    from gpuwatch.gate.server import start_gate
    from gpuwatch.gate.state import StateError

    try:
        host, port = parse_listen(args.listen, 9000)
        token = read_token(args.admin_token_file)
    except ValueError as exc:
        return fail(PROG, str(exc))
    if token is None and not is_loopback(host):
        return fail(
            PROG,
            f"refusing to listen on {host} without an admin token: anyone who can reach it "
            "could change the limits. Set --admin-token-file or GPUWATCH_ADMIN_TOKEN.",
        )
    gate_config = load_gate_config(args.config)
    otlp = gate_config.otlp
    if args.otlp_endpoint is not None:
        otlp = replace(otlp, endpoint=args.otlp_endpoint)
    if args.otlp_protocol is not None:
        otlp = replace(otlp, protocol=args.otlp_protocol)
    gate_config = replace(gate_config, otlp=otlp)
    stall_lanes = None
    if args.stall_lanes is not None:
        names = {lane.name for lane in gate_config.lanes}
        stall_lanes = [n.strip() for n in args.stall_lanes.split(",") if n.strip()]
        unknown = [n for n in stall_lanes if n not in names]
        if unknown:
            return fail(
                PROG,
                f"--stall-lanes: no lane '{clip(unknown[0], 60)}' "
                f"(lanes: {', '.join(sorted(names))})",
            )

    async def serve() -> int:
        try:
            gate, served = await start_gate(
                args.upstream,
                gate_config,
                host,
                port,
                token=token,
                state_file=args.state_file,
                upstream_metrics=args.upstream_metrics,
                controller=args.controller,
                adaptive_pace=args.adaptive_pace,
                stall_after_s=args.stall_after or None,
                stall_lanes=stall_lanes,
            )
        except StateError as exc:
            return fail(
                PROG, f"{exc}; fix or remove it (limits are never reset silently)", EXIT_FAILED
            )
        except OSError as exc:
            return fail(PROG, f"cannot listen on {host}:{port}: {exc.strerror}", EXIT_FAILED)
        endpoint = gate_config.otlp.endpoint
        otlp_note = f"; spans and GenAI metrics to {endpoint}" if endpoint else ""
        lanes = ", ".join(
            f"{n} {lane.limits.max_inflight}/{lane.limits.max_queue}"
            for n, lane in gate.lanes.items()
        )
        print(
            f"{PROG}: {served.url} -> {args.upstream} (lanes in-flight/queue: {lanes}; "
            f"state {gate.state.path}; admin {'token required' if token else 'open on loopback'}"
            f"{otlp_note})",
            flush=True,
        )
        await run_until_signalled(served)
        return EXIT_OK

    use_uvloop()
    return asyncio.run(serve())
