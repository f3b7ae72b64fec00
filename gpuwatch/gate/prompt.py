"""Everything of a request body that becomes prompt tokens, read and type-checked. Pure.

Every prompt field is read (``messages``, ``prompt``, ``input``, and what a chat template
renders beside them), so a prompt in one field cannot hide behind an empty other one. A field
of the wrong type is a ``BodyError`` naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuwatch.gate.fields import BodyError
from gpuwatch.tokens import chat_text, estimate_chat, estimate_text

# Fields that carry a prompt, by API: all are counted.
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


def _messages(body: Mapping[str, Any]) -> list[Any] | None:
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


@dataclass(frozen=True)
class Prompt:
    """Everything of a body that becomes prompt tokens: chat message lists (``messages``,
    the Responses API's ``input`` items), plain texts, and token ids given as such."""

    chats: tuple[list[Any], ...] = ()
    texts: tuple[str, ...] = ()
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


def read_prompt(body: Mapping[str, Any]) -> Prompt:
    """Every prompt field of a body, type-checked (BodyError naming the first bad one)."""
    chats: list[list[Any]] = []
    texts: list[str] = []
    ids = 0
    messages = _messages(body)
    if messages is not None:
        chats.append(messages)
        for message in messages:
            texts.extend(_message_extras(message))
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
                texts.extend(_message_extras(item))
            chats.append(value)
            continue
        found, given = _prompt_texts(key, value)
        texts.extend(found)
        ids += given
    for key in EXTRA_PROMPT_KEYS:
        if body.get(key) is not None:
            texts.append(_as_text(body[key]))
    return Prompt(tuple(chats), tuple(texts), ids)


def estimate_prompt(body: Mapping[str, Any]) -> int | None:
    """Prompt tokens by the shared estimate, over every prompt field; None when there is none."""
    prompt = read_prompt(body)
    return prompt.estimate() if prompt.found else None


def prompts(body: Mapping[str, Any]) -> int:
    """How many prompts a body carries: a completions ``prompt`` list of strings or of
    token-id lists is a batch, each prompt its own completion(s) (OpenAI and vLLM alike)."""
    value = body.get("prompt")
    if isinstance(value, list) and value and all(isinstance(p, (str, list)) for p in value):
        return len(value)
    return 1
