"""``gpuwatch load``: bursty load that measures what users feel."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuwatch.cli.common import DIST_HELP, positive_float, positive_int, use_uvloop


def register(load: argparse.ArgumentParser) -> None:
    load.description = "Send bursty traffic (gamma arrivals) and report what users feel."
    load.add_argument(
        "--url", required=True, help="server or gate base URL, e.g. http://127.0.0.1:9000"
    )
    load.add_argument("--model", help="default: the first id of GET /v1/models")
    load.add_argument("--api", choices=["chat", "completions"], default="chat")
    stop = load.add_mutually_exclusive_group(required=True)
    stop.add_argument("--duration", type=positive_float, metavar="S")
    stop.add_argument("--requests", type=positive_int, metavar="N")
    load.add_argument("--rate", type=positive_float, required=True, metavar="R", help="requests/s")
    load.add_argument(
        "--burstiness",
        type=positive_float,
        default=1.0,
        metavar="B",
        help="gamma shape: 1 = Poisson, below 1 = burstier",
    )
    load.add_argument(
        "--pattern", default="steady", help="steady | spike:period=60,duty=0.2,factor=5"
    )
    load.add_argument("--max-concurrency", type=positive_int, metavar="C")
    load.add_argument("--prompt-tokens", default="512", metavar="DIST", help=DIST_HELP)
    load.add_argument("--output-tokens", default="128", metavar="DIST", help=DIST_HELP)
    load.add_argument(
        "--mix",
        "--lane-mix",
        dest="mix",
        default="chat=1",
        metavar="chat=W,embed=W,image=W",
        help="weights of each kind of request (--lane-mix is the old spelling)",
    )
    load.add_argument("--embed-inputs", default="1:8", metavar="DIST", help="inputs per embed")
    load.add_argument("--embed-tokens", default="32:512", metavar="DIST", help="tokens per input")
    load.add_argument("--image-size", default="1024x1024", metavar="WxH[,WxH]")
    load.add_argument("--image-steps", default="30", metavar="DIST", help="denoising steps")
    load.add_argument("--image-n", default="1", metavar="DIST", help="images per request")
    load.add_argument(
        "--tenants",
        type=int,
        default=0,
        metavar="N",
        help="N tenants (x-llm-d-inference-fairness-id), Zipf-skewed",
    )
    load.add_argument("--tenant-skew", type=float, default=1.0, metavar="S", help="Zipf exponent")
    load.add_argument(
        "--noisy-tenant",
        type=float,
        default=0.0,
        metavar="X",
        help="add tenant 'noisy' sending X times the busiest tenant",
    )
    load.add_argument(
        "--classes",
        default="",
        metavar="critical=W,standard=W",
        help="objective names sent in x-llm-d-inference-objective, by weight",
    )
    load.add_argument(
        "--slo",
        default="",
        metavar="ttft=S,tpot=S,e2e=S",
        help="seconds; goodput counts requests meeting all",
    )
    load.add_argument("--seed", type=int, default=0)
    load.add_argument("--json", type=Path, metavar="FILE", help="write the report as JSON")
    load.add_argument("--quiet", action="store_true", help="no progress bar")
    load.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpuwatch.load import progress
    from gpuwatch.load.spec import (
        Dist,
        EmbedShape,
        ImageShape,
        LoadSpec,
        Pattern,
        Tenancy,
        parse_lane_mix,
        parse_sizes,
        parse_slo,
        parse_weights,
    )

    spec = LoadSpec(  # SpecError: exit 2 (cli/main.py)
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
        lane_mix=parse_lane_mix(args.mix),
        embed=EmbedShape(
            Dist.parse(args.embed_inputs, "--embed-inputs"),
            Dist.parse(args.embed_tokens, "--embed-tokens"),
        ),
        image=ImageShape(
            parse_sizes(args.image_size),
            Dist.parse(args.image_steps, "--image-steps"),
            Dist.parse(args.image_n, "--image-n"),
        ),
        tenancy=Tenancy(args.tenants, args.tenant_skew, args.noisy_tenant),
        classes=parse_weights(args.classes, "--classes") if args.classes else {},
        slo=parse_slo(args.slo),
        seed=args.seed,
    )
    use_uvloop()
    return progress.run_cli(spec, quiet=args.quiet, json_path=args.json)
