"""A model's shape for KV arithmetic, read from its Hugging Face ``config.json`` (pure).

What is read, and the defaults vLLM and transformers apply when a field is absent:

- layers: ``num_hidden_layers``; attention heads: ``num_attention_heads``;
- KV heads: ``num_key_value_heads``, else the attention heads (no GQA);
- head dim: ``head_dim``, else ``hidden_size / num_attention_heads``;
- dtype: what vLLM's ``--dtype auto`` runs (``resolve_dtype``): ``torch_dtype`` (``dtype`` in
  newer configs; absent: float32, as vLLM assumes), float32 downcast to the GPU's preferred
  16-bit type (bfloat16 from Ampere on, float16 before), never float16 for the families vLLM
  refuses it for (Gemma-2/3, GLM-4, PLaMo-2);
- attention: multi-head / grouped-query (2 x KV heads x head dim per layer and token), or MLA
  (``kv_lora_rank`` set: DeepSeek-V2/V3, Kimi-K2) whose cache is one latent of
  ``kv_lora_rank + qk_rope_head_dim`` per layer and token;
- sliding window: ``sliding_window`` when set (and ``use_sliding_window`` is not false, as in
  Qwen2.5), on the layers ``layer_types`` names ``sliding_attention``, else the layers from
  ``max_window_layers`` on (Qwen2), else every layer but each ``sliding_window_pattern``-th
  (Gemma), else every layer (Mistral-7B v0.1);
- weights: estimated from the parameter count of the decoder (embeddings, attention (MLA's
  projections where it has them), gated MLP or its experts (Mixtral, Qwen2/3-MoE, DeepSeek),
  norms; ``lm_head`` unless the embeddings are tied: ``tie_word_embeddings``, absent meaning
  transformers' default for the family), at the dtype, or at
  ``quantization_config.bits`` (AWQ/GPTQ, plus a 16-bit scale and a packed zero per group) or
  one byte (FP8) for the linear layers. Weight quantization never changes the KV dtype.

A field that is needed and missing raises ``ConfigError`` naming it: one line for the CLI.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuwatch.errors import EXIT_USAGE, GpuwatchError

DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
}

KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2")
MODEL_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")  # vLLM's --dtype
_CANONICAL = {"half": "float16", "float": "float32"}

# vLLM's --dtype auto, as vllm/config/model.py has it (_find_dtype, _resolve_auto_dtype,
# _FLOAT16_NOT_SUPPORTED_MODELS) at vllm-project/vllm commit 0052a5b8 (late 2025), with
# CudaPlatformBase.supported_dtypes (vllm/platforms/cuda.py): [bf16, fp16, fp32] from compute
# capability 8.0, [fp16, fp32] before. float32 checkpoints are downcast to the first supported
# type; float16 is struck out for the families below ("numerical instability"), so a Gemma-2
# runs in bfloat16, and in float32 on a GPU without bfloat16.
FLOAT16_REFUSED = frozenset({"gemma2", "gemma3", "gemma3_text", "plamo2", "glm4"})

# transformers' default for tie_word_embeddings when config.json leaves it out: PretrainedConfig
# ties (True) and these families keep that; Llama, Mistral, Qwen, DeepSeek and most others
# default to untied and write the key anyway.
TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text", "opt", "gpt2"})


class ConfigError(GpuwatchError, ValueError, exit_code=EXIT_USAGE):
    """A config.json that cannot be planned from: the message names the field."""


@dataclass(frozen=True)
class ModelShape:
    """What the KV arithmetic needs from a model, and how each figure was found."""

    name: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    dtype: str  # what the engine runs: vLLM's --dtype resolved (resolve_dtype)
    sliding_window: int | None = None
    sliding_layers: int = 0
    max_model_len: int | None = None
    quantization: str | None = None
    params: int | None = None
    weight_bytes: int | None = None
    derived: tuple[str, ...] = field(default=())
    config_dtype: str | None = None  # config.json's torch_dtype, None when absent
    dtype_why: str = ""  # how ``dtype`` was resolved from it, for the output
    kv_lora_rank: int | None = None  # MLA: the compressed KV latent's width
    qk_rope_head_dim: int = 0  # MLA: the decoupled RoPE key stored beside the latent

    @property
    def dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def kv_width(self) -> int:
        """Values cached per layer and token: 2 x KV heads x head dim (K and V), or MLA's
        one latent of kv_lora_rank + qk_rope_head_dim (no separate V, no per-head copies)."""
        if self.kv_lora_rank is not None:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    @property
    def full_layers(self) -> int:
        return self.layers - self.sliding_layers


def _int(cfg: dict[str, Any], key: str, what: str) -> int:
    value = cfg.get(key)
    if value is None:
        raise ConfigError(f"config.json: missing {key} ({what})")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"config.json: {key} must be a positive integer, got {value!r}")
    if value != int(value):
        raise ConfigError(f"config.json: {key} must be an integer, got {value!r}")
    return int(value)


def _optional_int(cfg: dict[str, Any], key: str) -> int | None:
    return _int(cfg, key, key) if cfg.get(key) is not None else None


def _text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs keep the language model's fields under ``text_config``."""
    inner = raw.get("text_config")
    if isinstance(inner, dict):
        merged = {k: v for k, v in raw.items() if k != "text_config"}
        merged.update(inner)
        return merged
    return raw


