"""The one prompt-length estimate, shared by the simulator, the gate and the load generator.

One token per 4 characters of text (rounded up); chat adds 4 tokens per message and 3 for the
template, roughly what Llama-3's chat template costs. A prompt of token ids counts its ids.
"""

from __future__ import annotations

import math
from typing import Any

CHARS_PER_TOKEN = 4


def estimate_text(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def message_text(content: Any) -> str:
    """The text of a chat message's content (a string, or a list of content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def chat_text(messages: list[Any]) -> str:
    parts = (m for m in messages if isinstance(m, dict))
    return "\n".join(f"{m.get('role', '')}: {message_text(m.get('content'))}" for m in parts)


_PER_MESSAGE, _TEMPLATE = 4, 3


def estimate_chat(messages: list[Any]) -> int:
    return estimate_text(chat_text(messages)) + _PER_MESSAGE * len(messages) + _TEMPLATE


def estimate_body(body: dict[str, Any]) -> int | None:
    """Prompt tokens of an OpenAI request body, or None when it has no prompt we can read."""
    messages = body.get("messages")
    if isinstance(messages, list):
        return estimate_chat(messages)
    prompt = body.get("prompt", body.get("input"))
    if isinstance(prompt, str):
        return estimate_text(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) for t in prompt):
            return len(prompt)
        if all(isinstance(t, str) for t in prompt):
            return sum(estimate_text(t) for t in prompt)
    return None


def body_text(body: dict[str, Any]) -> str | None:
    """The text an upstream /tokenize should count, when the body has one."""
    messages = body.get("messages")
    if isinstance(messages, list):
        return chat_text(messages)
    prompt = body.get("prompt", body.get("input"))
    return prompt if isinstance(prompt, str) else None


def single_message_chars(tokens: int, role: str = "user") -> int:
    """Characters of content that make a one-message chat estimate ``tokens`` tokens."""
    overhead = _PER_MESSAGE + _TEMPLATE
    return max(1, (tokens - overhead) * CHARS_PER_TOKEN - len(f"{role}: "))
