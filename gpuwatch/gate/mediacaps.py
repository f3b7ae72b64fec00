"""Image and embedding caps applied to a parsed request body. Pure: no I/O.

Image generation costs steps x pixels x images, so the image lane caps each factor:
``max_pixels`` (width x height of ``size``), ``max_steps`` (``steps``, diffusers'
``num_inference_steps``, LocalAI's ``step``: each capped, each absent one filled) and
``max_n``. Embeddings cost tokens per item, and a request can
carry thousands of items: ``max_inputs`` (items per request) and ``max_input_tokens`` (per
item, by the shared estimate or the token ids given).

``media_policy`` says what a value over a cap gets: ``clamp`` rewrites the body (and the
proxy says so in the ``X-Gpuwatch-Clamped`` response header), ``reject`` is a 400 whose code
names the cap. ``max_inputs`` is always a 400: clamping it would drop items, and the client
would get fewer vectors than it sent, matched by position to the wrong texts.
"""

from __future__ import annotations

import math
import re
from typing import Any

from gpuwatch.errors import GpuwatchError
from gpuwatch.gate.caps import BodyError, output_tokens
from gpuwatch.gate.limits import MEDIA_CAPS, LaneLimits
from gpuwatch.tokens import estimate_text

CLAMP_HEADER = "X-Gpuwatch-Clamped"
# What the OpenAI Images API generates when a body names no size (DALL-E 2 and 3 both).
DEFAULT_SIZE = (1024, 1024)
# Every name an image server reads its denoising steps under: ``steps`` (the simulator, A1111-
# style servers), diffusers' ``num_inference_steps`` (diffusers-based servers, SGLang's and
# vLLM-Omni's), LocalAI's ``step``. A server reads one and runs its own default when that one
# is absent, so every name is capped and every absent one filled in (``_fill_steps``).
STEP_KEYS = ("steps", "num_inference_steps", "step")
# Where embedding-lane routes carry their items: ``input`` (embeddings), ``documents``
# (vLLM's and Cohere's rerank), ``texts`` (TEI's rerank), ``text_1``/``text_2`` (vLLM's
# score). Each is held to the caps on its own: a rerank of 10,000 documents costs what 10,000
# embeddings inputs do.
ITEM_KEYS = ("input", "documents", "texts", "text_1", "text_2")
_SIZE = re.compile(r"(\d{1,6})x(\d{1,6})")
# Diffusion models work in latents of 1/8 the pixels: a clamped side stays a multiple of 8.
_SIDE_STEP = 8
# The estimate counts 4 characters a token (tokens.py); clamping cuts at the same rate.
_CHARS_PER_TOKEN = 4


