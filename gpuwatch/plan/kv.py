"""``gpuwatch plan kv``: the static KV arithmetic, each step kept with its numbers (pure).

From a model's shape (``config.json`` or a simulator profile), GPU memory, weights and vLLM's
settings: KV bytes per token, the KV pool, the blocks and tokens that fit, and how many
sessions of a traffic shape fit at once. The arithmetic itself is ``gpuwatch.sim.profiles``'
(one implementation; the simulator sizes its KV pool with the same functions); this module
plugs the inputs in and writes down every step for ``--explain``.

Sliding windows are modelled as vLLM V1's allocator does: a layer with a window of W tokens
keeps only the blocks its window touches, ``ceil((W - 1) / block) + 1`` at most, so a session
holds its whole length on full-attention layers and at most that on sliding ones. The pool is
counted in layer-blocks (one block of one layer) so mixed full and sliding layers add up.
``sliding=False`` plans as engines that keep every token (vLLM V0, llama.cpp without SWA).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from gpuwatch.errors import EXIT_USAGE, GpuwatchError
from gpuwatch.load.spec import Dist
from gpuwatch.plan.modelconfig import DTYPE_BYTES, ModelShape
from gpuwatch.sim.profiles import (
    GIB,
    Profile,
    kv_blocks,
    kv_bytes_per_token,
    kv_pool_bytes,
)

DEFAULT_RESERVE_BYTES = GIB  # activations at the profiling run's peak, plus non-torch memory


class PlanError(GpuwatchError, ValueError, exit_code=EXIT_USAGE):
    """Inputs the arithmetic cannot use: the message names the one at fault."""


def dist_quantile(dist: Dist, q: float) -> int:
    """The ``q`` quantile of a token-count distribution as ``gpuwatch load`` draws it."""
    if dist.kind == "fixed":
        return int(dist.a)
    if dist.kind == "uniform":
        lo, hi = int(dist.a), int(dist.b)
        return lo + max(0, math.ceil(q * (hi - lo + 1)) - 1)
    mu = math.log(dist.a) - dist.b**2 / 2  # lognormal given its mean, as Dist.sample
    return max(1, round(math.exp(mu + dist.b * NormalDist().inv_cdf(q))))


def n(value: float) -> str:
    """An integer with thousands separators (the explanation's numbers are exact)."""
    return f"{round(value):,}"


def size(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


@dataclass(frozen=True)
class Step:
    what: str
    arithmetic: str
    value: str


@dataclass(frozen=True)
class SessionFit:
    label: str  # "p50" or "p99"
    prompt_tokens: int
    output_tokens: int
    blocks: int  # blocks on a full-attention layer: ceil(tokens / block_size)
    sliding_blocks: int  # blocks on a sliding-window layer (== blocks when none slide)
    sessions: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "tokens": self.tokens,
            "blocks": self.blocks,
            "sliding_blocks": self.sliding_blocks,
            "sessions": self.sessions,
        }


@dataclass(frozen=True)
class KvInputs:
    shape: ModelShape
    gpu_bytes: float
    gpu_from: str
    weight_bytes: float
    weights_from: str
    gpu_memory_utilization: float = 0.9
    reserve_bytes: float = DEFAULT_RESERVE_BYTES
    block_size: int = 16
    kv_cache_dtype: str = "auto"
    sliding: bool = True
    max_model_len: int | None = None
    prompt_tokens: Dist = field(default_factory=lambda: Dist("fixed", 512))
    output_tokens: Dist = field(default_factory=lambda: Dist("fixed", 128))


@dataclass(frozen=True)
class KvPlan:
    inputs: KvInputs
    kv_dtype: str
    kv_dtype_bytes: float
    bytes_per_token: int
    usable_bytes: float
    pool_bytes: float
    blocks: int
    tokens: int
    sessions: list[SessionFit]
    steps: list[Step]
    warnings: list[str]

    def session(self, label: str) -> SessionFit:
        return next(s for s in self.sessions if s.label == label)

    def to_json(self) -> dict[str, Any]:
        i, shape = self.inputs, self.inputs.shape
        return {
            "model": shape.name,
            "layers": shape.layers,
            "kv_heads": shape.kv_heads,
            "head_dim": shape.head_dim,
            "kv_lora_rank": shape.kv_lora_rank,
            "qk_rope_head_dim": shape.qk_rope_head_dim if shape.mla else None,
            "dtype": shape.dtype,
            "config_dtype": shape.config_dtype,
            "dtype_why": shape.dtype_why,
            "params": shape.params,
            "sliding_window": shape.sliding_window if i.sliding else None,
            "sliding_layers": shape.sliding_layers if i.sliding else 0,
            "kv_cache_dtype": self.kv_dtype,
            "kv_dtype_bytes": self.kv_dtype_bytes,
            "gpu_memory_bytes": i.gpu_bytes,
            "gpu_memory_from": i.gpu_from,
            "gpu_memory_utilization": i.gpu_memory_utilization,
            "weight_bytes": i.weight_bytes,
            "weights_from": i.weights_from,
            "reserve_bytes": i.reserve_bytes,
            "block_size": i.block_size,
            "max_model_len": i.max_model_len,
            "kv_bytes_per_token": self.bytes_per_token,
            "usable_bytes": self.usable_bytes,
            "kv_pool_bytes": self.pool_bytes,
            "kv_blocks": self.blocks,
            "kv_tokens": self.tokens,
            "prompt_tokens": str(i.prompt_tokens),
            "output_tokens": str(i.output_tokens),
            "sessions": {s.label: s.to_json() for s in self.sessions},
            "warnings": self.warnings,
        }


def kv_dtype_of(shape: ModelShape, kv_cache_dtype: str) -> tuple[str, float]:
    """vLLM's ``--kv-cache-dtype``: auto is the model's dtype; fp8 variants are one byte."""
    if kv_cache_dtype == "auto":
        return shape.dtype, shape.dtype_bytes
    if kv_cache_dtype not in DTYPE_BYTES:
        raise PlanError(f"--kv-cache-dtype: unknown {kv_cache_dtype!r}")
    return kv_cache_dtype, DTYPE_BYTES[kv_cache_dtype]


def _session(
    label: str, q: float, i: KvInputs, blocks: int, sliding_layers: int, steps: list[Step]
) -> SessionFit:
    shape, bs = i.shape, i.block_size
    prompt, output = dist_quantile(i.prompt_tokens, q), dist_quantile(i.output_tokens, q)
    tokens = prompt + output
    full = math.ceil(tokens / bs)
    steps.append(
        Step(
            f"{label} session",
            f"{label} prompt {n(prompt)} ({i.prompt_tokens!s}) + {label} output "
            f"{n(output)} ({i.output_tokens!s}) = {n(tokens)} tokens; "
            f"ceil({n(tokens)} / {bs}) = {n(full)} blocks",
            f"{n(full)} blocks",
        )
    )
    if not sliding_layers:
        sessions = blocks // full
        steps.append(
            Step(
                f"{label} sessions that fit",
                f"floor({n(blocks)} blocks / {n(full)} blocks per session) = {n(sessions)}",
                n(sessions),
            )
        )
        return SessionFit(label, prompt, output, full, full, sessions)
    window = shape.sliding_window or 0
    cap = math.ceil((window - 1) / bs) + 1
    held = min(full, cap)
    full_layers = shape.layers - sliding_layers
    per_session = full_layers * full + sliding_layers * held
    pool = blocks * shape.layers
    sessions = pool // per_session
    steps.append(
        Step(
            f"{label} sliding-layer blocks",
            f"min({n(full)}, ceil(({n(window)} - 1) / {bs}) + 1 = {n(cap)}) = {n(held)} blocks "
            "held on each sliding layer",
            f"{n(held)} blocks",
        )
    )
    steps.append(
        Step(
            f"{label} sessions that fit",
            f"floor({n(blocks)} blocks x {shape.layers} layers / ({full_layers} full layers x "
            f"{n(full)} + {sliding_layers} sliding layers x {n(held)}) layer-blocks) = "
            f"floor({n(pool)} / {n(per_session)}) = {n(sessions)}",
            n(sessions),
        )
    )
    return SessionFit(label, prompt, output, full, held, sessions)


def plan_kv(i: KvInputs) -> KvPlan:
    """Every figure, with the steps that produced it."""
    shape = i.shape
    if not 0 < i.gpu_memory_utilization <= 1:
        raise PlanError(
            f"--gpu-memory-utilization must be in (0, 1], got {i.gpu_memory_utilization:g}"
        )
    if i.block_size < 1:
        raise PlanError(f"--block-size must be at least 1, got {i.block_size}")
    steps = [Step("model", shape.name, "")]
    steps += [Step("from config.json", note, "") for note in shape.derived]
    kv_dtype, dtype_bytes = kv_dtype_of(shape, i.kv_cache_dtype)
    if shape.dtype_why:
        steps.append(Step("model dtype", shape.dtype_why, shape.dtype))
    how = f"auto = the model's dtype {kv_dtype}" if i.kv_cache_dtype == "auto" else kv_dtype
    if shape.quantization:
        how += f" (weights {shape.quantization}: the KV cache is not quantized by it)"
    steps.append(Step("KV dtype", how, f"{dtype_bytes:g} bytes"))
    if shape.mla:
        per_token = math.ceil(shape.layers * shape.kv_width * dtype_bytes)
        sums = (
            f"(kv_lora_rank {shape.kv_lora_rank} + qk_rope_head_dim {shape.qk_rope_head_dim}) "
            f"(MLA latent) x {shape.layers} layers x {dtype_bytes:g} bytes"
        )
    else:
        per_token = kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, dtype_bytes)
        sums = (
            f"2 (K and V) x {shape.layers} layers x {shape.kv_heads} KV heads x "
            f"{shape.head_dim} head dim x {dtype_bytes:g} bytes"
        )
    steps.append(
        Step("KV bytes per token", f"{sums} = {n(per_token)} B", f"{per_token / 1024:g} KiB")
    )
    usable = i.gpu_bytes * i.gpu_memory_utilization
    steps.append(
        Step(
            "usable memory",
            f"GPU {n(i.gpu_bytes)} B ({i.gpu_from}) x gpu_memory_utilization "
            f"{i.gpu_memory_utilization:g} = {n(usable)} B",
            size(usable),
        )
    )
    pool = kv_pool_bytes(i.gpu_bytes, i.gpu_memory_utilization, i.weight_bytes, i.reserve_bytes)
    steps.append(
        Step(
            "KV pool",
            f"usable {n(usable)} - weights {n(i.weight_bytes)} ({i.weights_from}) - reserve "
            f"{n(i.reserve_bytes)} (activation peak and non-torch memory) = {n(pool)} B",
            size(pool),
        )
    )
    block_bytes = i.block_size * per_token
    blocks = kv_blocks(pool, i.block_size, per_token)
    steps.append(
        Step(
            "KV blocks",
            f"floor({n(max(pool, 0))} B / ({i.block_size} tokens x {n(per_token)} B = "
            f"{n(block_bytes)} B per block)) = {n(blocks)}",
            n(blocks),
        )
    )
    tokens = blocks * i.block_size
    steps.append(
        Step("KV tokens that fit", f"{n(blocks)} blocks x {i.block_size} = {n(tokens)}", n(tokens))
    )
    sliding_layers = shape.sliding_layers if i.sliding else 0
    if shape.sliding_window and not i.sliding:
        steps.append(
            Step(
                "sliding window",
                f"{n(shape.sliding_window)} ignored (--no-sliding-window): every layer keeps "
                "every token",
                "",
            )
        )
    sessions = (
        [
            _session(lbl, q, i, blocks, sliding_layers, steps)
            for lbl, q in (("p50", 0.5), ("p99", 0.99))
        ]
        if blocks
        else []
    )
    warnings = []
    if i.weight_bytes > usable:
        warnings.append(f"weights {size(i.weight_bytes)} > usable {size(usable)}: nothing fits")
    elif not blocks:
        warnings.append(f"no KV pool: usable {size(usable)} - weights - reserve <= one block")
    if i.max_model_len and blocks and tokens < i.max_model_len and not sliding_layers:
        warnings.append(
            f"KV tokens {n(tokens)} < max_model_len {n(i.max_model_len)}: vLLM refuses to start; "
            "lower --max-model-len or raise the memory"
        )
    longest = max((s.tokens for s in sessions), default=0)
    if i.max_model_len and longest > i.max_model_len:
        warnings.append(
            f"a p99 session of {n(longest)} tokens is longer than max_model_len "
            f"{n(i.max_model_len)}: the engine rejects it"
        )
    return KvPlan(
        i, kv_dtype, dtype_bytes, per_token, usable, pool, blocks, tokens, sessions, steps, warnings
    )


