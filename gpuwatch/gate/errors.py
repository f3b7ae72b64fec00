"""The gate's error replies: OpenAI's shape, bounded, never echoing what a client sent."""

from __future__ import annotations

import json
from collections.abc import Mapping

from aiohttp import web

MESSAGE_MAX = 300


def printable(text: str, limit: int = MESSAGE_MAX) -> str:
    """``text`` safe to show or log: control and bidi characters escaped, length bounded."""
    out = "".join(
        ch if ch.isprintable() and ch not in _BIDI else ch.encode("unicode_escape").decode()
        for ch in text[: limit + 1]
    )
    return out if len(out) <= limit else f"{out[: limit - 3]}..."


# Bidi overrides and isolates reorder what follows them on a terminal (Trojan Source).
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def openai_error(
    message: str,
    status: int,
    kind: str,
    code: str | int | None = None,
    headers: Mapping[str, str] | None = None,
    param: str | None = None,
) -> web.Response:
    body = {
        "error": {
            "message": printable(message),
            "type": kind,
            "param": param,
            "code": code if code is not None else status,
        }
    }
    return web.Response(
        text=json.dumps(body), status=status, content_type="application/json", headers=headers
    )
