"""Client for the gate's admin API (httpx): limits, status, audit. Used by ``gpuwatch limits``
and the TUI; every change goes through ``Guard.check`` first.

The gate's contract is read here and nowhere else: a 409 becomes a ``GateConflict`` carrying
who changed the limits, their version and the limits now in force.
"""

from __future__ import annotations

import getpass
import socket
from typing import Any

import httpx

from gpuwatch.admintoken import token_problem
from gpuwatch.control.guard import Guard
from gpuwatch.errors import GpuwatchError
from gpuwatch.fmt import clip
from gpuwatch.gate.audit import check_entry
from gpuwatch.httpclient import async_client
from gpuwatch.safejson import JSONError, loads_bounded


class GateError(GpuwatchError):
    """A refusal or failure, with the server's reason when there is one."""

    def __init__(self, status: int | None, message: str, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class GateConflict(GateError):
    """The limits changed since the version the change was based on (HTTP 409)."""

    def __init__(
        self, message: str, actor: str | None, version: int | None, limits: Any, body: Any
    ) -> None:
        super().__init__(409, message, body)
        self.actor = actor
        self.version = version
        self.limits = limits

    @classmethod
    def from_body(cls, message: str, body: Any) -> GateConflict:
        data = body if isinstance(body, dict) else {}
        actor = data.get("actor")
        limits = data.get("limits") if isinstance(data.get("limits"), dict) else None
        version = data.get("version")
        if not isinstance(version, int) and limits is not None:
            version = limits.get("version")  # gates before the split sent only the limits
        return cls(
            message,
            actor if isinstance(actor, str) else None,
            version if isinstance(version, int) and not isinstance(version, bool) else None,
            limits,
            body,
        )


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

    async def close(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> GateClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._client.request(method, f"{self.base}{path}", **kwargs)
        except httpx.HTTPError as exc:
            raise GateError(None, f"gate {self.base} unreachable: {type(exc).__name__}") from exc
        try:
            # Bounded like every answer we parse (nesting, huge integers): a deep one is not a
            # RecursionError for the caller.
            body = loads_bounded(response.content)
        except JSONError as exc:
            if response.status_code < 400:
                raise GateError(
                    response.status_code, f"gate {self.base}: the answer is not its API ({exc})"
                ) from None
            body = None
        if response.status_code >= 400:
            error = body.get("error") if isinstance(body, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            # The gate's words (or whatever answers at that URL): one clean line, bounded.
            text = clip(f"HTTP {response.status_code}: {message or response.text[:400]}", 300)
            if response.status_code == 409:
                raise GateConflict.from_body(text, body)
            raise GateError(response.status_code, text, body)
        return body

    async def limits(self) -> dict[str, Any]:
        return await self._call("GET", "/admin/limits")

    async def status(
        self, ttft_s: float | None = None, itl_s: float | None = None
    ) -> dict[str, Any]:
        """Live state per lane, with exact user-felt latency and goodput judged against the
        given bounds (unset ones are not judged)."""
        bounds = {k: f"{v:g}" for k, v in (("ttft_s", ttft_s), ("itl_s", itl_s)) if v}
        return await self._call("GET", "/admin/status", params=bounds)

    async def audit(self, limit: int = 20) -> list[dict[str, Any]]:
        """The newest entries, newest first. The answer is the server's: entries that are not
        audit entries (``gate/audit.check_entry``) are left out, and an answer without a list
        of them is a GateError, so no caller indexes into something else."""
        body = await self._call("GET", "/admin/audit", params={"limit": limit})
        entries = body.get("entries") if isinstance(body, dict) else None
        if not isinstance(entries, list):
            raise GateError(200, f"gate {self.base}: /admin/audit has no list of entries", body)
        return [e for e in entries if check_entry(e) is None]

    async def patch(self, changes: dict[str, Any], if_match: int | None = None) -> dict[str, Any]:
        """Apply ``changes``; with ``if_match``, GateConflict when another change came first."""
        self.guard.check(f"change of limits {changes}")
        headers = {"If-Match": f'"{if_match}"'} if if_match is not None else {}
        return await self._call("PATCH", "/admin/limits", json=changes, headers=headers)
