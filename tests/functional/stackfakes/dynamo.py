"""A fake of NVIDIA Dynamo's frontend ``/busy_threshold`` routes.

Follows ai-dynamo/dynamo lib/llm/src/http/service/busy_threshold.rs at commit
050d71fb6db98d66f1911c31c533ad0d7010d500 (handler, request parsing and status split) and the
``LoadThresholdConfig::validate`` / ``set_load_threshold_config`` it calls (lib/llm/src/
discovery/worker_monitor.rs at e5837a4dc5e932149acb887abe8d8678148b2f4a): a set names some
thresholds and leaves the others; the decode-blocks threshold must be in [0, 1]; the frac
finite and >= 0; the prefill token count a u64 (else serde's 422); a set for a model without a
worker monitor is a 404; a read for one answers nulls. Only the frontend's HTTP side: no
workers, no admission.

The same answers were checked against the real frontend (ai-dynamo 1.6.1 with its mocker
engine, tests/functional/test_knobs_dynamo_real.py), which differs only where no adapter
looks (1.6.1 answers a non-JSON body in plain text).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from aiohttp import web

from tests.functional.stackfakes.common import StackFake, error

DECODE = "active_decode_blocks_threshold"
PREFILL = "active_prefill_tokens_threshold"
FRAC = "active_prefill_tokens_threshold_frac"
NAMES = (DECODE, PREFILL, FRAC)
U64_MAX = 2**64 - 1


def _unset() -> dict[str, float | int | None]:
    return dict.fromkeys(NAMES)


@dataclass
class DynamoFake(StackFake):
    # model -> its thresholds; a model listed here has a worker monitor (was discovered).
    models: dict[str, dict[str, float | int | None]] = field(default_factory=dict)

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/busy_threshold", self.list_thresholds)
        app.router.add_post("/busy_threshold", self.busy_threshold)

    def add(self, model: str, **thresholds: float | int) -> None:
        self.models[model] = {**_unset(), **thresholds}

    def _answer(self, model: str, config: dict[str, float | int | None]) -> dict[str, object]:
        return {"model": model, **config}

    async def list_thresholds(self, _: web.Request) -> web.Response:
        rows = [self._answer(m, c) for m, c in self.models.items()]
        return web.json_response({"thresholds": rows})

    async def busy_threshold(self, request: web.Request) -> web.Response:
        if not request.content_type.endswith("json"):
            return error(415, "Expected request with Content-Type application/json")
        try:
            body = json.loads(await request.read())
        except ValueError as exc:
            return error(400, f"Failed to parse the request body as JSON: {exc}")
        problem = _schema_problem(body)
        if problem:
            return error(422, f"Failed to parse the request body as JSON: {problem}")
        assert isinstance(body, dict)
        model: str = body["model"]
        asked = {name: body.get(name) for name in NAMES}
        problem = _invalid(asked)
        if problem:
            return error(400, problem)
        setting = any(v is not None for v in asked.values())
        config = self.models.get(model)
        if setting and config is None:
            return error(
                404, f"Model '{model}' not found. Thresholds can only be set for discovered models."
            )
        if setting and config is not None:
            # serde reads the two fractions as f64: 1 comes back as 1.0.
            config.update(
                {k: v if k == PREFILL else float(v) for k, v in asked.items() if v is not None}
            )
        return web.json_response(self._answer(model, config or _unset()))


def _schema_problem(body: object) -> str | None:
    """What serde finds wrong with the body's types (a 422), or None."""
    if not isinstance(body, dict):
        return "invalid type: expected struct BusyThresholdRequest"
    if not isinstance(body.get("model"), str):
        return "missing field `model`" if "model" not in body else "model: expected a string"
    for name in (DECODE, FRAC):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"{name}: invalid type: expected f64"
    value = body.get(PREFILL)
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= U64_MAX
    ):
        return f"{PREFILL}: invalid value: {value!r}, expected u64"
    return None


def _invalid(asked: dict[str, object]) -> str | None:
    """``LoadThresholdConfig::validate``."""
    decode = asked[DECODE]
    if isinstance(decode, (int, float)) and not (math.isfinite(decode) and 0.0 <= decode <= 1.0):
        return f"{DECODE} must be between 0.0 and 1.0, got {decode}"
    frac = asked[FRAC]
    if isinstance(frac, (int, float)) and not (math.isfinite(frac) and frac >= 0.0):
        return f"{FRAC} must be a finite value greater than or equal to 0.0, got {frac}"
    return None
