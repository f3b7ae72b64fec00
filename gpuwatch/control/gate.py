"""Client for the gate's admin API (httpx): limits, status, audit. Used by ``gpuwatch limits``
and the TUI; every change goes through ``Guard.check`` first.

The gate's contract is read here and nowhere else: its answers become the admin API's types
(``adminapi.py``), an answer that is not of that shape is one ``GateError`` saying where, and a
409 becomes a ``GateConflict`` carrying who changed the limits, their version and the limits now
in force.
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from gpuwatch.adminapi import (
    AdminApiError,
    AuditEntry,
    ConflictBody,
    GateStatus,
    Json,
    Limits,
    LimitsPatch,
    audit_entries,
)
from gpuwatch.admintoken import token_problem
from gpuwatch.control.guard import Guard
from gpuwatch.errors import GpuwatchError
from gpuwatch.fmt import clip
from gpuwatch.httpclient import BodyRefused, async_client, get_stream, read_bounded
from gpuwatch.safejson import JSONError, loads_bounded

T = TypeVar("T")
# The most of an answer read: a gate's status with many lanes and tenants is tens of KB.
MAX_ANSWER_BYTES = 4 * 1024 * 1024


class GateError(GpuwatchError):
    """A refusal or failure, with the server's reason when there is one."""

    def __init__(self, status: int | None, message: str, body: Json = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class GateConflict(GateError):
    """The limits changed since the version the change was based on (HTTP 409)."""

    def __init__(self, message: str, conflict: ConflictBody, body: Json = None) -> None:
        super().__init__(409, message, body)
        self.actor = conflict.actor
        self.version = conflict.version
        self.limits = conflict.limits

    @classmethod
    def from_body(cls, message: str, body: Json) -> GateConflict:
        return cls(message, ConflictBody.from_json(body, message), body)


def default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class GateClient:
    def __init__(
        self,
        admin_url: str,
        token: str | None,
        guard: Guard,
        actor: str | None = None,
        timeout_s: float = 3.0,
    ) -> None:
        self.base = admin_url.rstrip("/")
        # The caller's guard, never one of our own: a read-only caller must stay read-only here.
        self.guard = guard
        headers = {"X-Gpuwatch-Actor": actor or default_actor()}
        if token:
            problem = token_problem(token)
            if problem:
                # httpx would fail later with a LocalProtocolError read as "unreachable".
                raise GateError(None, f"admin token cannot be sent: it {problem}")
            headers["Authorization"] = f"Bearer {token}"
        self._client = async_client(timeout_s=timeout_s, headers=headers)
        # The last answer of each read and what it was read as: a body the same to the byte
        # is not parsed again (an idle gate's status, its limits between changes).
        self._last: dict[str, tuple[bytes, object]] = {}

    async def close(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> GateClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Json:
        return self._body(await self._send(method, path, **kwargs))

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self._client.request(method, f"{self.base}{path}", **kwargs)
        except httpx.HTTPError as exc:
            raise GateError(None, f"gate {self.base} unreachable: {type(exc).__name__}") from exc

    async def _get(self, path: str, read: Callable[[Json], T], **kwargs: Any) -> T:
        """A read of ``path`` as the API's type; the same body as last time is not parsed
        again (what it was read as is kept, typed objects being frozen). Sent as the same
        request each time (``PollClient.open_get``), the body read up to ``MAX_ANSWER_BYTES``."""
        try:
            async with get_stream(self._client, self.base + path, kwargs.get("params")) as answer:
                content = await read_bounded(answer, MAX_ANSWER_BYTES)
        except BodyRefused as exc:
            raise GateError(None, f"gate {self.base}: {path}: {exc}") from None
        except httpx.HTTPError as exc:
            raise GateError(None, f"gate {self.base} unreachable: {type(exc).__name__}") from exc
        status = answer.status_code
        kept = self._last.get(path)
        if status == 200 and kept is not None and kept[0] == content:
            return kept[1]  # type: ignore[return-value]  # stored by this path's reader
        value = self._read(path, self._parse(status, content), read)
        if status == 200:
            self._last[path] = (content, value)
        return value

    def _body(self, response: httpx.Response) -> Json:
        return self._parse(response.status_code, response.content)

    def _parse(self, status: int, content: bytes) -> Json:
        try:
            # Bounded like every answer we parse (nesting, huge integers): a deep one is not a
            # RecursionError for the caller.
            body: Json = loads_bounded(content)
        except JSONError as exc:
            if status < 400:
                raise GateError(
                    status, f"gate {self.base}: the answer is not its API ({exc})"
                ) from None
            body = None
        if status >= 400:
            error = body.get("error") if isinstance(body, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            # The gate's words (or whatever answers at that URL): one clean line, bounded.
            said = message or content[:400].decode("utf-8", "replace")
            text = clip(f"HTTP {status}: {said}", 300)
            if status == 409:
                raise GateConflict.from_body(text, body)
            raise GateError(status, text, body)
        return body

    def _read(self, path: str, body: Json, read: Callable[[Json], T]) -> T:
        """An answer as the API's type: one GateError, saying where, when it is not one."""
        try:
            return read(body)
        except AdminApiError as exc:
            raise GateError(200, f"gate {self.base}: {path} is not its API ({exc})", body) from None

    async def limits(self) -> Limits:
        return await self._get("/admin/limits", Limits.from_json)

    async def status(self, ttft_s: float | None = None, itl_s: float | None = None) -> GateStatus:
        """Live state per lane, with exact user-felt latency and goodput judged against the
        given bounds (unset ones are not judged)."""
        bounds = {k: f"{v:g}" for k, v in (("ttft_s", ttft_s), ("itl_s", itl_s)) if v}
        return await self._get("/admin/status", GateStatus.from_json, params=bounds)

    async def audit(self, limit: int = 20) -> list[AuditEntry]:
        """The newest entries, newest first. The answer is the server's: entries that are not
        audit entries are left out, and an answer without a list of them is a GateError, so
        no caller indexes into something else."""
        body = await self._call("GET", "/admin/audit", params={"limit": limit})
        return self._read("/admin/audit", body, audit_entries)

    async def patch(self, changes: LimitsPatch, if_match: int | None = None) -> Limits:
        """Apply ``changes``; with ``if_match``, GateConflict when another change came first."""
        body = changes.to_json()
        self.guard.check(f"change of limits {body}")
        headers = {"If-Match": f'"{if_match}"'} if if_match is not None else {}
        answer = await self._call("PATCH", "/admin/limits", json=body, headers=headers)
        return self._read("/admin/limits", answer, Limits.from_json)