def _sliding(cfg: dict[str, Any], layers: int, notes: list[str]) -> tuple[int | None, int]:
    window = cfg.get("sliding_window")
    if window is None:
        return None, 0
    if cfg.get("use_sliding_window") is False:
        notes.append(f"sliding_window {window} is off (use_sliding_window false): every layer full")
        return None, 0
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise ConfigError(f"config.json: sliding_window must be a positive integer, got {window!r}")
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        n = sum(1 for t in types if t == "sliding_attention")
        notes.append(f"layer_types: {n} of {layers} layers slide")
    elif cfg.get("use_sliding_window") is True and cfg.get("max_window_layers") is not None:
        first = _int(cfg, "max_window_layers", "first sliding layer")
        n = max(0, layers - first)
        notes.append(f"layers from max_window_layers {first} on slide: {n} of {layers}")
    elif cfg.get("sliding_window_pattern") or cfg.get("model_type") == "gemma2":
        pattern = int(cfg.get("sliding_window_pattern") or 2)
        n = layers - layers // pattern
        notes.append(f"every {pattern}th layer is full (sliding_window_pattern): {n} slide")
    else:
        n = layers
        notes.append(f"sliding_window {window} on all {layers} layers")
    return (window, n) if n else (None, 0)


def _quantization(cfg: dict[str, Any]) -> tuple[str | None, float | None, int | None]:
    """(label, bits of the linear layers, group size) from ``quantization_config``."""
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        return None, None, None
    method = str(q.get("quant_method", "quantized")).lower()
    if "fp8" in method or method in ("compressed-tensors", "fbgemm_fp8"):
        bits = q.get("bits") or 8
        return f"{method} {bits}-bit", float(bits), None
    bits = q.get("bits") or q.get("w_bit")
    if bits is None:
        return method, None, None
    group = q.get("group_size") or q.get("q_group_size")
    return f"{method} {bits}-bit", float(bits), int(group) if group and group > 0 else None


def resolve_dtype(
    config_dtype: str | None, model_type: str, requested: str = "auto", bf16: bool = True
) -> tuple[str, str]:
    """(the dtype vLLM runs the model in, why) for its ``--dtype requested`` on a GPU with
    (``bf16``: compute capability 8.0 or more) or without bfloat16. See FLOAT16_REFUSED."""
    requested = _CANONICAL.get(requested, requested)
    if requested not in MODEL_DTYPES:
        raise ConfigError(f"--dtype: unknown {requested!r} (one of {', '.join(MODEL_DTYPES)})")
    supported = ["bfloat16", "float16", "float32"] if bf16 else ["float16", "float32"]
    refused = model_type in FLOAT16_REFUSED
    if refused:
        supported.remove("float16")
    if requested != "auto":
        if requested == "float16" and refused:
            raise ConfigError(
                f"--dtype float16: vLLM refuses it for {model_type} (numerical "
                "instability); use bfloat16 or float32"
            )
        return requested, f"--dtype {requested}"
    gpu = "bfloat16 GPU" if bf16 else "GPU without bfloat16"
    source = config_dtype or "float32"  # vLLM: no dtype in config.json means float32
    said = f"torch_dtype {config_dtype}" if config_dtype else "torch_dtype absent (float32)"
    if source == "float32":
        if supported[0] == "float32":
            return "float32", f"auto: {said} stays float32 ({model_type} is never float16)"
        why = f"auto: {said} runs in {supported[0]}, vLLM's downcast on a {gpu}"
        if refused:
            why += f" (never float16 for {model_type})"
        return supported[0], why
    if source in supported:
        return source, f"auto = {said}"
    return supported[0], f"auto: {said} is not run on a {gpu} for {model_type}: {supported[0]}"


