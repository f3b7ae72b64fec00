"""One JSON call to a stack's admin API, for the knob adapters: the answer read under a cap,
parsed with ``safejson``, and every failure (unreachable, a refusal, an answer that is not
JSON) one ``KnobError`` that says which stack, which call and the stack's own reason.

The credential (a bearer token: LiteLLM's master key, SGLang's or vLLM's API key) is sent in
a header and never appears in an error: a stack that echoes the token it was given back in
its refusal has it blotted out here, before the message goes anywhere.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from gpuwatch.control.knobs.base import KnobEndpoint, KnobError
from gpuwatch.fmt import clip
from gpuwatch.httpclient import BodyRefused, async_client, read_bounded
from gpuwatch.safejson import JSONError, loads_bounded

# An admin answer lists models, keys or teams: a few MB is already thousands of them.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
REASON_LIMIT = 160
_HIDDEN = "***"


class StackRefused(KnobError):
    """The stack answered with an error status; ``status`` is it (vLLM's 404 means the knob is
    not there, which its adapter tells apart from a refusal)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def without_userinfo(url: str) -> str:
    """``url`` with any ``user:password@`` taken out, fit to appear in a message."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _detail(value: object) -> str | None:
    # FastAPI's 422: {"detail": [{"loc": [...], "msg": ...}, ...]}; others: a string.
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and isinstance(value[0], dict):
        first = value[0]
        loc = first.get("loc")
        where = ".".join(str(p) for p in loc) if isinstance(loc, list) else ""
        msg = first.get("msg")
        if isinstance(msg, str):
            return f"{where}: {msg}" if where else msg
    if isinstance(value, dict):
        return _reason_of(value)
    return None


def _reason_of(body: object) -> str | None:
    """The stack's own words in an error body: Dynamo and vLLM ``{"error": "..."}``, LiteLLM
    ``{"error": {"message": ...}}`` or ``{"detail": {"error": ...}}``, FastAPI ``detail``."""
    if not isinstance(body, dict):
        return None
    for key in ("error", "detail", "message"):
        if key in body:
            found = _detail(body[key])
            if found:
                return found
    return None


class AdminApi:
    """The admin API of one stack at ``endpoint``; ``call`` returns the parsed JSON answer."""

    def __init__(self, endpoint: KnobEndpoint) -> None:
        self.endpoint = endpoint
        self.where = f"{endpoint.stack} {without_userinfo(endpoint.base)}"
        headers = {"Authorization": f"Bearer {endpoint.credential}"} if endpoint.credential else {}
        self._client = async_client(
            connect_timeout_s=min(endpoint.timeout_s, 2.0),
            timeout_s=endpoint.timeout_s,
            max_connections=4,
            headers=headers,
        )

    def _safe(self, text: str) -> str:
        secret = self.endpoint.credential
        if secret:
            text = text.replace(secret, _HIDDEN)
        return clip(text, REASON_LIMIT)

    async def call(
        self,
        method: str,
        path: str,
        body: object = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        """The JSON answer of ``method path``; a ``StackRefused`` for an error status (with the
        stack's reason), a ``KnobError`` when unreachable or when the answer is not JSON."""
        call = f"{self.where}: {method} {path}"
        try:
            async with self._client.stream(
                method, self.endpoint.base + path, json=body, params=params
            ) as response:
                status = response.status_code
                raw = await read_bounded(response, MAX_ANSWER_BYTES)
        except BodyRefused as exc:
            raise KnobError(f"{call}: answer refused: {exc}") from None
        except httpx.HTTPError as exc:
            reason = self._safe(str(exc)) or type(exc).__name__
            raise KnobError(f"{call}: unreachable: {reason}") from None
        problem: str | None = None
        try:
            parsed = loads_bounded(raw)
        except JSONError as exc:
            parsed, problem = None, str(exc)
        if status >= 400:
            reason = _reason_of(parsed) or raw[:400].decode("utf-8", "replace") or "no reason"
            raise StackRefused(f"{call}: HTTP {status}: {self._safe(reason)}", status)
        if problem is not None:
            raise KnobError(f"{call}: HTTP {status}, not JSON ({problem})")
        return parsed

    async def close(self) -> None:
        await self._client.aclose()


def shape_error(api: AdminApi, path: str, what: str) -> KnobError:
    """The answer parsed but is not the API's shape: ``what`` says what was wrong."""
    return KnobError(f"{api.where}: {path}: not its API ({clip(what, REASON_LIMIT)})")


def number(value: object) -> bool:
    """A JSON number (a bool is not one, though Python's ``True`` is an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
