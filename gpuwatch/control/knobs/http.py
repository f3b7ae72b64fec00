"""What every knob adapter's HTTP needs: one client per endpoint (the project's factory, the
credential as a bearer token), answers read bounded and parsed bounded, and a reader of JSON
answers whose every failure is one KnobError saying where (``ray GET http://h:8265/api/serve/
applications/: applications.llm.deployments: not an object``), never a traceback."""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx

from gpuwatch.adminapi import Json
from gpuwatch.admintoken import token_problem
from gpuwatch.bounds import DEFAULT_MAX_BYTES
from gpuwatch.control.knobs.base import KnobEndpoint, KnobError
from gpuwatch.fmt import clip
from gpuwatch.httpclient import BodyRefused, async_client, read_bounded
from gpuwatch.safejson import JSONError, loads_bounded

MAX_ANSWER_BYTES = DEFAULT_MAX_BYTES  # a Ray cluster's every app and replica: megabytes at most


class KnobHttp:
    """One endpoint's client. ``call`` answers the parsed JSON (or None for an empty body)."""

    def __init__(self, endpoint: KnobEndpoint, headers: dict[str, str] | None = None) -> None:
        self.endpoint = endpoint
        sent = dict(headers or {})
        if endpoint.credential:
            problem = token_problem(endpoint.credential)
            if problem:
                # httpx would fail later with an error read as "unreachable".
                raise KnobError(f"{endpoint.stack} credential cannot be sent: it {problem}")
            sent["Authorization"] = f"Bearer {endpoint.credential}"
        self._client = async_client(timeout_s=endpoint.timeout_s, headers=sent)

    def where(self, method: str, path: str) -> str:
        return f"{self.endpoint.stack} {method} {clip(self.endpoint.base + path, 200)}"

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Json = None,
        params: dict[str, str] | None = None,
    ) -> Json:
        """``body`` (when not None) is sent as JSON."""
        where = self.where(method, path)
        content = None if body is None else json.dumps(body).encode()
        headers = {} if body is None else {"Content-Type": "application/json"}
        try:
            async with self._client.stream(
                method, self.endpoint.base + path, params=params, content=content, headers=headers
            ) as response:
                data = await read_bounded(response, MAX_ANSWER_BYTES)
        except httpx.HTTPError as exc:
            raise KnobError(f"{where}: unreachable ({type(exc).__name__})") from None
        except BodyRefused as exc:
            raise KnobError(f"{where}: {exc}") from None
        if response.status_code >= 400:
            text = data[:600].decode("utf-8", "replace")
            raise KnobError(f"{where}: HTTP {response.status_code}: {clip(text, 300)}")
        if not data.strip():
            return None
        try:
            parsed: Json = loads_bounded(data)
        except JSONError as exc:
            raise KnobError(f"{where}: the answer is not JSON ({exc})") from None
        return parsed

    async def close(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True)
class Doc:
    """A part of a JSON answer and where it is; each accessor raises KnobError naming both."""

    value: Json
    where: str  # the request: "ray GET http://h:8265/api/serve/applications/"
    at: str = ""  # the part: "applications.llm.deployments"

    def fail(self, what: str) -> KnobError:
        return KnobError(f"{self.where}: {self.at or 'the answer'}: {what}")

    def _path(self, key: str) -> str:
        key = clip(key, 60)  # keys are the server's: one short printable line
        return f"{self.at}.{key}" if self.at else key

    @property
    def present(self) -> bool:
        return self.value is not None

    def object(self) -> dict[str, Json]:
        if not isinstance(self.value, dict):
            raise self.fail(f"not an object ({_kind(self.value)})")
        return self.value

    def get(self, key: str) -> Doc:
        """The member ``key`` (a missing one is a Doc of None); this must be an object."""
        return Doc(self.object().get(key), self.where, self._path(key))

    def items(self) -> list[tuple[str, Doc]]:
        return [(k, Doc(v, self.where, self._path(k))) for k, v in self.object().items()]

    def array(self) -> list[Doc]:
        if not isinstance(self.value, list):
            raise self.fail(f"not a list ({_kind(self.value)})")
        return [Doc(v, self.where, f"{self.at}[{n}]") for n, v in enumerate(self.value)]

    def integer(self) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self.fail(f"not an integer ({_kind(self.value)})")
        return self.value

    def number(self) -> int | float:
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise self.fail(f"not a number ({_kind(self.value)})")
        return self.value

    def flag(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.fail(f"not true or false ({_kind(self.value)})")
        return self.value

    def text(self) -> str:
        if not isinstance(self.value, str):
            raise self.fail(f"not a string ({_kind(self.value)})")
        return self.value


def _kind(value: Json) -> str:
    if value is None:
        return "missing or null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return f"the number {clip(value, 30)}"
    if isinstance(value, str):
        return f"the string {clip(repr(value), 40)}"
    return "a list" if isinstance(value, list) else "an object"