def _moe_layer(cfg: dict[str, Any], index: int) -> bool:
    """Whether layer ``index`` has experts, by each MoE family's own switch."""
    if cfg.get("n_routed_experts"):  # DeepSeek: dense first layers, then every freq-th
        first = int(cfg.get("first_k_dense_replace") or 0)
        return index >= first and index % int(cfg.get("moe_layer_freq") or 1) == 0
    if cfg.get("num_experts"):  # Qwen2-MoE, Qwen3-MoE
        dense = cfg.get("mlp_only_layers") or []
        return index not in dense and (index + 1) % int(cfg.get("decoder_sparse_step") or 1) == 0
    return bool(cfg.get("num_local_experts"))  # Mixtral: every layer


def _mlp_params(cfg: dict[str, Any], hidden: int, inter: int, layers: int) -> int:
    """Gated-MLP parameters over every layer: dense, or routed experts + shared experts +
    the router (gate) where the layer is MoE."""
    experts = cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts")
    expert_inter = cfg.get("moe_intermediate_size") or inter  # Mixtral: intermediate_size
    shared = int(cfg.get("shared_expert_intermediate_size") or 0)  # Qwen2-MoE
    shared += int(cfg.get("n_shared_experts") or 0) * int(expert_inter)  # DeepSeek
    shared_gate = hidden if cfg.get("shared_expert_intermediate_size") else 0  # Qwen2-MoE's
    total = 0
    for index in range(layers):
        if experts and _moe_layer(cfg, index):
            routed = int(experts) * (3 * hidden * int(expert_inter) + hidden)  # + its router row
            total += routed + 3 * hidden * shared + shared_gate
        else:
            total += 3 * hidden * inter  # gate, up and down projections
    return total


def _attention_params(
    cfg: dict[str, Any], hidden: int, heads: int, kv_heads: int, head_dim: int
) -> tuple[int, int]:
    """(linear, other) parameters of one layer's attention: q, k, v, o (+ biases, + q/k norms),
    or MLA's down- and up-projections and their norms."""
    rank = cfg.get("kv_lora_rank")
    if rank:
        nope, rope = int(cfg.get("qk_nope_head_dim") or 0), int(cfg.get("qk_rope_head_dim") or 0)
        v_dim = int(cfg.get("v_head_dim") or nope)
        q_rank = cfg.get("q_lora_rank")
        q_out = heads * (nope + rope)
        q = hidden * q_rank + q_rank * q_out if q_rank else hidden * q_out
        linear = q + hidden * (rank + rope) + rank * heads * (nope + v_dim) + heads * v_dim * hidden
        return linear, rank + (q_rank or 0)  # kv_a_layernorm (+ q_a_layernorm)
    q, kv = heads * head_dim, kv_heads * head_dim
    bias = cfg.get("attention_bias")
    if bias is None:
        bias = cfg.get("model_type") == "qwen2"  # Qwen2 has q/k/v biases, no flag for them
    other = (q + 2 * kv) if bias else 0
    if cfg.get("model_type") in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text"):
        other += 2 * head_dim  # q_norm and k_norm
    return hidden * q + 2 * hidden * kv + q * hidden, other


def tied_embeddings(cfg: dict[str, Any], notes: list[str]) -> bool:
    """Whether lm_head shares the embedding matrix (then it is counted once)."""
    tied = cfg.get("tie_word_embeddings")
    if tied is None:
        tied = cfg.get("model_type") in TIED_BY_DEFAULT
        notes.append(
            f"tie_word_embeddings absent: {'tied' if tied else 'untied'} "
            f"(transformers' default for {cfg.get('model_type') or 'this model'})"
        )
    return bool(tied)


def _estimate_params(
    cfg: dict[str, Any], layers: int, heads: int, kv_heads: int, head_dim: int, notes: list[str]
) -> tuple[int, int, int] | None:
    """(linear-layer params, embedding + lm_head params, other params) of the decoder, or None
    when the config lacks a field the estimate needs."""
    hidden, inter, vocab = (
        cfg.get("hidden_size"),
        cfg.get("intermediate_size"),
        cfg.get("vocab_size"),
    )
    if not all(isinstance(v, int) and v > 0 for v in (hidden, inter, vocab)):
        return None
    assert isinstance(hidden, int) and isinstance(inter, int) and isinstance(vocab, int)
    attention, attention_other = _attention_params(cfg, hidden, heads, kv_heads, head_dim)
    # Gemma-2/3 norm before and after both attention and MLP: four per layer, not two
    norms = 4 if cfg.get("model_type") in ("gemma2", "gemma3", "gemma3_text") else 2
    other_per_layer = norms * hidden + attention_other
    linear = layers * attention + _mlp_params(cfg, hidden, inter, layers)
    embeddings = vocab * hidden * (1 if tied_embeddings(cfg, notes) else 2)
    return linear, embeddings, layers * other_per_layer + hidden  # + the final norm


