"""The fleet through a Prometheus server's HTTP API (httpx): discovery, one instant query per
signal for every engine, scrape health, firing alerts, and ranges for the charts.

Nothing here collects metrics itself: Prometheus (or Thanos, which answers the same API) has
them. Every query of one refresh is evaluated at the same instant (``time=``), so the rows are
exactly what the same PromQL answers at that time. A server that is down, refuses or answers
garbage becomes ``FleetReading.error``, one line; the caller keeps running.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx

from gpuwatch.admintoken import read_token
from gpuwatch.errors import GpuwatchError
from gpuwatch.fmt import clip
from gpuwatch.httpclient import BodyRefused, async_client, read_bounded
from gpuwatch.safejson import JSONError, loads_bounded
from gpuwatch.sources import promql
from gpuwatch.sources.dialects import Dialect

TOKEN_ENV = "GPUWATCH_PROMETHEUS_TOKEN"
PASSWORD_ENV = "GPUWATCH_PROMETHEUS_PASSWORD"
MAX_BYTES = 32 * 1024 * 1024
# The names Prometheus holds change only when targets come and go: asked again this often.
DISCOVERY_EVERY_S = 30.0
# Scrape health and alerts change at Prometheus' own scrape / rule intervals: asked this often.
HEALTH_EVERY_S = 5.0


class PrometheusError(GpuwatchError):
    """One line: the server did not answer, refused, or answered something that is not its API."""


async def _same(value: Any) -> Any:
    """The last answer again, in the place of a call not made this refresh."""
    return value


def auth_headers(
    token_file: str = "", basic_user: str = "", password_file: str = ""
) -> dict[str, str]:
    """Bearer or basic auth from files or the environment; ValueError with the reason.

    (The ``[prometheus]`` settings' fields: ``config`` imports ``sources``, not the reverse.)
    """
    token = read_token(
        Path(token_file).expanduser() if token_file else None, TOKEN_ENV, "Prometheus token"
    )
    if token:
        return {"Authorization": f"Bearer {token}"}
    if basic_user:
        password = read_token(
            Path(password_file).expanduser() if password_file else None,
            PASSWORD_ENV,
            "Prometheus password",
        )
        if password is None:
            raise ValueError(
                f"basic_user is set but there is no password: give password_file or ${PASSWORD_ENV}"
            )
        pair = base64.b64encode(f"{basic_user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {pair}"}
    return {}


@dataclass
class TargetHealth:
    """A scrape target that is not up, with Prometheus' own last error."""

    instance: str
    job: str
    health: str  # "down" or "unknown" (not scraped yet / stale)
    last_error: str

    def line(self) -> str:
        state = "DOWN" if self.health == "down" else "STALE"
        return f"{self.instance} ({self.job}) {state}: {self.last_error or 'no error given'}"


@dataclass
class Alert:
    name: str
    instance: str
    severity: str

    def line(self) -> str:
        where = f" on {self.instance}" if self.instance else ""
        return f"alert {self.name}{where} firing" + (f" ({self.severity})" if self.severity else "")


@dataclass
class FleetReading:
    """One refresh of the fleet: rows evaluated at ``at``, or ``error`` (one line)."""

    at: float
    rows: list[promql.FleetRow] = field(default_factory=list)
    unhealthy: list[TargetHealth] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    queries: int = 0  # HTTP calls this refresh made (one per signal, regardless of N)
    error: str | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "window": promql.WINDOW,
            "error": self.error,
            "rows": [r.to_json() for r in self.rows],
            "targets_unhealthy": [t.__dict__ for t in self.unhealthy],
            "alerts": [a.__dict__ for a in self.alerts],
            "warnings": self.warnings,
        }


Series = list[tuple[dict[str, str], list[tuple[float, float]]]]


