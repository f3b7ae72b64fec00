"""OpenAI request bodies for the simulator: decoded, validated, turned into a ``Job``.

Every field the simulator reads is type-checked here, so a body a client got wrong is a 400
in vLLM's error shape and never a 500: JSON that Python's decoder fails on in other ways
(deep nesting, 5,000-digit integers) goes through gpuwatch.safejson.

Prompt length is gpuwatch.tokens' deterministic estimate (4 characters a token; chat adds the
template's cost; token-id prompts count their ids). Prefix caching hashes the text in
64-character blocks (16 tokens), chained, so identical leading text hits the cache.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from aiohttp import web

from gpuwatch.errors import GpuwatchError
from gpuwatch.fmt import clip
from gpuwatch.safejson import JSONError, loads_bounded
from gpuwatch.sim.node import Job
from gpuwatch.sim.profiles import DiffusionModel, EmbeddingModel, Profile
from gpuwatch.tokens import CHARS_PER_TOKEN, chat_text, estimate_chat, estimate_text

_TYPE_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    bool: "a boolean",
    dict: "an object",
    list: "an array",
}


class BadRequest(GpuwatchError):
    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


def error_response(message: str, status: int, param: str | None = None) -> web.Response:
    """vLLM's OpenAI-compatible error body."""
    kind = {
        400: "BadRequestError",
        404: "NotFoundError",
        405: "MethodNotAllowedError",
        429: "RateLimitError",
    }.get(status, "InternalServerError" if status >= 500 else "BadRequestError")
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return web.json_response(body, status=status)


@dataclass(frozen=True)
class Parsed:
    job: Job
    stream: bool
    include_usage: bool


def block_hashes(units: list[str] | str, per_block: int) -> tuple[int, ...]:
    """Chained hashes of full blocks (a block depends on everything before it)."""
    out: list[int] = []
    prev = b""
    for i in range(len(units) // per_block):
        chunk = units[i * per_block : (i + 1) * per_block]
        text = chunk if isinstance(chunk, str) else ",".join(chunk)
        # JSON may carry lone surrogates ("\ud800"); they hash like any other text.
        data = text.encode("utf-8", "surrogatepass")
        digest = hashlib.blake2b(prev + data, digest_size=8).digest()
        out.append(int.from_bytes(digest, "big"))
        prev = digest
    return tuple(out)


def decode(raw: bytes) -> dict[str, Any]:
    try:
        body = loads_bounded(raw)
    except JSONError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _field(body: Mapping[str, Any], name: str, kind: type, default: Any = None) -> Any:
    """``body[name]`` if it has type ``kind``; absent or null gives ``default``."""
    value = body.get(name)
    if value is None:
        return default
    # bool is an int in Python, but JSON's true is not an integer.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest(f"{name} must be {_TYPE_NAMES[kind]}", param=name)
    return value


def _check_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list", param="messages")
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise BadRequest(f"{where} must be an object", param="messages")
        if not isinstance(message.get("role"), str):
            raise BadRequest(f"{where}.role must be a string", param="messages")
        content = message.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list) or not all(
            isinstance(part, dict) and isinstance(part.get("text", ""), str) for part in content
        ):
            raise BadRequest(
                f"{where}.content must be a string or a list of content parts", param="messages"
            )
    return messages


def _is_token_ids(prompt: Any) -> TypeGuard[list[int]]:
    return (
        isinstance(prompt, list)
        and bool(prompt)
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    )


def parse(body: Mapping[str, Any], chat: bool, model_name: str, profile: Profile) -> Parsed:
    model = _field(body, "model", str)
    if model is not None and model != model_name:
        raise BadRequest(f"The model `{clip(model, 100)}` does not exist.", 404, "model")
    if _field(body, "n", int, 1) != 1:
        raise BadRequest("n > 1 is not supported by the simulator", param="n")
    if chat:
        messages = _check_messages(body.get("messages"))
        prompt_len = estimate_chat(messages)
        hashes = block_hashes(chat_text(messages), profile.block_size * CHARS_PER_TOKEN)
    else:
        prompt = body.get("prompt")
        if _is_token_ids(prompt):
            prompt_len = len(prompt)
            hashes = block_hashes([str(t) for t in prompt], profile.block_size)
        elif isinstance(prompt, str):
            prompt_len = estimate_text(prompt)
            hashes = block_hashes(prompt, profile.block_size * CHARS_PER_TOKEN)
        else:
            raise BadRequest("prompt must be a string or a list of token ids", param="prompt")
    limit = profile.model.max_model_len
    max_tokens = _field(body, "max_completion_tokens", int)
    if max_tokens is None:
        max_tokens = _field(body, "max_tokens", int)
    if max_tokens is not None and max_tokens < 1:
        raise BadRequest("max_tokens must be at least 1", param="max_tokens")
    if prompt_len >= limit or (max_tokens or 0) + prompt_len > limit:
        raise BadRequest(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_len + (max_tokens or 0)} tokens ({prompt_len} in the messages, "
            f"{max_tokens or 0} in the completion). Please reduce the length of the messages "
            "or completion.",
            param="max_tokens" if max_tokens else "messages",
        )
    options = _field(body, "stream_options", dict, {})
    job = Job(
        prompt_len=prompt_len,
        hashes=hashes,
        max_tokens=max_tokens or limit - prompt_len,
        ignore_eos=_field(body, "ignore_eos", bool, False),
    )
    return Parsed(
        job,
        stream=_field(body, "stream", bool, False),
        include_usage=_field(options, "include_usage", bool, False),
    )


