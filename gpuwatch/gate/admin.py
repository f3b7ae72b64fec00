"""The admin plane, mounted at ``/admin``: limits (GET, PATCH), status and the audit trail.

Every route sits behind one middleware, ``bearer_auth``: with a token configured, a request
without ``Authorization: Bearer <token>`` gets a 401 naming the scheme, before any handler
runs. The change itself (If-Match, audit entry, persist or roll back) is ``GateState.change``.
"""

from __future__ import annotations

import hmac
import time
import unicodedata
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from itertools import islice

from aiohttp import web
from aiohttp.typedefs import Middleware

from gpuwatch.adminapi import ConflictBody, GateStatus, JsonObject, LaneStatus, QueueWait
from gpuwatch.fmt import clip
from gpuwatch.gate import deadline
from gpuwatch.gate.adaptive_loop import AdaptiveLoop
from gpuwatch.gate.admission import AdmissionLane
from gpuwatch.gate.audit import KEEP
from gpuwatch.gate.body import BodyRefused, read_body
from gpuwatch.gate.classes import Fairness
from gpuwatch.gate.errors import MESSAGE_MAX, openai_error
from gpuwatch.gate.latency import LaneLatency, LaneReport
from gpuwatch.gate.limits import Limits, LimitsError
from gpuwatch.gate.stallwatch import StallWatch
from gpuwatch.gate.state import Conflict, GateState, SaveError, etag
from gpuwatch.gate.tenantstatus import lane_status
from gpuwatch.safejson import JSONError, loads_bounded

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PATCH_MAX_BYTES = 64 * 1024
ACTOR_MAX = 128
ACTOR_HEADER = "X-Gpuwatch-Actor"
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="gpuwatch-admin"'}


def _token_matches(header: str | None, token: bytes) -> bool:
    if header is None:
        return False
    scheme, _, given = header.partition(" ")
    try:
        # aiohttp keeps undecodable header bytes as surrogates: give back the bytes sent.
        sent = given.strip().encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return scheme.lower() == "bearer" and hmac.compare_digest(sent, token)


def bearer_auth(token: bytes | None) -> Middleware:
    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is not None and not _token_matches(request.headers.get("Authorization"), token):
            return openai_error(
                "missing or wrong admin token (Authorization: Bearer ...)",
                401,
                "authentication_error",
                headers=_CHALLENGE,
            )
        return await handler(request)

    return auth


def check_actor(actor: str) -> str | None:
    """Why an actor name is refused, or None. It is shown on terminals: no control or
    formatting characters (bidi overrides among them), and a bounded length."""
    if len(actor) > ACTOR_MAX:
        return f"must be at most {ACTOR_MAX} characters"
    for ch in actor:
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            return f"must not contain U+{ord(ch):04X} (a control or formatting character)"
    return None


def _seconds_param(request: web.Request, key: str) -> float | None:
    text = request.query.get(key)
    if text is None or text == "":
        return None
    try:
        value = float(text[:32])
    except ValueError:
        raise ValueError(f"{key} must be a number of seconds") from None
    if not (0 < value < 1e6):
        raise ValueError(f"{key} must be above 0 and under 1e6 seconds")
    return value


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _queue_wait(lane: AdmissionLane) -> QueueWait:
    return QueueWait(
        budget_s=_rounded(lane.wait_budget()),
        source=deadline.source(lane.limits, lane.slo_ttft_s),
        prefill_s=_rounded(lane.times.prefill_s(lane.clock())),
        drain_per_s=_rounded(lane.drain_per_s()),
        prefilling=lane.prefilling,
        prefill_cap=lane.prefill_cap(),
    )


