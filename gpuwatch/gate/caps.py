"""A lane's prompt and output caps applied to a parsed request body. Pure: no I/O.

Every field read here is type-checked first, and a wrong type is a ``BodyError`` (400): a body
the gate cannot read is a body it cannot cap. The output cap covers each name and each form a
server accepts for it: vLLM coerces ``500.0`` and ``"500"`` to 500, so they are numbers here.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from gpuwatch.errors import GpuwatchError
from gpuwatch.gate.limits import LaneLimits
from gpuwatch.tokens import chat_text, estimate_chat, estimate_text

# Every name an OpenAI-compatible server reads as the output bound (vLLM, llama.cpp, TGI,
# the Responses API). All present are capped, whichever the upstream happens to use.
# Every name a server reads an output bound under: llama.cpp reads n_predict before
# max_tokens even on /v1 routes.
OUTPUT_KEYS = (
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "max_new_tokens",
    "n_predict",
)
# Each answer a request asks for is generated: the cap holds their sum.
CHOICE_KEYS = ("n", "best_of")
# Fields that carry a prompt, by API: all are counted, so a prompt in one field cannot hide
# behind an empty other one.
PROMPT_KEYS = ("messages", "prompt", "input")
# Fields beside those that a server renders into the prompt too: tool definitions (a chat
# template prints their JSON schema; ``functions`` is the older name), the Responses API's
# ``instructions``, a completion's ``suffix`` (fill in the middle), the documents of vLLM's
# RAG chat templates, a request's own ``chat_template``, and Anthropic-style ``system``.
EXTRA_PROMPT_KEYS = (
    "tools",
    "functions",
    "instructions",
    "suffix",
    "documents",
    "chat_template",
    "system",
)
# Content parts that carry media: their bytes are not text tokens (a vision model turns an
# image into its own count of tokens), so they are not counted as text.
MEDIA_PARTS = frozenset(
    ("image_url", "input_image", "image", "input_audio", "audio", "file", "input_file", "video_url")
)
_NUMERIC = re.compile(r"\s*\+?(\d{1,18})(?:\.0*)?\s*")


class BodyError(GpuwatchError, ValueError):
    """A body field of the wrong type or form; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _check_message(at: str, message: Any) -> None:
    """Types of what the shared estimate reads from a chat message; BodyError if wrong."""
    if not isinstance(message, dict):
        raise BodyError(at, "must be an object")
    if not isinstance(message.get("role", ""), str):
        raise BodyError(f"{at}.role", "must be a string")
    content = message.get("content")
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise BodyError(f"{at}.content", "must be a string, a list of parts or null")
    for i, part in enumerate(content):
        if not isinstance(part, dict):
            raise BodyError(f"{at}.content[{i}]", "must be an object")
        if not isinstance(part.get("text", ""), str):
            raise BodyError(f"{at}.content[{i}].text", "must be a string")


def _messages(body: dict[str, Any]) -> list[Any] | None:
    messages = body.get("messages")
    if messages is None:
        return None
    if not isinstance(messages, list):
        raise BodyError("messages", "must be a list")
    for i, message in enumerate(messages):
        _check_message(f"messages[{i}]", message)
    return messages


