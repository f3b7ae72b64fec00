"""``gpuwatch plan kv``: KV bytes per token, KV tokens and sessions that fit, with the sums."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from gpuwatch.cli.common import DIST_HELP, EXIT_FAILED, EXIT_OK, positive_int
from gpuwatch.cli.sources import nvml_reader
from gpuwatch.load.spec import Dist
from gpuwatch.plan.kv import (
    KvInputs,
    PlanError,
    inputs_from_profile,
    plan_kv,
    render_explain,
    render_table,
)
from gpuwatch.plan.modelconfig import (
    KV_CACHE_DTYPES,
    MODEL_DTYPES,
    ModelShape,
    load_config,
)
from gpuwatch.sim.profiles import PROFILES, get_profile

PROG = "gpuwatch plan kv"
_UNITS = {
    "": 2**30,  # a bare number is GiB
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
SIZE_HELP = "GiB, or with a unit: 80GB, 81559MiB, 24GiB, 85899345920B"


def parse_size(text: str) -> float:
    """An argparse type: a memory size; a bare number is GiB."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} ({SIZE_HELP})")
    return float(m.group(1)) * _UNITS[unit]


def parse_fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1]: {text!r}")
    return value


def register(sub: Any) -> None:
    p = sub.add_parser(
        "kv",
        help="KV bytes per token, KV tokens and sessions that fit (static arithmetic)",
        description=(
            "The static KV arithmetic vLLM does at start-up: from a model's config.json (or a "
            "simulator profile), GPU memory, weights and settings, the KV bytes per token, the "
            "KV tokens that fit, and how many sessions of a traffic shape fit at once."
        ),
    )
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--config", type=Path, metavar="PATH", help="config.json (or its folder)")
    model.add_argument(
        "--profile", metavar="NAME", help=f"a simulator profile: {', '.join(PROFILES)}"
    )
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument("--gpu-memory", type=parse_size, metavar="SIZE", help=SIZE_HELP)
    gpu.add_argument("--gpu", type=int, metavar="N", help="total memory of GPU N, read via NVML")
    p.add_argument(
        "--fake-gpu-from", metavar="URL", help="with --gpu: GPUs from a simulator's /sim/gpu"
    )
    p.add_argument(
        "--weights",
        type=parse_size,
        metavar="SIZE",
        help="weights in GPU memory (default: the profile's, or estimated from config.json)",
    )
    p.add_argument("--gpu-memory-utilization", type=parse_fraction, metavar="F", help="default 0.9")
    p.add_argument(
        "--reserve",
        type=parse_size,
        metavar="SIZE",
        help="activation peak and other non-KV memory inside the budget (default 1 GiB, or "
        "the profile's)",
    )
    p.add_argument("--block-size", type=positive_int, metavar="N", help="default 16")
    p.add_argument(
        "--dtype",
        choices=MODEL_DTYPES,
        default="auto",
        help="vLLM's --dtype (with --config): auto runs float32 checkpoints in 16 bits",
    )
    p.add_argument(
        "--no-bf16",
        dest="bf16",
        action="store_false",
        help="the GPU lacks bfloat16 (before Ampere: V100, T4): auto picks float16",
    )
    p.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    p.add_argument(
        "--max-model-len", type=positive_int, metavar="N", help="default: the config's or profile's"
    )
    p.add_argument(
        "--no-sliding-window",
        dest="sliding",
        action="store_false",
        help="plan as engines that keep every token on sliding-window layers (vLLM V0)",
    )
    p.add_argument("--prompt-tokens", default="512", metavar="DIST", help=DIST_HELP)
    p.add_argument("--output-tokens", default="128", metavar="DIST", help=DIST_HELP)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object on stdout")
    out.add_argument("--explain", action="store_true", help="every step, numbers plugged in")
    p.set_defaults(func=run)