class Admin:
    def __init__(
        self,
        state: GateState,
        lanes: Mapping[str, AdmissionLane],
        body_timeout_s: float,
        latency: Mapping[str, LaneLatency],
        fairness: Fairness,
    ) -> None:
        self.state = state
        self.lanes = lanes
        self.body_timeout_s = body_timeout_s
        self.latency = latency
        self.fairness = fairness
        # Set by the gate: the effective limits beside the configured ones.
        self.adaptive: AdaptiveLoop | None = None
        # Set by the gate: a stalled upstream and the lanes it sheds.
        self.stall: StallWatch | None = None

    def _limits_json(self, limits: Limits) -> JsonObject:
        """The limits document: the configured limits (what PATCH changes, versioned) and,
        apart, ``effective``: the limits in force (the controller's on an adaptive lane)."""
        if self.adaptive is not None:
            limits = replace(limits, effective=self.adaptive.effective())
        return limits.to_json()

    def app(self, token: bytes | None) -> web.Application:
        app = web.Application(middlewares=[bearer_auth(token)], client_max_size=PATCH_MAX_BYTES)
        app.router.add_get("/limits", self.get_limits)
        app.router.add_patch("/limits", self.patch_limits)
        app.router.add_get("/status", self.get_status)
        app.router.add_get("/audit", self.get_audit)
        return app

    async def get_limits(self, _: web.Request) -> web.Response:
        limits = self.state.limits
        return web.json_response(self._limits_json(limits), headers={"ETag": etag(limits.version)})

    async def patch_limits(self, request: web.Request) -> web.Response:
        actor = request.headers.get(ACTOR_HEADER) or (request.remote or "unknown")
        problem = check_actor(actor)
        if problem:
            return openai_error(
                f"{ACTOR_HEADER} {problem}", 400, "invalid_request_error", param=ACTOR_HEADER
            )
        try:
            raw = await read_body(request, PATCH_MAX_BYTES, self.body_timeout_s)
            patch = loads_bounded(raw)
        except BodyRefused as exc:
            response = openai_error(str(exc), exc.status, "invalid_request_error")
            response.force_close()
            return response
        except JSONError as exc:
            return openai_error(f"body is not valid JSON: {exc}", 400, "invalid_request_error")
        try:
            after = await self.state.change(patch, actor, request.headers.get("If-Match"))
        except Conflict as exc:
            # An actor saved by an older gate may hold anything: escaped for display.
            body = ConflictBody(
                clip(str(exc), MESSAGE_MAX), exc.actor, exc.limits.version, exc.limits
            )
            return web.json_response(
                body.to_json(), status=409, headers={"ETag": etag(exc.limits.version)}
            )
        except LimitsError as exc:
            return openai_error(str(exc), 400, "invalid_request_error", exc.field)
        except SaveError as exc:
            return openai_error(str(exc), 500, "internal_error")
        return web.json_response(self._limits_json(after), headers={"ETag": etag(after.version)})

    async def get_status(self, request: web.Request) -> web.Response:
        """Live admission state, and what users felt: latency over 1 m and 5 m (exact, or
        within the ``rel_error`` each window states), and goodput against
        ``?ttft_s=&itl_s=`` (the caller's SLO; unset bounds are not judged)."""
        try:
            slo = {key: _seconds_param(request, key) for key in ("ttft_s", "itl_s")}
        except ValueError as exc:
            return openai_error(str(exc), 400, "invalid_request_error", str(exc).split()[0])
        # From each window's running sums (LaneLatency.report): about a millisecond a lane
        # whatever the rate, so on the event loop.
        felt = [self.latency[name].report(slo["ttft_s"], slo["itl_s"]) for name in self.lanes]
        now = time.monotonic()
        limits = self.state.limits
        lanes = {
            name: self._lane_status(name, lane, report, now)
            for (name, lane), report in zip(self.lanes.items(), felt, strict=True)
        }
        status = GateStatus(
            limits.version,
            limits.paused,
            lanes,
            self.stall.status() if self.stall else None,
        )
        return web.json_response(status.to_json())

    def _lane_status(
        self, name: str, lane: AdmissionLane, felt: LaneReport, now: float
    ) -> LaneStatus:
        configured = self.state.limits.lanes[name]
        shares = lane_status(lane, self.fairness)
        return LaneStatus(
            inflight=lane.inflight,
            inflight_tokens=lane.inflight_tokens,
            max_inflight_tokens=configured.max_inflight_tokens,
            queued=len(lane.queue),
            oldest_queued_s=round(lane.oldest_queued_s(now), 3),
            # The queue-wait budget in force and what it is made of (deadline.py).
            queue_wait=_queue_wait(lane),
            admitted_total=lane.admitted_total,
            rejected_total=dict(lane.rejected_total),
            latency=felt.latency,
            goodput=felt.goodput,
            classes=shares.classes,
            tenants=shares.tenants,
            tenant_count=shares.tenant_count,
            # Configured (what the operator set) apart from effective (in force: the
            # controller's on an adaptive lane). ``adaptive`` (None on a static lane):
            # bounds, target, the last decision and why, the last two minutes.
            max_inflight=configured.max_inflight,
            effective_max_inflight=lane.limits.max_inflight,
            effective_max_inflight_tokens=lane.limits.max_inflight_tokens,
            adaptive=self.adaptive.status(name) if self.adaptive else None,
            # The reason new requests are refused with while the upstream is stalled.
            shed=lane.shed[0] if lane.shed else None,
        )

    async def get_audit(self, request: web.Request) -> web.Response:
        text = request.query.get("limit", "50")
        if not (text.isascii() and text.isdigit() and len(text) <= 9):
            return openai_error(
                "limit must be a whole number", 400, "invalid_request_error", "limit"
            )
        limit = min(int(text), KEEP)
        entries = islice(self.state.log.recent, limit)
        return web.json_response({"entries": [e.to_json() for e in entries]})