# -- embeddings and images ----------------------------------------------------------------


@dataclass(frozen=True)
class EmbedBody:
    tokens: list[int]  # per input
    batched: bool  # a list of inputs (TEI's "batch" method) or one
    base64: bool


def _check_model(body: Mapping[str, Any], served: str) -> None:
    model = _field(body, "model", str)
    if model is not None and model != served:
        raise BadRequest(f"The model `{clip(model, 100)}` does not exist.", 404, "model")


def parse_embeddings(body: Mapping[str, Any], model: EmbeddingModel) -> EmbedBody:
    """OpenAI's embeddings body: ``input`` is a string, a list of strings, a list of token ids
    or a list of lists of token ids; each input and the count are checked against the model."""
    _check_model(body, model.name)
    raw = body.get("input")
    inputs: list[Any]
    if isinstance(raw, str) or _is_token_ids(raw):
        inputs, batched = [raw], False
    elif isinstance(raw, list) and raw:
        inputs, batched = raw, True
    else:
        raise BadRequest(
            "input must be a string, a list of strings or a list of token-id lists", param="input"
        )
    if len(inputs) > model.max_inputs:
        raise BadRequest(
            f"input has {len(inputs)} items, over max_inputs {model.max_inputs} per request",
            param="input",
        )
    tokens: list[int] = []
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            if not item:  # TEI refuses it too: no tokens is nothing to embed
                raise BadRequest(f"input[{i}] is empty", param="input")
            count = estimate_text(item)
        elif _is_token_ids(item):
            if not all(0 <= t < model.vocab_size for t in item):
                raise BadRequest(
                    f"input[{i}] has a token id outside 0..{model.vocab_size - 1}", param="input"
                )
            count = len(item)
        else:
            raise BadRequest(f"input[{i}] must be a string or a list of token ids", param="input")
        if count > model.max_input_tokens:
            raise BadRequest(
                f"input[{i}] has {count} tokens, over max_input_tokens "
                f"{model.max_input_tokens} per item",
                param="input",
            )
        tokens.append(count)
    encoding = _field(body, "encoding_format", str, "float")
    if encoding not in ("float", "base64"):
        raise BadRequest("encoding_format must be float or base64", param="encoding_format")
    return EmbedBody(tokens, batched, encoding == "base64")


# Bounds an image request must keep: the diffusion model's latents are 1/8 of the pixels, and
# OpenAI's images API allows n up to 10.
IMAGE_SIDE = (64, 4096)
IMAGE_MAX_N = 10
IMAGE_MAX_STEPS = 500


@dataclass(frozen=True)
class ImageBody:
    width: int
    height: int
    steps: int
    n: int
    b64: bool


def _bounded(body: Mapping[str, Any], name: str, default: int, high: int) -> int:
    value: int = _field(body, name, int, default)
    if not 1 <= value <= high:
        raise BadRequest(f"{name} must be between 1 and {high}, got {value}", param=name)
    return value


def parse_images(body: Mapping[str, Any], model: DiffusionModel) -> ImageBody:
    """OpenAI's images body plus a ``steps`` extension (denoising steps, default 30)."""
    _check_model(body, model.name)
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise BadRequest("prompt must be a non-empty string", param="prompt")
    size = _field(body, "size", str, "1024x1024")
    w, sep, h = size.partition("x")
    lo, hi = IMAGE_SIDE
    if not (sep and w.isdigit() and h.isdigit() and len(w) <= 5 and len(h) <= 5):
        raise BadRequest(f"size must be WIDTHxHEIGHT, got {clip(size, 40)!r}", param="size")
    width, height = int(w), int(h)
    if not (lo <= width <= hi and lo <= height <= hi and width % 8 == 0 and height % 8 == 0):
        raise BadRequest(
            f"size {width}x{height}: each side must be a multiple of 8 from {lo} to {hi}",
            param="size",
        )
    fmt = _field(body, "response_format", str, "b64_json")
    if fmt not in ("b64_json", "url"):
        raise BadRequest("response_format must be b64_json or url", param="response_format")
    return ImageBody(
        width,
        height,
        steps=_bounded(body, "steps", 30, IMAGE_MAX_STEPS),
        n=_bounded(body, "n", 1, IMAGE_MAX_N),
        b64=fmt == "b64_json",
    )