class GpuReadError(PlanError, exit_code=EXIT_FAILED):
    """NVML (or the fake GPU source) could not say the GPU's memory: exit 1, as a failed
    source is for every command."""


def nvml_total(index: int, fake_gpu_from: str | None = None) -> tuple[float, str]:
    """(total bytes, "NVML GPU N: name"); ``GpuReadError`` with one line when it cannot."""
    import httpx  # only when a GPU is read: `gpuwatch --help` must not load it

    reader = nvml_reader(fake_gpu_from)
    try:
        reading = reader.read()
    except httpx.InvalidURL as exc:  # a --fake-gpu-from URL httpx cannot parse
        raise GpuReadError(f"--gpu {index}: --fake-gpu-from: {exc}") from None
    finally:
        reader.close()
    if reading.error:
        raise GpuReadError(f"--gpu {index}: {reading.error}")
    sample = next((g for g in reading.gpus if g.index == index), None)
    if sample is None:
        raise GpuReadError(f"--gpu {index}: no such GPU ({len(reading.gpus)} found)")
    if sample.error or not sample.memory_total_bytes:
        raise GpuReadError(f"--gpu {index}: {sample.error or 'total memory not reported'}")
    return float(sample.memory_total_bytes), f"NVML GPU {index}: {sample.name}"


def build_inputs(args: argparse.Namespace) -> KvInputs:
    if args.fake_gpu_from and args.gpu is None:
        raise PlanError("--fake-gpu-from needs --gpu N")
    prompt = Dist.parse(args.prompt_tokens, "--prompt-tokens")
    output = Dist.parse(args.output_tokens, "--output-tokens")
    gpu: tuple[float, str] | None = None
    if args.gpu_memory is not None:
        gpu = (args.gpu_memory, "--gpu-memory")
    settings: dict[str, Any] = {
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "reserve_bytes": args.reserve,
        "block_size": args.block_size,
        "kv_cache_dtype": args.kv_cache_dtype,
        "sliding": args.sliding,
        "max_model_len": args.max_model_len,
        "prompt_tokens": prompt,
        "output_tokens": output,
    }
    if args.weights is not None:
        settings.update(weight_bytes=args.weights, weights_from="--weights")
    if args.profile:
        if args.gpu is not None:
            gpu = nvml_total(args.gpu, args.fake_gpu_from)
        if gpu is not None:
            settings.update(gpu_bytes=gpu[0], gpu_from=gpu[1])
        return inputs_from_profile(get_profile(args.profile), **settings)
    shape: ModelShape = load_config(args.config, dtype=args.dtype, bf16=args.bf16)
    if args.weights is None:
        if shape.weight_bytes is None:
            raise PlanError(
                "--weights is needed: config.json lacks hidden_size, intermediate_size or "
                "vocab_size to estimate them"
            )
        label = f", {shape.quantization}" if shape.quantization else ""
        settings.update(
            weight_bytes=shape.weight_bytes,
            weights_from=f"estimated: {shape.params:,} params at {shape.dtype}{label}",
        )
    if args.gpu is not None:
        gpu = nvml_total(args.gpu, args.fake_gpu_from)
    if gpu is None:
        raise PlanError("give the GPU's memory: --gpu-memory SIZE or --gpu N")
    settings.update(gpu_bytes=gpu[0], gpu_from=gpu[1])
    if settings["max_model_len"] is None:
        settings["max_model_len"] = shape.max_model_len
    # what was not given takes KvInputs' defaults (utilization 0.9, reserve 1 GiB, block 16)
    return KvInputs(shape=shape, **{k: v for k, v in settings.items() if v is not None})


def run(args: argparse.Namespace) -> int:
    # ConfigError, SpecError, ProfileError, PlanError: exit 2; GpuReadError: 1 (cli/main.py)
    plan = plan_kv(build_inputs(args))
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    elif args.explain:
        print(render_explain(plan))
    else:
        print(render_table(plan))
    return EXIT_OK
