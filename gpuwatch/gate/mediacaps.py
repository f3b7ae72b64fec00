"""Image and embedding caps applied to a request's media parameters (``request.Media``, read
once with the request). Pure: no I/O.

Image generation costs steps x pixels x images, so the image lane caps each factor:
``max_pixels`` (width x height of ``size``), ``max_steps`` (``steps``, diffusers'
``num_inference_steps``, LocalAI's ``step``: each capped, each absent one filled) and
``max_n``. Embeddings cost tokens per item, and a request can
carry thousands of items: ``max_inputs`` (items per request) and ``max_input_tokens`` (per
item, by the shared estimate or the token ids given).

``media_policy`` says what a value over a cap gets: ``clamp`` rewrites the body (the edits of
a ``request.Clamp``; the proxy says so in the ``X-Gpuwatch-Clamped`` response header),
``reject`` is a 400 whose code names the cap. ``max_inputs`` is always a 400: clamping it would
drop items, and the client would get fewer vectors than it sent, matched by position to the
wrong texts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpuwatch.errors import GpuwatchError
from gpuwatch.gate.limits import LaneLimits
from gpuwatch.gate.request import STEP_KEYS, Clamp, Items, Media
from gpuwatch.tokens import estimate_text

CLAMP_HEADER = "X-Gpuwatch-Clamped"
# What the OpenAI Images API generates when a body names no size (DALL-E 2 and 3 both).
DEFAULT_SIZE = (1024, 1024)
# Diffusion models work in latents of 1/8 the pixels: a clamped side stays a multiple of 8.
_SIDE_STEP = 8
# The estimate counts 4 characters a token (tokens.py); clamping cuts at the same rate.
_CHARS_PER_TOKEN = 4


class MediaRefused(GpuwatchError):
    """A value over a cap under ``reject`` (or over ``max_inputs``); ``reason`` is the cap."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


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


def _image(
    media: Media, limits: LaneLimits, lane: str, reject: bool, edits: dict[str, Any]
) -> list[str]:
    notes: list[str] = []
    if limits.max_pixels is not None:
        width, height = media.size or DEFAULT_SIZE
        if width * height > limits.max_pixels:
            shown = f"{width}x{height}" + ("" if media.size else " (the default)")
            if reject:
                raise MediaRefused(
                    "max_pixels",
                    f"size {shown} is {width * height} pixels; lane {lane!r}'s max_pixels is "
                    f"{limits.max_pixels}",
                )
            w, h = fit_pixels(width, height, limits.max_pixels)
            edits["size"] = f"{w}x{h}"
            notes.append(f"size {width}x{height}->{w}x{h}")
    n = {} if media.n is None else {"n": media.n}
    for key, cap, given in (
        ("max_steps", limits.max_steps, media.steps),
        ("max_n", limits.max_n, n),
    ):
        if cap is None:
            continue
        for name, value in given.items():
            # Steps below 1 read as "the default" to some servers: as far over as it gets.
            if value <= cap and (key != "max_steps" or value >= 1):
                continue
            if reject:
                raise MediaRefused(key, f"{name} {value} is over lane {lane!r}'s {key} of {cap}")
            edits[name] = cap
            notes.append(f"{name} {value}->{cap}")
    if limits.max_steps is not None:
        notes += _fill_steps(media.steps, limits.max_steps, edits)
    return notes


def _fill_steps(steps: Mapping[str, int], cap: int, edits: dict[str, Any]) -> list[str]:
    """Every step name a server may read, present: an absent one runs the server's default
    (the simulator's 30, diffusers' 50), which may be over the cap. Each gets the value of a
    name the client sent (already within the cap), or the cap when it sent none."""
    given = [edits.get(k, v) for k, v in steps.items()]
    value = given[0] if given else cap
    missing = [k for k in STEP_KEYS if k not in steps]
    for key in missing:
        edits[key] = value
    # The client's own steps spelled the other ways is no clamp; only the cap in place of
    # the server's default is.
    return [] if given or not missing else [f"steps default->{value}"]


def _embed(
    media: Media, limits: LaneLimits, lane: str, reject: bool, edits: dict[str, Any]
) -> list[str]:
    notes: list[str] = []
    for key, items in media.items.items():
        notes += _embed_field(key, items, limits, lane, reject, edits)
    return notes


def _embed_field(
    key: str, items: Items, limits: LaneLimits, lane: str, reject: bool, edits: dict[str, Any]
) -> list[str]:
    if limits.max_inputs is not None and len(items.values) > limits.max_inputs:
        raise MediaRefused(
            "max_inputs",
            f"{key} has {len(items.values)} items; lane {lane!r}'s max_inputs is "
            f"{limits.max_inputs}",
        )
    cap = limits.max_input_tokens
    if cap is None:
        return []
    cut = 0
    out: list[Any] = []
    for i, item in enumerate(items.values):
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
    edits[key] = out[0] if items.single else out
    return [f"{key} {cut} item(s) cut to {cap} tokens"]


def check_media(media: Media, limits: LaneLimits, lane: str) -> Clamp:
    """Hold a request's media parameters to the lane's image and embedding caps: raises
    MediaRefused, else returns what to rewrite (a step name filled in with the client's own
    value is an edit but no clamp)."""
    reject = limits.media_policy == "reject"
    edits: dict[str, Any] = {}
    notes = _image(media, limits, lane, reject, edits) + _embed(media, limits, lane, reject, edits)
    return Clamp(edits, tuple(notes))