class PrometheusSource:
    def __init__(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        node_label: str = promql.DEFAULT_NODE_LABEL,
        timeout_s: float = 5.0,
    ) -> None:
        self.base = url.rstrip("/")
        self.node_label = node_label
        self.timeout_s = timeout_s
        # Few connections: httpcore scans every pooled one per request (its cost grows with both).
        self._client = async_client(timeout_s=timeout_s, max_connections=4, headers=headers)
        self._dialects: list[Dialect] = []
        self._gates = False
        self._discovered_at = -1e9
        self._health_at = -1e9
        self._unhealthy: list[TargetHealth] = []
        self._alerts: list[Alert] = []
        self.calls = 0

    async def close(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> PrometheusSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        self.calls += 1
        url = f"{self.base}{path}"
        try:
            # httpx's timeout is per read: a server that trickles bytes needs a bound on the whole.
            status, raw = await asyncio.wait_for(self._fetch(url, params), self.timeout_s)
        except httpx.HTTPError as exc:
            raise PrometheusError(
                f"Prometheus {self.base} unreachable: {type(exc).__name__}"
            ) from exc
        except asyncio.TimeoutError:
            raise PrometheusError(
                f"Prometheus {self.base}{path}: timed out after {self.timeout_s:g} s"
            ) from None
        except BodyRefused as exc:
            raise PrometheusError(f"Prometheus {self.base}{path}: {exc}") from None
        try:
            # No depth walk: answers are a few levels deep but thousands of nodes wide, read
            # every second (the decoder still refuses a pathological nesting).
            body = loads_bounded(raw, max_depth=0)
        except JSONError as exc:
            raise PrometheusError(
                f"Prometheus {self.base}{path}: HTTP {status}, not its API ({exc})"
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            reason = clip(str(error), 160) if error else "no status: success"
            raise PrometheusError(f"Prometheus {self.base}{path}: HTTP {status}: {reason}")
        return body.get("data")

    async def _fetch(self, url: str, params: dict[str, str] | None) -> tuple[int, bytes]:
        """The status and the body, read as it arrives up to MAX_BYTES (never held whole)."""
        async with self._client.stream("GET", url, params=params) as response:
            return response.status_code, await read_bounded(response, MAX_BYTES)

    async def query(self, expr: str, at: float) -> promql.Vector:
        data = await self._get("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        try:
            return promql.vector_of(data)
        except ValueError as exc:
            raise PrometheusError(f"Prometheus query answer: {exc}") from None

    async def query_range(self, expr: str, start: float, end: float, step: float) -> Series:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return _matrix(await self._get("/api/v1/query_range", params), "query_range")

    async def query_samples(self, expr: str, at: float) -> Series:
        """An instant query of a range selector (``x[1m]``): each series' raw samples, each
        with the time Prometheus scraped it."""
        data = await self._get("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        return _matrix(data, "query")

    async def names(self) -> list[str]:
        data = await self._get("/api/v1/label/__name__/values")
        if not isinstance(data, list):
            raise PrometheusError("Prometheus __name__ values are not a list")
        return [str(n) for n in data]

    async def discover(self, now: float) -> list[Dialect]:
        """Which dialects (and whether gates) Prometheus holds; asked every 30 s."""
        if now - self._discovered_at >= DISCOVERY_EVERY_S:
            names = await self.names()
            self._dialects = promql.present_dialects(names)
            self._gates = promql.has_gates(names)
            self._discovered_at = now
        return self._dialects

    async def unhealthy_targets(self) -> list[TargetHealth]:
        data = await self._get("/api/v1/targets", {"state": "active"})
        out = []
        for target in (data or {}).get("activeTargets") or []:
            if not isinstance(target, dict) or target.get("health") == "up":
                continue
            labels: dict[str, Any] = (
                target["labels"] if isinstance(target.get("labels"), dict) else {}
            )
            out.append(
                TargetHealth(
                    clip(str(labels.get("instance", "?")), 80),
                    clip(str(labels.get("job", "")), 80),
                    clip(str(target.get("health", "unknown")), 20),
                    clip(str(target.get("lastError") or ""), 160),
                )
            )
        return out

    async def firing_alerts(self) -> list[Alert]:
        data = await self._get("/api/v1/alerts")
        out = []
        for alert in (data or {}).get("alerts") or []:
            if not isinstance(alert, dict) or alert.get("state") != "firing":
                continue
            labels: dict[str, Any] = (
                alert["labels"] if isinstance(alert.get("labels"), dict) else {}
            )
            out.append(
                Alert(
                    clip(str(labels.get("alertname", "?")), 80),
                    clip(str(labels.get("instance", "")), 80),
                    clip(str(labels.get("severity", "")), 20),
                )
            )
        return out

    async def read_fleet(
        self, at: float | None = None, signals: Sequence[promql.FleetSignal] = promql.SIGNALS
    ) -> FleetReading:
        """Every signal for the whole fleet at one instant (now, or ``at`` for the past)."""
        at = time.time() if at is None else at
        before = self.calls
        reading = FleetReading(at)
        try:
            dialects = await self.discover(time.monotonic())
            queries = {s.key: promql.signal_query(s, dialects, self.node_label) for s in signals}
            gate_keys = list(promql.GATE_SIGNALS) if self._gates else []
            asked = [(k, q) for k, q in queries.items() if q is not None]
            health = time.monotonic() - self._health_at >= HEALTH_EVERY_S
            answers = await asyncio.gather(
                *(self.query(q, at) for _, q in asked),
                *(self.query(promql.gate_query(k, self.node_label), at) for k in gate_keys),
                self.unhealthy_targets() if health else _same(self._unhealthy),
                self.firing_alerts() if health else _same(self._alerts),
                # Every call ends before the answer is judged: none is left behind half-open.
                return_exceptions=True,
            )
            failed = next((a for a in answers if isinstance(a, BaseException)), None)
            if failed is not None:
                raise failed
        except PrometheusError as exc:
            reading.error = str(exc)
            reading.queries = self.calls - before
            return reading
        vectors = cast("list[promql.Vector]", answers[: len(asked) + len(gate_keys)])
        engine = dict(zip([k for k, _ in asked], vectors[: len(asked)], strict=True))
        gates = dict(zip(gate_keys, vectors[len(asked) :], strict=True))
        reading.rows, _ = promql.rows_from(engine, gates, self.node_label)
        reading.unhealthy = self._unhealthy = cast("list[TargetHealth]", answers[-2])
        reading.alerts = self._alerts = cast("list[Alert]", answers[-1])
        if health:
            self._health_at = time.monotonic()
        reading.queries = self.calls - before
        if not dialects and not gates:
            reading.warnings.append(
                f"Prometheus {self.base} holds no metric family of a serving stack gpuwatch knows"
            )
        return reading


def _matrix(data: Any, what: str) -> Series:
    """(labels, [(time, value)]) per series of a matrix answer; non-finite values dropped."""
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise PrometheusError(f"Prometheus {what} answer is not a matrix")
    out: Series = []
    try:
        for item in data.get("result") or []:
            labels = {str(k): str(v) for k, v in item["metric"].items()}
            points = [
                (float(t), v)
                for t, raw in item["values"]
                if (v := promql.sample_value([t, raw])) is not None
            ]
            out.append((labels, points))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PrometheusError(f"Prometheus {what} answer: {exc}") from None
    return out
