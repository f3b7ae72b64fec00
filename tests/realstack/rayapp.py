"""The Ray Serve applications the knob tests deploy (imported by Ray's workers, by the import
paths in ``raykit.py``'s config): ``forward`` passes OpenAI-style requests on to a ``gpuwatch
sim`` (an LLM deployment as operators write one, minus the GPU), ``echo`` is a second,
unrelated application that a change to the first must leave alone."""

from __future__ import annotations

from typing import Any

import httpx
from ray import serve
from ray.serve import Application
from starlette.requests import Request
from starlette.responses import Response


class Forward:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.client = httpx.AsyncClient(timeout=60.0, trust_env=False)

    async def __call__(self, request: Request) -> Response:
        answer = await self.client.post(
            f"{self.upstream}{request.url.path}",
            content=await request.body(),
            headers={"content-type": "application/json"},
        )
        return Response(
            answer.content,
            status_code=answer.status_code,
            media_type=answer.headers.get("content-type"),
        )


class Echo:
    def __init__(self) -> None:
        self.config: dict[str, Any] = {}

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Takes the ``user_config`` (the other application's config has one)."""
        self.config = config

    async def __call__(self, request: Request) -> dict[str, Any]:
        return {"path": request.url.path, "config": self.config}


# Applied here rather than as decorators, so the classes keep their types for mypy. A tenth of
# a CPU each: a CI runner's 2 CPUs hold every replica the tests ask for.
FORWARD = serve.deployment(max_ongoing_requests=8, ray_actor_options={"num_cpus": 0.1})(Forward)
ECHO = serve.deployment(max_ongoing_requests=5, ray_actor_options={"num_cpus": 0.1})(Echo)


def forward(args: dict[str, str]) -> Application:
    """The builder Ray calls with the application's ``args``: ``{"upstream": SIM_URL}``."""
    return FORWARD.bind(args["upstream"])


def echo(args: dict[str, str]) -> Application:
    return ECHO.bind()
