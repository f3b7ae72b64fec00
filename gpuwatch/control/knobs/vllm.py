"""vLLM's OpenAI server: pausing and resuming generation, its one live admission knob.

``GET /is_paused`` answers ``{"is_paused": bool}``; ``POST /pause`` and ``POST /resume`` flip
it. The three routes exist only on a server started with ``VLLM_SERVER_DEV_MODE=1``: without
it ``/is_paused`` is a 404, and the adapter shows no knob (one log line says why, once).

A pause is sent with ``mode=keep``: requests in flight are frozen where they are and go on
after the resume. vLLM's default (``abort``) would end every one of them, and ``wait`` holds
the call until they all finish, longer than a key press can wait.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gpuwatch.control.knobs.base import Knob, KnobChange, KnobEndpoint
from gpuwatch.control.knobs.wire import AdminApi, StackRefused, shape_error

log = logging.getLogger(__name__)

STATE = "/is_paused"
TARGET = "server"
PAUSED = "paused"
NOT_FOUND = 404


class VLLMKnobs:
    """Pause / resume of a vLLM server at ``endpoint.url``."""

    def __init__(self, endpoint: KnobEndpoint) -> None:
        self.endpoint = endpoint
        self._api = AdminApi(endpoint)
        # Why the server shows no knob (its dev-mode routes are off), once found; None else.
        self.absent: str | None = None

    async def read(self) -> list[Knob]:
        try:
            body = await self._api.call("GET", STATE)
        except StackRefused as exc:
            if exc.status != NOT_FOUND:
                raise
            if self.absent is None:
                self.absent = (
                    f"{self._api.where}: no {STATE} (start vLLM with VLLM_SERVER_DEV_MODE=1 "
                    "to pause it from here): no knob"
                )
                log.warning(self.absent)
            return []
        self.absent = None
        paused = body.get("is_paused") if isinstance(body, dict) else None
        if not isinstance(paused, bool):
            raise shape_error(self._api, STATE, f"is_paused is {paused!r}")
        return [Knob("vllm", TARGET, PAUSED, paused, "bool")]

    async def write(self, changes: Sequence[KnobChange]) -> None:
        for change in changes:
            if change.value is True:
                await self._api.call("POST", "/pause", params={"mode": "keep"})
            else:
                await self._api.call("POST", "/resume")

    async def close(self) -> None:
        await self._api.close()