def _as_text(value: Any) -> str:
    """A field as the prompt will hold it: a string as is, anything else as compact JSON
    (a chat template prints a tool's schema or a call's arguments about so)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _message_extras(message: dict[str, Any]) -> list[str]:
    """What a chat template renders of a message beside its role and content text: tool
    calls and their arguments, a name, a tool_call_id, reasoning; and content parts that are
    neither text nor media (an input item, a tool result)."""
    rest = {k: v for k, v in message.items() if k not in ("role", "content") and v is not None}
    out = [_as_text(rest)] if rest else []
    content = message.get("content")
    if isinstance(content, list):
        out.extend(
            _as_text(part)
            for part in content
            if "text" not in part and part.get("type") not in MEDIA_PARTS
        )
    return out


def _prompt_texts(key: str, value: Any) -> tuple[list[str], int]:
    """(texts to count, token ids already counted) of one prompt field."""
    if value is None:
        return [], 0
    if isinstance(value, str):
        return [value], 0
    if isinstance(value, list):
        if all(isinstance(t, str) for t in value):
            return list(value), 0
        if all(isinstance(t, int) and not isinstance(t, bool) for t in value):
            return [], len(value)
        if all(isinstance(t, list) for t in value) and all(
            isinstance(i, int) and not isinstance(i, bool) for t in value for i in t
        ):
            return [], sum(len(t) for t in value)
    raise BodyError(key, "must be a string, a list of strings or a list of token ids")


@dataclass
class Prompt:
    """Everything of a body that becomes prompt tokens: chat message lists (``messages``,
    the Responses API's ``input`` items), plain texts, and token ids given as such."""

    chats: list[list[Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    ids: int = 0

    @property
    def found(self) -> bool:
        return bool(self.chats or self.texts or self.ids)

    def estimate(self) -> int:
        return (
            sum(estimate_chat(c) for c in self.chats)
            + sum(estimate_text(t) for t in self.texts)
            + self.ids
        )

    def text(self) -> str:
        """The text to count with a tokenizer (the ids are counted apart)."""
        return "\n".join([*(chat_text(c) for c in self.chats), *self.texts])


def read_prompt(body: dict[str, Any]) -> Prompt:
    """Every prompt field of a body, type-checked (BodyError naming the first bad one)."""
    out = Prompt()
    messages = _messages(body)
    if messages is not None:
        out.chats.append(messages)
        for message in messages:
            out.texts.extend(_message_extras(message))
    for key in PROMPT_KEYS[1:]:
        value = body.get(key)
        if (
            key == "input"
            and isinstance(value, list)
            and value
            and all(isinstance(item, dict) for item in value)
        ):
            # The Responses API's input items: messages, function calls and their outputs.
            for i, item in enumerate(value):
                _check_message(f"input[{i}]", item)
                out.texts.extend(_message_extras(item))
            out.chats.append(value)
            continue
        texts, ids = _prompt_texts(key, value)
        out.texts.extend(texts)
        out.ids += ids
    for key in EXTRA_PROMPT_KEYS:
        if body.get(key) is not None:
            out.texts.append(_as_text(body[key]))
    return out


def estimate_prompt(body: dict[str, Any]) -> int | None:
    """Prompt tokens by the shared estimate, over every prompt field; None when there is none."""
    prompt = read_prompt(body)
    return prompt.estimate() if prompt.found else None


def prompts(body: dict[str, Any]) -> int:
    """How many prompts a body carries: a completions ``prompt`` list of strings or of
    token-id lists is a batch, each prompt its own completion(s) (OpenAI and vLLM alike)."""
    value = body.get("prompt")
    if isinstance(value, list) and value and all(isinstance(p, (str, list)) for p in value):
        return len(value)
    return 1


def output_tokens(key: str, value: Any) -> int | None:
    """A requested output bound as the upstream will read it; BodyError for what is no number."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise BodyError(key, "must be an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise BodyError(key, f"must be an integer, got {value!r}")
        return int(value)
    if isinstance(value, str):
        match = _NUMERIC.fullmatch(value)
        if match is None:
            raise BodyError(key, f"must be an integer, got a string {value[:20]!r}")
        return int(match.group(1))
    raise BodyError(key, f"must be an integer, got {type(value).__name__}")


class OverCap(GpuwatchError):
    """An output bound over the cap under the ``reject`` policy; ``str()`` says which."""


def answers(body: dict[str, Any]) -> int:
    """How many answers the request asks for: ``n`` (``best_of``) for each of its prompts;
    each is generated."""
    wanted = 1
    for key in CHOICE_KEYS:
        value = output_tokens(key, body.get(key))
        if value is not None:
            if value < 1:
                raise BodyError(key, f"must be at least 1, got {value}")
            wanted = max(wanted, value)
    return wanted * prompts(body)


def cap_output(body: dict[str, Any], cap: int, reject: bool, default_key: str, lane: str) -> bool:
    """Hold the request's output, over all the answers it asks for, to ``cap`` tokens: clamp
    every output bound over ``cap // answers`` (``reject``: raise OverCap instead); set
    ``default_key`` when the body has none. True when the body changed."""
    n = answers(body)
    per_answer = cap // n
    if per_answer < 1:
        raise OverCap(f"{n} answers cannot fit lane {lane!r}'s output cap of {cap} tokens")
    present = {k: output_tokens(k, body[k]) for k in OUTPUT_KEYS if k in body}
    # A bound below 1 means "no bound" to some servers (llama.cpp's -1: until the context is
    # full): under a cap it is as far over as a bound can be.
    over = [k for k, v in present.items() if v is not None and (v > per_answer or v < 1)]
    if over and reject:
        each = f" for each of {n} answers" if n > 1 else ""
        raise OverCap(f"{over[0]} {present[over[0]]}{each} is over lane {lane!r}'s cap of {cap}")
    for k in over:
        body[k] = per_answer
    if all(v is None for v in present.values()):
        body[default_key] = per_answer
        return True
    return bool(over)


class CapRefused(GpuwatchError):
    """A body the lane's prompt or output cap refuses; ``reason`` is the gate's refusal reason
    (``prompt_too_long``, ``max_tokens``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def apply_text_caps(
    body: dict[str, Any],
    limits: LaneLimits,
    lane: str,
    path: str,
    prompt_tokens: int | None,
    default_output_tokens: int,
    clamped: list[str],
) -> tuple[bool, int]:
    """A lane's prompt cap, output cap and token reservation on a body whose prompt is
    ``prompt_tokens`` long (None: unknown): raises CapRefused; clamps the output bound in place
    (what it changed is added to ``clamped``). Returns whether the body changed and the tokens
    to reserve from the lane's budget: prompt + output bound, 0 without a budget.

    The proxy calls it for every request; ``gpuwatch plan sweep`` for every simulated one, so
    the plan reserves what the gate reserves."""
    cap_prompt = limits.max_prompt_tokens
    if cap_prompt is not None and prompt_tokens is not None and prompt_tokens > cap_prompt:
        why = f"prompt is {prompt_tokens} tokens; lane {lane!r} allows {cap_prompt}"
        raise CapRefused("prompt_too_long", why)
    changed = False
    cap = limits.max_output_tokens
    if cap is not None:
        default_key = "max_output_tokens" if path.endswith("/responses") else "max_tokens"
        asked = {k: body[k] for k in OUTPUT_KEYS if k in body}
        try:
            changed = cap_output(
                body, cap, limits.output_tokens_policy == "reject", default_key, lane
            )
        except OverCap as exc:
            raise CapRefused("max_tokens", str(exc)) from None
        if changed:
            # As numbers: a bound sent as " 500" must not put its spaces in a header.
            clamped.extend(
                f"{k} {output_tokens(k, asked.get(k)) or 'none'}->{body[k]}"
                for k in OUTPUT_KEYS
                if k in body and asked.get(k) != body[k]
            )
    if limits.max_inflight_tokens is None:
        return changed, 0
    return changed, (prompt_tokens or 0) + output_bound(body, cap, default_output_tokens)


def output_bound(body: dict[str, Any], cap: int | None, default: int) -> int:
    """The most output tokens a (capped) body can generate, over all its answers: its own bound
    (the largest of the names present), else the lane's cap, else ``default`` (the gate's
    ``default_output_tokens``); a bound below 1 ("no bound" to some servers) counts as none."""
    bounds = [output_tokens(k, body[k]) for k in OUTPUT_KEYS if k in body]
    given = [b for b in bounds if b is not None and b >= 1]
    per_answer = max(given) if given else (cap or default)
    return per_answer * answers(body)
