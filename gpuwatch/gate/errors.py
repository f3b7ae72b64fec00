"""The gate's error replies: OpenAI's shape, bounded, never echoing what a client sent."""

from __future__ import annotations

import json
from collections.abc import Mapping

from aiohttp import web

from gpuwatch.fmt import clip

MESSAGE_MAX = 300


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
            "message": clip(message, MESSAGE_MAX),
            "type": kind,
            "param": param,
            "code": code if code is not None else status,
        }
    }
    return web.Response(
        text=json.dumps(body), status=status, content_type="application/json", headers=headers
    )
