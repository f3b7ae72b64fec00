"""NVIDIA Dynamo's frontend: the busy thresholds of each model it serves.

``GET /busy_threshold`` lists every model that has a worker monitor with its three thresholds;
``POST /busy_threshold`` with ``{"model": ..., <threshold>: value}`` sets the ones named and
answers the model's thresholds after (lib/llm/src/http/service/busy_threshold.rs; checked
against ai-dynamo 1.6.1 from PyPI). A worker is busy, and new requests are refused, when it
passes any threshold that is set; a model whose workers are all busy refuses requests.

The frontend validates: the decode-blocks threshold is a fraction in [0, 1], the prefill
token count is an unsigned integer, the fraction of ``max_num_batched_tokens`` is finite and
at least 0. A threshold cannot be unset through the API (a null in the body means "leave it"),
so none is nullable here, though one never set reads as none.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwatch.adminapi import Json
from gpuwatch.control.knobs.base import Knob, KnobChange, KnobEndpoint, KnobKind
from gpuwatch.control.knobs.http import Doc, KnobHttp

PATH = "/busy_threshold"
MAX_MODELS = 1000

# name -> (kind, minimum, maximum), as the frontend validates them (the token count's ceiling,
# 2**64 - 1, is left to it: shown as a bound it would only be noise).
THRESHOLDS: dict[str, tuple[KnobKind, float | None, float | None]] = {
    "active_decode_blocks_threshold": ("float", 0.0, 1.0),
    "active_prefill_tokens_threshold": ("int", 0.0, None),
    "active_prefill_tokens_threshold_frac": ("float", 0.0, None),
}


class DynamoKnobs:
    """The busy thresholds of a Dynamo frontend at ``endpoint.url`` (its HTTP port)."""

    def __init__(self, endpoint: KnobEndpoint) -> None:
        self.endpoint = endpoint
        self._http = KnobHttp(endpoint)

    async def read(self) -> list[Knob]:
        answer = Doc(await self._http.call("GET", PATH), self._http.where("GET", PATH))
        rows = answer.get("thresholds").array()
        if len(rows) > MAX_MODELS:
            raise answer.fail(f"{len(rows)} models, over {MAX_MODELS}")
        knobs: list[Knob] = []
        for row in rows:
            model = row.get("model").text()
            for name, (kind, low, high) in THRESHOLDS.items():
                field = row.get(name)
                value: int | float | None = None
                if field.present:
                    value = field.integer() if kind == "int" else field.number()
                knobs.append(Knob("dynamo", model, name, value, kind, low, high))
        return knobs

    async def write(self, changes: Sequence[KnobChange]) -> None:
        # One POST per model, with every threshold of it that changes: the frontend leaves the
        # ones the body does not name as they are.
        bodies: dict[str, dict[str, Json]] = {}
        for change in changes:
            body = bodies.setdefault(change.knob.target, {"model": change.knob.target})
            value = change.value
            if THRESHOLDS[change.knob.name][0] == "float" and isinstance(value, int):
                value = float(value)
            body[change.knob.name] = value
        for body in bodies.values():
            await self._http.call("POST", PATH, body=body)

    async def close(self) -> None:
        await self._http.close()