def shape_from_profile(profile: Profile) -> ModelShape:
    m = profile.model
    return ModelShape(
        name=m.name,
        layers=m.layers,
        attention_heads=m.kv_heads,  # profiles keep only what the KV arithmetic needs
        kv_heads=m.kv_heads,
        head_dim=m.head_dim,
        dtype="fp8" if m.kv_dtype_bytes == 1 else "bfloat16",
        max_model_len=m.max_model_len,
        params=round(m.params),
        weight_bytes=m.weight_bytes,
    )


def inputs_from_profile(profile: Profile, **overrides: Any) -> KvInputs:
    """The inputs a simulator profile sizes its pool with (overrides replace any of them)."""
    base: dict[str, Any] = {
        "shape": shape_from_profile(profile),
        "gpu_bytes": profile.gpu.vram_bytes,
        "gpu_from": f"profile {profile.name}: {profile.gpu.name}",
        "weight_bytes": profile.model.weight_bytes,
        "weights_from": f"profile {profile.name}",
        "gpu_memory_utilization": profile.gpu_memory_utilization,
        "reserve_bytes": profile.activation_bytes,
        "block_size": profile.block_size,
        "max_model_len": profile.model.max_model_len,
    }
    base.update({k: v for k, v in overrides.items() if v is not None})
    return KvInputs(**base)


