"""GPU + model + serving-settings profiles for the simulator, and the KV-pool arithmetic.

Sources of the figures (vendors' datasheets; models' published ``config.json``):
- RTX 4090: 24 GiB GDDR6X, 1008 GB/s, 165.2 dense FP16 tensor TFLOP/s (FP32 accumulate),
  450 W board power (NVIDIA Ada Lovelace architecture whitepaper, appendix table).
- L40S: 48 GB GDDR6, 864 GB/s, 362 dense FP16 tensor TFLOP/s, 350 W (NVIDIA L40S datasheet).
- H100 SXM5 80 GB: 80 GB HBM3, 3.35 TB/s, 989 dense FP16/BF16 tensor TFLOP/s, 700 W
  (NVIDIA H100 datasheet).
- H200 SXM: 141 GB HBM3e, 4.8 TB/s, 989 dense FP16/BF16 tensor TFLOP/s, 700 W (H200 datasheet).
- Llama-3.1-8B: 8.03 B parameters, 32 layers, 8 KV heads, head dim 128 (meta-llama config.json);
  AWQ 4-bit checkpoint about 5.7 GB; FP16 16.1 GB.
- Qwen2.5-14B: 14.7 B parameters, 48 layers, 8 KV heads, head dim 128 (Qwen config.json);
  AWQ 4-bit checkpoint about 9.98 GB.
- Llama-3.1-70B: 70.6 B parameters, 80 layers, 8 KV heads, head dim 128; FP8 checkpoint about
  72.7 GB (weights FP8, embeddings and lm_head BF16), served with an FP8 KV cache.
Serving settings follow vLLM's defaults: gpu_memory_utilization 0.9 (0.95 for 70B on H100),
block size 16, max_num_seqs 256, max_num_batched_tokens 2048 (8192 on H100/H200, as vLLM
picks for them).

Each profile is checked against a published throughput measurement (``MEASURED`` below, and
tests/unit/test_plan_kv_profiles.py, which runs the engine and keeps every ratio within 0.5x-2x).
The ratios are the simulator's figure over the measured one; see ``MEASURED`` for the sources.
The simulator models vLLM, the closest published single-GPU tables are llama.cpp's (llama-bench
pp512 / tg512, one request) and TensorRT-LLM's (FP8, max throughput), so each note says what
differs. In short: decode is within 0.73x-1.33x everywhere; prefill is 0.68x-0.86x of llama.cpp
on the 4090s, 1.55x of the nearest sane L40S-chip figure, and the FP8 70B profiles are 0.55x-0.62x
of TensorRT-LLM (the roofline uses the FP16/BF16 peak, where FP8 GEMMs would double it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuwatch.errors import EXIT_USAGE, GpuwatchError

GIB = 2**30
GB = 10**9


class ProfileError(GpuwatchError, ValueError, exit_code=EXIT_USAGE):
    """A profile that cannot serve: the message carries the arithmetic."""


# The KV arithmetic, once: the simulator's profiles and ``gpuwatch plan kv`` both use these.


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: float) -> int:
    """K and V, for every layer and KV head: 2 x layers x kv_heads x head_dim x dtype bytes."""
    return math.ceil(2 * layers * kv_heads * head_dim * dtype_bytes)


def kv_pool_bytes(
    gpu_bytes: float, utilization: float, weight_bytes: float, reserve_bytes: float
) -> float:
    """What vLLM gives the KV cache: its share of the GPU less weights and the profiled peak
    (activations and other non-KV memory)."""
    return gpu_bytes * utilization - weight_bytes - reserve_bytes


def kv_blocks(pool_bytes: float, block_size: int, bytes_per_token: int) -> int:
    """Whole blocks of ``block_size`` tokens that fit in the pool (never below 0)."""
    return max(0, math.floor(pool_bytes / (block_size * bytes_per_token)))


@dataclass(frozen=True)
class Gpu:
    name: str
    vram_bytes: int
    bandwidth_bytes_s: float
    fp16_flops: float
    idle_w: float
    max_w: float
    boost_clock_mhz: int
    mem_clock_mhz: int
    has_fan: bool = True  # passively cooled datacenter boards answer NotSupported


@dataclass(frozen=True)
class Model:
    name: str
    params: float
    weight_bytes: int
    layers: int
    kv_heads: int
    head_dim: int
    kv_dtype_bytes: int
    max_model_len: int

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, self.kv_dtype_bytes)


@dataclass(frozen=True)
class Profile:
    name: str
    gpu: Gpu
    model: Model
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    # Peak activations vLLM's profiling run reserves, and the CUDA context outside the budget.
    activation_bytes: int = GIB
    cuda_context_bytes: int = GIB // 2
    # Achieved fractions of peak: decode reaches ~80% of bandwidth, prefill ~50% of FLOP/s.
    bandwidth_efficiency: float = 0.8
    compute_efficiency: float = 0.5
    step_overhead_s: float = 0.003

    @property
    def usable_bytes(self) -> float:
        return self.gpu.vram_bytes * self.gpu_memory_utilization

    @property
    def kv_pool_bytes(self) -> float:
        return kv_pool_bytes(
            self.gpu.vram_bytes,
            self.gpu_memory_utilization,
            self.model.weight_bytes,
            self.activation_bytes,
        )

    @property
    def num_blocks(self) -> int:
        return kv_blocks(self.kv_pool_bytes, self.block_size, self.model.kv_bytes_per_token)

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def validate(self) -> None:
        weights, usable = self.model.weight_bytes / GIB, self.usable_bytes / GIB
        if self.model.weight_bytes > self.usable_bytes:
            raise ProfileError(f"{self.name}: weights {weights:.1f} GiB > usable {usable:.1f} GiB")
        if self.num_blocks == 0:
            raise ProfileError(
                f"{self.name}: no room for a KV cache: usable {usable:.1f} GiB - weights "
                f"{weights:.1f} GiB - activations {self.activation_bytes / GIB:.1f} GiB <= 0"
            )
        if self.kv_tokens < self.model.max_model_len:
            raise ProfileError(
                f"{self.name}: KV pool of {self.kv_tokens} tokens < max_model_len "
                f"{self.model.max_model_len}"
            )

    def describe(self) -> str:
        return (
            f"{self.name}: {self.gpu.name} {self.gpu.vram_bytes / GIB:.0f} GiB, {self.model.name}; "
            f"KV pool {self.kv_pool_bytes / GIB:.1f} GiB = {self.kv_tokens:,} tokens = "
            f"{self.num_blocks:,} blocks of {self.block_size}; "
            f"KV {self.model.kv_bytes_per_token // 1024} KiB/token; "
            f"max_model_len {self.model.max_model_len}, max_num_seqs {self.max_num_seqs}"
        )


RTX4090 = Gpu("NVIDIA GeForce RTX 4090", 24 * GIB, 1008 * GB, 165.2e12, 25, 450, 2520, 10501)
L40S = Gpu("NVIDIA L40S", 48 * GB, 864 * GB, 362e12, 35, 350, 2520, 9001, has_fan=False)
H100 = Gpu("NVIDIA H100 80GB HBM3", 80 * GB, 3350 * GB, 989e12, 70, 700, 1980, 2619, has_fan=False)
H200 = Gpu("NVIDIA H200", 141 * GB, 4800 * GB, 989e12, 75, 700, 1980, 3201, has_fan=False)

LLAMA3_8B_AWQ = Model(
    "meta-llama/Llama-3.1-8B-Instruct-AWQ", 8.03e9, int(5.7 * GB), 32, 8, 128, 2, 16384
)
LLAMA3_8B_FP16 = Model(
    "meta-llama/Llama-3.1-8B-Instruct", 8.03e9, int(16.1 * GB), 32, 8, 128, 2, 32768
)
QWEN25_14B_AWQ = Model("Qwen/Qwen2.5-14B-Instruct-AWQ", 14.7e9, int(9.98 * GB), 48, 8, 128, 2, 8192)
LLAMA3_70B_FP8 = Model(
    "meta-llama/Llama-3.1-70B-Instruct-FP8", 70.6e9, int(72.7 * GB), 80, 8, 128, 1, 8192
)
LLAMA3_70B_FP8_LONG = Model(
    "meta-llama/Llama-3.1-70B-Instruct-FP8", 70.6e9, int(72.7 * GB), 80, 8, 128, 1, 32768
)

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("rtx4090-llama3-8b-awq", RTX4090, LLAMA3_8B_AWQ),
        Profile("rtx4090-qwen2.5-14b-awq", RTX4090, QWEN25_14B_AWQ),
        Profile("l40s-llama3-8b-fp16", L40S, LLAMA3_8B_FP16),
        Profile(
            "h100-llama3-70b-fp8",
            H100,
            LLAMA3_70B_FP8,
            # 0.9 leaves no room next to 67.7 GiB of weights; 70B FP8 on one H100 runs at 0.95.
            gpu_memory_utilization=0.95,
            max_num_batched_tokens=8192,
            activation_bytes=GIB // 2,
        ),
        Profile("h200-llama3-70b-fp8", H200, LLAMA3_70B_FP8_LONG, max_num_batched_tokens=8192),
    )
}
DEFAULT_PROFILE = "rtx4090-llama3-8b-awq"

LLAMA_BENCH = (
    "llama.cpp llama-bench, XiongjieDai/GPU-Benchmarks-on-LLM-Inference README.md "
    "(commit aa72e0ec86c3, snapshots May 2024 for Llama 3, Dec 2023 for LLaMA)"
)
TRTLLM_H200 = (
    "TensorRT-LLM v0.5.0, NVIDIA/TensorRT-LLM docs/source/blogs/H200launch.md "
    "('H200 FP8 Max throughput' table)"
)


@dataclass(frozen=True)
class Measured:
    """A published throughput a profile is checked against. ``prefill_tps`` and ``decode_tps``
    are one request's prompt and output tokens/s (llama-bench pp512 and tg512); ``output_tps``
    is the output tokens/s of ``batch`` = (requests, prompt tokens, output tokens) at once."""

    source: str
    setup: str
    prefill_tps: float | None = None
    decode_tps: float | None = None
    batch: tuple[int, int, int] | None = None
    output_tps: float | None = None
    note: str = ""


MEASURED: dict[str, Measured] = {
    # sim: prefill 4,867 tok/s (x0.68), decode 98.5 tok/s (x0.75). Q4_K_M is 4.58 GB against
    # AWQ's 5.7 GB: scaled by the bytes read per token the measurement predicts 105 tok/s (x0.94).
    "rtx4090-llama3-8b-awq": Measured(
        LLAMA_BENCH, "RTX 4090, Llama-3-8B Q4_K_M", prefill_tps=7138.99, decode_tps=130.58
    ),
    # sim: prefill 2,695 tok/s (x0.86), decode 64.5 tok/s (x0.73). No Qwen2.5-14B row exists for
    # the 4090 there; LLaMA-13B q4_0 (7.24 GB) is the nearest. Scaled to AWQ's 9.98 GB read per
    # token the measurement predicts 64.5 tok/s (x1.00).
    "rtx4090-qwen2.5-14b-awq": Measured(
        LLAMA_BENCH, "RTX 4090, LLaMA-13B q4_0 (mean of 3 runs)", 3141.77, 88.88
    ),
    # sim: prefill 10,307 tok/s, decode 37.9 tok/s (x0.87). The table's L40S F16 prompt figures
    # are anomalous (2,254 at pp512 rising to 3,312 at pp8192, below its own Q4_K_M 6,035), so
    # prefill is checked against the same AD102 chip's RTX 6000 Ada F16 pp512, 6,663 (x1.55).
    "l40s-llama3-8b-fp16": Measured(
        LLAMA_BENCH,
        "L40S, Llama-3-8B F16 (decode); RTX 6000 Ada, Llama-3-8B F16 (prefill)",
        prefill_tps=6663.13,
        decode_tps=43.69,
        note="L40S F16 pp512 2,253.93 is not used: see above",
    ),
    # sim: decode 33.2 tok/s (x1.33) against llama.cpp on an H100 PCIe (2.0 TB/s, 350 W) with
    # Q4_K_M (39.6 GB); its pp512 1,012.73 is x3.30 below the sim's 3,346 (llama.cpp prefill of
    # a 70B on the PCIe board: not a fair check, so not kept). The closer check is TensorRT-LLM's:
    # H200 FP8 at 32 x 2048/128 is 303 out tok/s and "1.9x" an H100 FP8 at batch 8, so ~159 out
    # tok/s; the sim gives 87 (x0.55).
    "h100-llama3-70b-fp8": Measured(
        LLAMA_BENCH + "; " + TRTLLM_H200,
        "H100 PCIe, Llama-3-70B Q4_K_M (llama.cpp); H100 SXM FP8 Llama-2-70B batch 8 (TRT-LLM, "
        "derived: 303 / 1.9)",
        decode_tps=25.03,
        batch=(8, 2048, 128),
        output_tps=303 / 1.9,
    ),
    # sim: 187 out tok/s for 32 x 2048/128 (x0.62); one request: prefill 3,346, decode 45.6.
    "h200-llama3-70b-fp8": Measured(
        TRTLLM_H200,
        "H200, Llama-2-70B FP8, TP1, batch 32, input 2048, output 128",
        batch=(32, 2048, 128),
        output_tps=303,
    ),
}


# -- the other workloads on the same GPU: embeddings and image generation --------------------
#
# BGE-large-en-v1.5 (BAAI): 335 M parameters, 24 layers, 512-token inputs (its config.json);
# served in FP16 that is 0.67 GB of weights. TEI's defaults: max_batch_tokens 16384 per batch,
# max_client_batch_size 32 inputs per request (text-embeddings-inference router/src/main.rs).
#
# SDXL base 1.0 (stabilityai/stable-diffusion-xl-base-1.0, FP16 safetensors): UNet 5.14 GB,
# text encoders 0.25 + 1.39 GB, VAE 0.17 GB: 6.95 GB of weights.
# ESTIMATE, not a measurement: no published per-step timing of SDXL on an RTX 4090 was found in
# the reference material this project can cite (the pages found give it/s charts without a
# fixed setup). The cost is derived from FLOPs instead: one denoising step at 1024x1024 with
# classifier-free guidance (two UNet passes) is taken as 11 TFLOP, the VAE decode as 15 TFLOP,
# both at 45% of the GPU's dense FP16 peak. On the RTX 4090 that is 0.15 s a step and 4.7 s for
# 1024x1024 at 30 steps, inside the 4-6 s that user reports for this setup commonly give; the
# other GPUs scale by their FP16 peak (the UNet is compute-bound). Cost grows linearly with
# pixels (the attention's quadratic term is ignored) and with the batch n. Peak activations:
# 2.5 GiB per 1024x1024 image (estimate), linear in pixels and n.


@dataclass(frozen=True)
class EmbeddingModel:
    name: str
    params: float
    weight_bytes: int
    max_input_tokens: int = 512
    max_batch_tokens: int = 16384
    max_inputs: int = 32
    step_overhead_s: float = 0.002
    vocab_size: int = 30522  # BERT's WordPiece vocabulary, which the BGE models use

    def batch_seconds(self, gpu: Gpu, tokens: int, efficiency: float = 0.5) -> float:
        """One forward pass over ``tokens`` tokens: 2 x params x tokens FLOPs, plus overhead."""
        return self.step_overhead_s + 2 * self.params * tokens / (gpu.fp16_flops * efficiency)

    def weight(self, tokens: int) -> float:
        """Its weight against the text engine while a batch runs (see ``DiffusionModel``)."""
        return min(1.0, tokens / self.max_batch_tokens)


@dataclass(frozen=True)
class DiffusionModel:
    name: str
    weight_bytes: int
    step_flops: float  # one denoising step for one image at ``ref_pixels`` (CFG included)
    decode_flops: float  # the VAE decode of one image at ``ref_pixels``
    activation_bytes: int  # peak activations of one image at ``ref_pixels``
    ref_pixels: int = 1024 * 1024
    efficiency: float = 0.45

    def seconds(self, gpu: Gpu, pixels: int, steps: int, n: int) -> float:
        """Alone on the GPU: steps x pixels x n, plus the decode of each image."""
        scale = pixels / self.ref_pixels * n
        flops = (steps * self.step_flops + self.decode_flops) * scale
        return flops / (gpu.fp16_flops * self.efficiency)

    def bytes_for(self, pixels: int, n: int) -> int:
        return int(self.activation_bytes * pixels / self.ref_pixels * n)

    def weight(self, pixels: int, n: int) -> float:
        """How much GPU time a running request claims against the other work on the GPU:
        1 for a 1024x1024 image or more (it keeps the GPU as busy as the text engine does, so
        time slicing gives each half), less for smaller ones, in proportion to pixels x n."""
        return min(1.0, pixels * n / self.ref_pixels)


BGE_LARGE = EmbeddingModel("BAAI/bge-large-en-v1.5", 335e6, int(0.67 * GB))
SDXL = DiffusionModel(
    "stabilityai/stable-diffusion-xl-base-1.0",
    int(6.95 * GB),
    step_flops=11e12,
    decode_flops=15e12,
    activation_bytes=int(2.5 * GIB),
)
# Room kept for image activations when images are served: two 1024x1024 images at once.
IMAGE_RESERVE_BYTES = 5 * GIB


def with_side_models(
    profile: Profile, embed: bool, image: bool, image_reserve: int = IMAGE_RESERVE_BYTES
) -> Profile:
    """The profile with vLLM's gpu_memory_utilization lowered so the embedding and diffusion
    models (and the image activations) fit beside it, as an operator sharing one GPU sets it."""
    side = (BGE_LARGE.weight_bytes if embed else 0) + (
        SDXL.weight_bytes + image_reserve if image else 0
    )
    if not side:
        return profile
    vram = profile.gpu.vram_bytes
    share = (vram - profile.cuda_context_bytes - side) / vram
    utilization = min(profile.gpu_memory_utilization, math.floor(share * 100) / 100)
    mixed = replace(profile, gpu_memory_utilization=utilization)
    mixed.validate()
    return mixed


def get_profile(name: str) -> Profile:
    try:
        profile = PROFILES[name]
    except KeyError:
        known = ", ".join(PROFILES)
        raise ProfileError(f"unknown profile {name!r} (known: {known})") from None
    profile.validate()
    return profile
