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

from gpuwatch.control.knobs.base import Knob, KnobChange, KnobEndpoint, KnobKind
from gpuwatch.control.knobs.wire import AdminApi, number, shape_error

PATH = "/busy_threshold"
MAX_MODELS = 1000
U64_MAX = float(2**64 - 1)

# name -> (kind, minimum, maximum), as the frontend validates them.
THRESHOLDS: dict[str, tuple[KnobKind, float | None, float | None]] = {
    "active_decode_blocks_threshold": ("float", 0.0, 1.0),
    "active_prefill_tokens_threshold": ("int", 0.0, U64_MAX),
    "active_prefill_tokens_threshold_frac": ("float", 0.0, None),
}


class DynamoKnobs:
    """The busy thresholds of a Dynamo frontend at ``endpoint.url`` (its HTTP port)."""

    def __init__(self, endpoint: KnobEndpoint) -> None:
        self.endpoint = endpoint
        self._api = AdminApi(endpoint)

    async def read(self) -> list[Knob]:
        body = await self._api.call("GET", PATH)
        rows = body.get("thresholds") if isinstance(body, dict) else None
        if not isinstance(rows, list):
            raise shape_error(self._api, PATH, "no thresholds list")
        if len(rows) > MAX_MODELS:
            raise shape_error(self._api, PATH, f"{len(rows)} models, over {MAX_MODELS}")
        knobs: list[Knob] = []
        for row in rows:
            model = row.get("model") if isinstance(row, dict) else None
            if not isinstance(model, str) or not model:
                raise shape_error(self._api, PATH, "an entry without a model name")
            assert isinstance(row, dict)
            for name, (kind, low, high) in THRESHOLDS.items():
                value = row.get(name)
                if value is not None and not number(value):
                    raise shape_error(self._api, PATH, f"{model} {name} is {value!r}")
                if kind == "int" and value is not None and not isinstance(value, int):
                    raise shape_error(self._api, PATH, f"{model} {name} is not an integer")
                knobs.append(Knob("dynamo", model, name, value, kind, low, high))
        return knobs

    async def write(self, changes: Sequence[KnobChange]) -> None:
        # One POST per model, with every threshold of it that changes: the frontend leaves the
        # ones the body does not name as they are.
        bodies: dict[str, dict[str, object]] = {}
        for change in changes:
            body = bodies.setdefault(change.knob.target, {"model": change.knob.target})
            value = change.value
            if THRESHOLDS[change.knob.name][0] == "float" and isinstance(value, int):
                value = float(value)
            body[change.knob.name] = value
        for body in bodies.values():
            await self._api.call("POST", PATH, body)

    async def close(self) -> None:
        await self._api.close()