def render_table(plan: KvPlan) -> str:
    """The readable answer: inputs, then the figures, then the sessions."""
    i, shape = plan.inputs, plan.inputs.shape
    window = ""
    if shape.sliding_window and i.sliding:
        window = f", sliding window {n(shape.sliding_window)} on {shape.sliding_layers} layers"
    kib = plan.bytes_per_token / 1024
    if shape.mla:
        layout = (
            f"{shape.layers} layers x MLA latent {shape.kv_lora_rank} + rope "
            f"{shape.qk_rope_head_dim}"
        )
    else:
        layout = f"{shape.layers} layers x {shape.kv_heads} KV heads x {shape.head_dim} head dim"
    rows = [
        ("model", f"{shape.name}{window}"),
        ("shape", f"{layout}, KV {plan.kv_dtype} ({plan.kv_dtype_bytes:g} B)"),
        ("dtype", f"{shape.dtype} ({shape.dtype_why or 'the profile'})"),
        ("GPU memory", f"{size(i.gpu_bytes)} ({i.gpu_from})"),
        ("weights", f"{size(i.weight_bytes)} ({i.weights_from})"),
        (
            "settings",
            f"gpu_memory_utilization {i.gpu_memory_utilization:g}, reserve "
            f"{size(i.reserve_bytes)}, block size {i.block_size}",
        ),
        (
            "KV bytes per token",
            f"{n(plan.bytes_per_token)} B ({kib:g} KiB)",
        ),
        ("KV pool", size(plan.pool_bytes)),
        ("KV blocks", n(plan.blocks)),
        ("KV tokens that fit", n(plan.tokens)),
    ]
    for s in plan.sessions:
        rows.append(
            (
                f"{s.label} sessions",
                f"{n(s.sessions)}  ({n(s.prompt_tokens)} prompt + {n(s.output_tokens)} output = "
                f"{n(s.tokens)} tokens, {n(s.blocks)} blocks"
                + (
                    f", {n(s.sliding_blocks)} on sliding layers)"
                    if s.sliding_blocks != s.blocks
                    else ")"
                ),
            )
        )
    width = max(len(k) for k, _ in rows)
    out = [f"{k:<{width}}  {v}" for k, v in rows]
    out += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(out)


def render_explain(plan: KvPlan) -> str:
    lines = []
    for step in plan.steps:
        shown = step.value and not step.arithmetic.endswith(step.value)
        tail = f"  -> {step.value}" if shown else ""
        lines.append(f"{step.what}: {step.arithmetic}{tail}")
    lines.append(
        "sessions: p50 is the median prompt plus the median output; p99 is the p99 prompt plus "
        "the p99 output (both at once: a pessimistic size). Each count is how many sessions of "
        "that size hold their KV at once, rounded to whole blocks, with no prefix sharing."
    )
    lines += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(lines)