_ATTENTION_LAYERS = frozenset({"full_attention", "sliding_attention"})


def _refuse_stateful_layers(cfg: dict[str, Any]) -> None:
    """Hybrid models (Qwen3-Next's linear attention, Mamba layers) keep a fixed state per
    sequence on some layers, not KV per token: the formula would be wrong, so say so, and
    where the true figure is found."""
    types = cfg.get("layer_types")
    if not isinstance(types, list):
        return
    other = sorted({str(t) for t in types} - _ATTENTION_LAYERS)
    if other:
        raise ConfigError(
            f"config.json: layer_types has {', '.join(other)} layers (a hybrid model): their "
            "per-sequence state is not KV per token and is not modelled; vLLM logs the real "
            "figure at start-up ('GPU KV cache size: N tokens')"
        )


def _mla(cfg: dict[str, Any], notes: list[str]) -> tuple[int | None, int]:
    if cfg.get("kv_lora_rank") is None:
        return None, 0
    rank = _int(cfg, "kv_lora_rank", "MLA's KV latent width")
    rope = _int(cfg, "qk_rope_head_dim", "MLA's RoPE key width, cached beside the latent")
    notes.append(
        f"MLA (kv_lora_rank {rank}): one latent of {rank} + qk_rope_head_dim {rope} = "
        f"{rank + rope} values per layer and token, shared by every head"
    )
    return rank, rope


def shape_from_config(
    raw: Any, name: str = "config.json", dtype: str = "auto", bf16: bool = True
) -> ModelShape:
    """The shape of the model ``raw`` (a parsed config.json) describes, in the dtype vLLM's
    ``--dtype dtype`` runs it in on a GPU with (``bf16``) or without bfloat16."""
    if not isinstance(raw, dict):
        raise ConfigError("config.json: not a JSON object")
    cfg = _text_config(raw)
    notes: list[str] = []
    layers = _int(cfg, "num_hidden_layers", "the number of layers")
    heads = _int(cfg, "num_attention_heads", "the number of attention heads")
    _refuse_stateful_layers(cfg)
    rank, rope = _mla(cfg, notes)
    kv_heads = _optional_int(cfg, "num_key_value_heads")
    if kv_heads is None:
        kv_heads = heads
        if rank is None:
            notes.append(f"num_key_value_heads absent: = num_attention_heads {heads} (no GQA)")
    head_dim = _optional_int(cfg, "head_dim")
    if head_dim is None:
        hidden = _int(cfg, "hidden_size", "needed for head_dim = hidden_size / heads")
        head_dim = hidden // heads
        if rank is None:
            notes.append(f"head_dim absent: hidden_size {hidden} / {heads} heads = {head_dim}")
    config_dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    if config_dtype is not None and config_dtype not in DTYPE_BYTES:
        raise ConfigError(
            f"config.json: torch_dtype {config_dtype!r} is not one of {sorted(DTYPE_BYTES)}"
        )
    if config_dtype is not None:
        config_dtype = _CANONICAL.get(config_dtype, config_dtype)
    run_dtype, why = resolve_dtype(config_dtype, str(cfg.get("model_type") or ""), dtype, bf16)
    window, sliding_layers = _sliding(cfg, layers, notes)
    label, bits, group = _quantization(cfg)
    params = weight_bytes = None
    estimate = _estimate_params(cfg, layers, heads, kv_heads, head_dim, notes)
    if estimate is not None:
        linear, embeddings, other = estimate
        params = linear + embeddings + other
        wide = DTYPE_BYTES[run_dtype]
        if bits is None:
            weight_bytes = math.ceil(params * wide)
        else:
            linear_bytes = linear * bits / 8
            if group:
                linear_bytes += linear / group * (2 + bits / 8)  # a 16-bit scale, a packed zero
            weight_bytes = math.ceil(linear_bytes + (embeddings + other) * wide)
    return ModelShape(
        name=str(raw.get("_name_or_path") or name),
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        dtype=run_dtype,
        sliding_window=window,
        sliding_layers=sliding_layers,
        max_model_len=_optional_int(cfg, "max_position_embeddings"),
        quantization=label,
        params=params,
        weight_bytes=weight_bytes,
        derived=tuple(notes),
        config_dtype=config_dtype,
        dtype_why=why,
        kv_lora_rank=rank,
        qk_rope_head_dim=rope,
    )


def load_config(path: Path, dtype: str = "auto", bf16: bool = True) -> ModelShape:
    """Read ``path`` (a config.json, or a directory holding one)."""
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return shape_from_config(raw, name=str(path), dtype=dtype, bf16=bf16)
