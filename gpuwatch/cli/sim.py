"""``gpuwatch sim``: a simulated GPU inference node on this machine."""

from __future__ import annotations

import argparse
import asyncio
import signal

from gpuwatch.cli.common import EXIT_FAILED, EXIT_OK, fail, positive_float, positive_int
from gpuwatch.otlp import PROTOCOLS, endpoint_argument


def register(sim: argparse.ArgumentParser) -> None:
    sim.description = "Serve a simulated vLLM-like node: continuous batching, paged KV cache."
    sim.add_argument("--profile", default=None, help="GPU + model profile (see --list-profiles)")
    sim.add_argument("--list-profiles", action="store_true", help="print profiles and exit")
    sim.add_argument("--listen", default="127.0.0.1:8000", metavar="HOST:PORT")
    sim.add_argument("--engines", type=positive_int, default=1, help="data-parallel engines")
    sim.add_argument(
        "--time-scale", type=positive_float, default=1.0, metavar="X", help="run X times faster"
    )
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--served-model-name", metavar="NAME")
    sim.add_argument(
        "--workloads",
        default="",
        metavar="embed,image",
        help="also serve /v1/embeddings (embed) and /v1/images/generations (image) on the GPU",
    )
    sim.add_argument(
        "--image-reserve-gib",
        type=positive_float,
        default=5.0,
        metavar="G",
        help="VRAM kept for image activations when serving images (5)",
    )
    sim.add_argument(
        "--mig",
        metavar="LAYOUT",
        help="each GPU in MIG mode with these devices: 3g.40gb+4g.40gb, 7x1g.10gb (docs/sim.md)",
    )
    sim.add_argument(
        "--otlp-endpoint",
        type=endpoint_argument,
        metavar="URL",
        help="export each request's spans (queue, prefill, decode) under the incoming "
        "traceparent to this OpenTelemetry collector (docs/otel.md)",
    )
    sim.add_argument(
        "--otlp-protocol",
        choices=PROTOCOLS,
        default="http/protobuf",
        help="OTLP/HTTP (a collector's port 4318, the default) or gRPC (4317; needs the "
        "otlp-grpc extra)",
    )
    sim.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpuwatch.aioserve import parse_listen, run_until_signalled
    from gpuwatch.otlp import OtlpConfig
    from gpuwatch.sim.mig import parse_layout
    from gpuwatch.sim.profiles import (
        DEFAULT_PROFILE,
        PROFILES,
        ProfileError,
        get_profile,
        with_side_models,
    )
    from gpuwatch.sim.server import start_sim

    if args.list_profiles:
        for profile in PROFILES.values():
            print(profile.describe())
        return EXIT_OK
    try:
        profile = get_profile(args.profile or DEFAULT_PROFILE)
        host, port = parse_listen(args.listen, 8000)
        workloads = set(filter(None, (w.strip() for w in args.workloads.split(","))))
        if workloads - {"embed", "image"}:
            raise ValueError(f"--workloads: unknown {sorted(workloads - {'embed', 'image'})[0]!r}"
                             " (known: embed, image)")  # fmt: skip
        reserve = int(args.image_reserve_gib * 2**30)
        # Checked here so that a mix that does not fit is a usage error, not a traceback.
        shared = with_side_models(profile, "embed" in workloads, "image" in workloads, reserve)
        mig = parse_layout(args.mig, profile.gpu.name, profile.gpu.vram_bytes) if args.mig else []
        otlp = OtlpConfig(args.otlp_endpoint, args.otlp_protocol) if args.otlp_endpoint else None
    except (ProfileError, ValueError) as exc:
        return fail("gpuwatch sim", str(exc))

    async def serve() -> int:
        try:
            node, served = await start_sim(
                profile,
                host,
                port,
                engines=args.engines,
                time_scale=args.time_scale,
                seed=args.seed,
                model_name=args.served_model_name,
                embed="embed" in workloads,
                image="image" in workloads,
                image_reserve=reserve,
                mig=mig,
                otlp=otlp,
            )
        except OSError as exc:
            return fail(
                "gpuwatch sim", f"cannot listen on {host}:{port}: {exc.strerror}", EXIT_FAILED
            )
        side = (
            f", also {', '.join(sorted(workloads))} at gpu_memory_utilization "
            f"{shared.gpu_memory_utilization:g}"
            if workloads
            else ""
        )

        def toggled() -> None:
            node.toggle_stall()
            what = "stalled until the next SIGUSR1" if node.stalled_since else "resumed"
            print(f"gpuwatch sim: engines {what}", flush=True)

        toggle = getattr(signal, "SIGUSR1", None)  # not on Windows
        if toggle is not None:
            # kill -USR1 stalls the engines until the next one (docs/sim.md, "Stalls").
            asyncio.get_running_loop().add_signal_handler(toggle, toggled)
        print(
            f"gpuwatch sim: {node.model_name} on {served.url} ({profile.name}, "
            f"{args.engines} engine(s), {shared.kv_tokens:,} KV tokens each, "
            f"time x{args.time_scale:g}{side}{', MIG ' + args.mig if mig else ''})",
            flush=True,
        )
        await run_until_signalled(served)
        return EXIT_OK

    return asyncio.run(serve())