class MediaRefused(GpuwatchError):
    """A value over a cap under ``reject`` (or over ``max_inputs``); ``reason`` is the cap."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def has_media_caps(limits: LaneLimits) -> bool:
    return any(getattr(limits, key) is not None for key in MEDIA_CAPS)


def _size(value: Any) -> tuple[int, int] | None:
    """(width, height) of a ``size`` field; None for absent or ``auto`` (the server picks)."""
    if value is None or value == "auto":
        return None
    if not isinstance(value, str):
        raise BodyError("size", "must be a string like '1024x1024'")
    match = _SIZE.fullmatch(value.strip())
    if match is None:
        raise BodyError("size", f"must be WIDTHxHEIGHT like '1024x1024', got {value[:20]!r}")
    width, height = int(match.group(1)), int(match.group(2))
    if width < 1 or height < 1:
        raise BodyError("size", "width and height must be at least 1")
    return width, height


def fit_pixels(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    """The largest size of the same aspect ratio within ``max_pixels``, sides multiples of 8."""
    scale = math.sqrt(max_pixels / (width * height))
    w = max(_SIDE_STEP, int(width * scale) // _SIDE_STEP * _SIDE_STEP)
    h = max(_SIDE_STEP, int(height * scale) // _SIDE_STEP * _SIDE_STEP)
    while w * h > max_pixels and (w > _SIDE_STEP or h > _SIDE_STEP):
        if w >= h:
            w -= _SIDE_STEP
        else:
            h -= _SIDE_STEP
    return w, h


def _image(body: dict[str, Any], limits: LaneLimits, lane: str, reject: bool) -> list[str]:
    notes: list[str] = []
    if limits.max_pixels is not None:
        given = _size(body.get("size"))
        width, height = given or DEFAULT_SIZE
        if width * height > limits.max_pixels:
            shown = f"{width}x{height}" + ("" if given else " (the default)")
            if reject:
                raise MediaRefused(
                    "max_pixels",
                    f"size {shown} is {width * height} pixels; lane {lane!r}'s max_pixels is "
                    f"{limits.max_pixels}",
                )
            w, h = fit_pixels(width, height, limits.max_pixels)
            body["size"] = f"{w}x{h}"
            notes.append(f"size {width}x{height}->{w}x{h}")
    for key, cap, keys in (
        ("max_steps", limits.max_steps, STEP_KEYS),
        ("max_n", limits.max_n, ("n",)),
    ):
        if cap is None:
            continue
        for field in keys:
            # The numeric forms the output cap accepts (500, 500.0, "500"): servers coerce them.
            value = output_tokens(field, body.get(field))
            # Steps below 1 read as "the default" to some servers: as far over as it gets.
            if value is None or (value <= cap and (key != "max_steps" or value >= 1)):
                continue
            if reject:
                raise MediaRefused(key, f"{field} {value} is over lane {lane!r}'s {key} of {cap}")
            body[field] = cap
            notes.append(f"{field} {value}->{cap}")
    if limits.max_steps is not None:
        notes += _fill_steps(body, limits.max_steps)
    return notes


def _fill_steps(body: dict[str, Any], cap: int) -> list[str]:
    """Every step name a server may read, present: an absent one runs the server's default
    (the simulator's 30, diffusers' 50), which may be over the cap. Each gets the value of a
    name the client sent (already within the cap), or the cap when it sent none."""
    given = [body[k] for k in STEP_KEYS if body.get(k) is not None]
    value = output_tokens("steps", given[0]) if given else cap
    missing = [k for k in STEP_KEYS if body.get(k) is None]
    for key in missing:
        body[key] = value
    # The client's own steps spelled the other ways is no clamp; only the cap in place of
    # the server's default is.
    return [] if given or not missing else [f"steps default->{value}"]


def _items(value: Any) -> list[Any]:
    """The items of an embeddings ``input``: a string, strings, token ids, lists of ids."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        if all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            return [value] if value else []
        if all(isinstance(i, str) for i in value):
            return list(value)
        if all(
            isinstance(i, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in i)
            for i in value
        ):
            return list(value)
    raise BodyError("input", "must be a string, a list of strings or a list of token ids")


def _embed(body: dict[str, Any], limits: LaneLimits, lane: str, reject: bool) -> list[str]:
    if limits.max_inputs is None and limits.max_input_tokens is None:
        return []
    notes: list[str] = []
    for key in ITEM_KEYS:
        if body.get(key) is not None:
            notes += _embed_field(body, key, limits, lane, reject)
    return notes


def _embed_field(
    body: dict[str, Any], key: str, limits: LaneLimits, lane: str, reject: bool
) -> list[str]:
    try:
        items = _items(body[key])
    except BodyError:
        raise BodyError(key, "must be a string, a list of strings or a list of token ids") from None
    if limits.max_inputs is not None and len(items) > limits.max_inputs:
        raise MediaRefused(
            "max_inputs",
            f"{key} has {len(items)} items; lane {lane!r}'s max_inputs is {limits.max_inputs}",
        )
    cap = limits.max_input_tokens
    if cap is None:
        return []
    cut = 0
    out: list[Any] = []
    for i, item in enumerate(items):
        tokens = estimate_text(item) if isinstance(item, str) else len(item)
        if tokens <= cap:
            out.append(item)
            continue
        if reject:
            raise MediaRefused(
                "max_input_tokens",
                f"{key}[{i}] is {tokens} tokens; lane {lane!r}'s max_input_tokens is {cap}",
            )
        cut += 1
        out.append(item[: cap * _CHARS_PER_TOKEN] if isinstance(item, str) else item[:cap])
    if not cut:
        return []
    # One string stays one string, and a single id list stays flat: the shape the client sent.
    single = isinstance(body[key], str) or (bool(body[key]) and isinstance(body[key][0], int))
    body[key] = out[0] if single else out
    return [f"{key} {cut} item(s) cut to {cap} tokens"]


def apply_media_caps(body: dict[str, Any], limits: LaneLimits, lane: str) -> tuple[list[str], bool]:
    """Hold ``body`` to the lane's image and embedding caps, in place. Returns what was
    clamped (for ``X-Gpuwatch-Clamped``) and whether the body changed: a step name filled in
    with the client's own value is a change but no clamp. Raises MediaRefused or BodyError."""
    reject = limits.media_policy == "reject"
    keys = len(body)  # caps replace values (each noted) or add keys (the names filled in)
    notes = _image(body, limits, lane, reject) + _embed(body, limits, lane, reject)
    return notes, bool(notes) or len(body) != keys
