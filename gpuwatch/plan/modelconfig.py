"""A model's shape for KV arithmetic, read from its Hugging Face ``config.json`` (pure).

What is read, and the defaults vLLM and transformers apply when a field is absent:

- layers: ``num_hidden_layers``; attention heads: ``num_attention_heads``;
- KV heads: ``num_key_value_heads``, else the attention heads (no GQA);
- head dim: ``head_dim``, else ``hidden_size / num_attention_heads``;
- dtype: ``torch_dtype`` (``dtype`` in newer configs), else float16 as vLLM assumes;
- sliding window: ``sliding_window`` when set (and ``use_sliding_window`` is not false, as in
  Qwen2.5), on the layers ``layer_types`` names ``sliding_attention``, else the layers from
  ``max_window_layers`` on (Qwen2), else every layer but each ``sliding_window_pattern``-th
  (Gemma), else every layer (Mistral-7B v0.1);
- weights: estimated from the parameter count of a Llama-shaped decoder (embeddings, attention,
  gated MLP, norms; ``lm_head`` unless ``tie_word_embeddings``), at the dtype, or at
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


class ConfigError(ValueError):
    """A config.json that cannot be planned from: the message names the field."""


@dataclass(frozen=True)
class ModelShape:
    """What the KV arithmetic needs from a model, and how each figure was found."""

    name: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    sliding_window: int | None = None
    sliding_layers: int = 0
    max_model_len: int | None = None
    quantization: str | None = None
    params: int | None = None
    weight_bytes: int | None = None
    derived: tuple[str, ...] = field(default=())

    @property
    def dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.dtype]

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


def _estimate_params(
    cfg: dict[str, Any], layers: int, heads: int, kv_heads: int, head_dim: int
) -> tuple[int, int, int] | None:
    """(linear-layer params, embedding + lm_head params, other params) of a Llama-shaped
    decoder, or None when the config lacks a field the estimate needs."""
    hidden, inter, vocab = (
        cfg.get("hidden_size"),
        cfg.get("intermediate_size"),
        cfg.get("vocab_size"),
    )
    if not all(isinstance(v, int) and v > 0 for v in (hidden, inter, vocab)):
        return None
    assert isinstance(hidden, int) and isinstance(inter, int) and isinstance(vocab, int)
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    mlp = 3 * hidden * inter  # gate, up and down projections
    bias = cfg.get("attention_bias")
    if bias is None:
        bias = cfg.get("model_type") == "qwen2"  # Qwen2 has q/k/v biases, no flag for them
    other_per_layer = 2 * hidden + ((q + 2 * kv) if bias else 0)  # two norms (+ biases)
    linear = layers * (attention + mlp)
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    return linear, embeddings, layers * other_per_layer + hidden  # + the final norm


def shape_from_config(raw: Any, name: str = "config.json") -> ModelShape:
    """The shape of the model ``raw`` (a parsed config.json) describes."""
    if not isinstance(raw, dict):
        raise ConfigError("config.json: not a JSON object")
    cfg = _text_config(raw)
    if cfg.get("kv_lora_rank") is not None:
        raise ConfigError(
            "config.json: kv_lora_rank is set (MLA, as in DeepSeek): its compressed KV is not "
            "modelled; plan with --weights and a hand-checked figure instead"
        )
    notes: list[str] = []
    layers = _int(cfg, "num_hidden_layers", "the number of layers")
    heads = _int(cfg, "num_attention_heads", "the number of attention heads")
    kv_heads = _optional_int(cfg, "num_key_value_heads")
    if kv_heads is None:
        kv_heads = heads
        notes.append(f"num_key_value_heads absent: = num_attention_heads {heads} (no GQA)")
    head_dim = _optional_int(cfg, "head_dim")
    if head_dim is None:
        hidden = _int(cfg, "hidden_size", "needed for head_dim = hidden_size / heads")
        head_dim = hidden // heads
        notes.append(f"head_dim absent: hidden_size {hidden} / {heads} heads = {head_dim}")
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    if dtype is None:
        dtype = "float16"
        notes.append("torch_dtype absent: float16 (vLLM's default)")
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"config.json: torch_dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    window, sliding_layers = _sliding(cfg, layers, notes)
    label, bits, group = _quantization(cfg)
    params = weight_bytes = None
    estimate = _estimate_params(cfg, layers, heads, kv_heads, head_dim)
    if estimate is not None:
        linear, embeddings, other = estimate
        params = linear + embeddings + other
        wide = DTYPE_BYTES[dtype]
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
        dtype=dtype,
        sliding_window=window,
        sliding_layers=sliding_layers,
        max_model_len=_optional_int(cfg, "max_position_embeddings"),
        quantization=label,
        params=params,
        weight_bytes=weight_bytes,
        derived=tuple(notes),
    )


def load_config(path: Path) -> ModelShape:
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
    return shape_from_config(raw, name=str(path))
