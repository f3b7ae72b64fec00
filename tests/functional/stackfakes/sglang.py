"""A fake of SGLang's ``/get_server_info`` and ``/set_internal_state``.

Follows sgl-project/sglang python/sglang/srt/managers/scheduler_components/internal_state.py
at commit 81ee63ef0e320f93f96c050ed42a78197f21dad7 (``SchedulerInternalStateController``: the
allow-list ``pp_max_micro_batch_size``, ``speculative_accept_threshold_single``/``_acc``,
``dspark_*``; a name off it, or ``pp_max_micro_batch_size`` outside [1, max_running_requests //
pp_size], refuses the whole update with ``updated=False`` and a log line only; an accepted one
lands in the resolved server args that ``get_internal_state`` reports) and
python/sglang/srt/entrypoints/http_server.py at 9c0549b727fe222444495cea6b369697534d60f0 (the
routes: ``set_internal_state`` answers the list of per-rank flags, ``get_server_info`` the
started server args plus ``internal_states``). One data-parallel rank, no speculative decoding
unless asked, no DSpark worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.functional.stackfakes.common import StackFake, fastapi_422, json_body

ALLOWED = (
    "pp_max_micro_batch_size",
    "speculative_accept_threshold_single",
    "speculative_accept_threshold_acc",
    "dspark_force_budget_frac",
    "dspark_clear_info_records",
)


@dataclass
class SGLangFake(StackFake):
    max_running_requests: int = 64
    pp_size: int = 1
    speculative_algorithm: str | None = None
    started: dict[str, Any] = field(default_factory=dict)  # server args as started
    overrides: dict[str, Any] = field(default_factory=dict)  # set at run time
    log: list[str] = field(default_factory=list)  # the server's warnings

    def __post_init__(self) -> None:
        self.started = {
            "model_path": "fake/model",
            "max_running_requests": self.max_running_requests,
            "pp_size": self.pp_size,
            "pp_max_micro_batch_size": self.max_running_requests // self.pp_size,
            "speculative_algorithm": self.speculative_algorithm,
            "speculative_accept_threshold_single": 1.0,
            "speculative_accept_threshold_acc": 1.0,
            **self.started,
        }

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/get_server_info", self.get_server_info)
        app.router.add_post("/set_internal_state", self.set_internal_state)
        app.router.add_put("/set_internal_state", self.set_internal_state)

    def state(self) -> dict[str, Any]:
        return {
            **self.started,
            **self.overrides,
            "effective_max_running_requests_per_dp": self.max_running_requests,
            "last_gen_throughput": 0.0,
        }

    async def get_server_info(self, _: web.Request) -> web.Response:
        return web.json_response(
            {**self.started, "internal_states": [self.state()], "version": "fake"}
        )

    def _rejection(self, key: str, value: Any) -> str | None:
        if key not in ALLOWED:
            return f"Updating {key} is not supported."
        if key.startswith("dspark_"):
            return f"{key} requires a DSpark draft worker."
        if key == "pp_max_micro_batch_size":
            upper = self.max_running_requests // self.pp_size
            if value < 1 or value > upper:
                return (
                    f"Updating {key} to {value} is rejected because it is out of the valid "
                    f"range [1, {upper}]."
                )
        return None

    async def set_internal_state(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("server_args"), dict):
            return fastapi_422(["body", "server_args"], "Field required", body)
        requested: dict[str, Any] = body["server_args"]
        for key, value in requested.items():
            rejection = self._rejection(key, value)
            if rejection:
                self.log.append(rejection)
                return web.json_response([False])
        self.overrides.update(requested)
        return web.json_response([True])
