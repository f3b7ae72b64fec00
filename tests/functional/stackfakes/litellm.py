"""A fake of LiteLLM proxy's management routes for rate limits.

Written from BerriAI/litellm (never installed here: releases 1.82.7 and 1.82.8 on PyPI were
compromised, so no release is trusted as a test dependency):

- ``PATCH /model/{model_id}/update``: litellm/proxy/management_endpoints/
  model_management_endpoints.py at 56b8c1656dec7ca0d39ad9304122684e109b4209 (``patch_model``,
  ``update_db_model``): a model not in the DB but in the config is a 400 "Cannot edit
  config-based model", an unknown one a 404; ``litellm_params`` merged with ``exclude_none``
  (a null changes nothing); the answer is the updated DB row.
- ``GET /model/info``: litellm/proxy/proxy_server.py at 9344afb26bc94b9555d82a71a7bd6371c475c65b
  (``model_info_v1``): ``{"data": [deployment]}`` without ``api_key``.
- ``GET /key/list`` and ``POST /key/update``: key_management_endpoints.py at
  eb8b9912608a1d953391a1d4dba40f59953dc9e5 (``prepare_key_update_data``: ``exclude_unset``, so
  a null clears a limit); ``GET /team/list`` and ``POST /team/update``: team_endpoints.py at
  2bc560d3f95248d99f094f785542eb4487067c7b (``data.json(exclude_unset=True)``).
- the master-key check (``user_api_key_auth``): a wrong bearer is a 401 ProxyException whose
  message quotes the key it received, as releases before it abbreviated the key did.
- pydantic: a limit that is not an integer is FastAPI's 422.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.functional.stackfakes.common import Handler, StackFake, fastapi_422, json_body

MODEL_LIMITS = ("rpm", "tpm", "max_parallel_requests")
KEY_LIMITS = ("rpm_limit", "tpm_limit", "max_parallel_requests")
TEAM_LIMITS = ("rpm_limit", "tpm_limit")


def proxy_error(status: int, message: str, kind: str) -> web.Response:
    """A ``ProxyException`` as the proxy's handler answers it."""
    body = {"error": {"message": message, "type": kind, "param": "None", "code": str(status)}}
    return web.json_response(body, status=status)


def _not_int(value: object) -> bool:
    # pydantic's lax int: an integral float passes, a bool is refused here (strictness is
    # not what is tested; a non-integer is).
    if isinstance(value, bool):
        return True
    return not (isinstance(value, int) or (isinstance(value, float) and value.is_integer()))


@dataclass
class LiteLLMFake(StackFake):
    master_key: str = "sk-master-fake-0123456789"
    # id -> deployment as stored: {"model_name", "litellm_params", "model_info"}.
    deployments: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: dict[str, dict[str, Any]] = field(default_factory=dict)  # hashed token -> row
    teams: dict[str, dict[str, Any]] = field(default_factory=dict)  # team_id -> row

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/model/info", self._auth(self.model_info))
        app.router.add_patch("/model/{model_id}/update", self._auth(self.patch_model))
        app.router.add_get("/key/list", self._auth(self.key_list))
        app.router.add_post("/key/update", self._auth(self.key_update))
        app.router.add_get("/team/list", self._auth(self.team_list))
        app.router.add_post("/team/update", self._auth(self.team_update))

    def add_model(self, model_id: str, name: str, db_model: bool = True, **limits: int) -> None:
        params = {"model": f"openai/{name}", "api_key": "sk-upstream-secret", **limits}
        info = {"id": model_id, "db_model": db_model}
        self.deployments[model_id] = {
            "model_name": name,
            "litellm_params": params,
            "model_info": info,
        }

    def add_key(self, token: str, alias: str | None, **limits: int | None) -> None:
        row = {"token": token, "key_alias": alias, "team_id": None, "spend": 0.0}
        self.keys[token] = {**row, **dict.fromkeys(KEY_LIMITS), **limits}

    def add_team(self, team_id: str, **limits: int | None) -> None:
        row = {"team_id": team_id, "team_alias": team_id, "models": [], "spend": 0.0}
        self.teams[team_id] = {**row, **dict.fromkeys(TEAM_LIMITS), **limits}

    def _auth(self, handler: Handler) -> Handler:
        async def checked(request: web.Request) -> web.StreamResponse:
            given = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if given != self.master_key:
                return proxy_error(
                    401,
                    "Authentication Error, Invalid proxy server token passed. "
                    f"Received API Key = {given}, Unable to find token in cache or "
                    "`LiteLLM_VerificationTokenTable`",
                    "auth_error",
                )
            return await handler(request)

        return checked

    async def model_info(self, _: web.Request) -> web.Response:
        data = []
        for row in self.deployments.values():
            params = {k: v for k, v in row["litellm_params"].items() if k != "api_key"}
            data.append({**row, "litellm_params": params})
        return web.json_response({"data": data})

    async def patch_model(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        if not isinstance(body, dict):
            return fastapi_422(["body"], "Input should be a valid dictionary", body)
        params = body.get("litellm_params") or {}
        if not isinstance(params, dict):
            return fastapi_422(
                ["body", "litellm_params"], "Input should be a valid dictionary", params
            )
        for name in MODEL_LIMITS:
            value = params.get(name)
            if value is not None and _not_int(value):
                msg = "Input should be a valid integer"
                return fastapi_422(["body", "litellm_params", name], msg, value)
        model_id = request.match_info["model_id"]
        row = self.deployments.get(model_id)
        if row is None:
            return proxy_error(404, f"Model {model_id} not found on proxy.", "not_found_error")
        if row["model_info"].get("db_model") is not True:
            msg = "Cannot edit config-based model. Store model in DB via /model/new first."
            return proxy_error(400, msg, "validation_error")
        row["litellm_params"].update(
            {k: int(v) if k in MODEL_LIMITS else v for k, v in params.items() if v is not None}
        )
        return web.json_response({"model_id": model_id, **row})

    async def key_list(self, request: web.Request) -> web.Response:
        full = request.query.get("return_full_object") == "true"
        size = int(request.query.get("size", "10"))
        rows = list(self.keys.values())[:size]
        keys: list[Any] = rows if full else [r["token"] for r in rows]
        pages = max(1, -(-len(self.keys) // size))
        return web.json_response(
            {"keys": keys, "total_count": len(self.keys), "current_page": 1, "total_pages": pages}
        )

    async def _update(
        self,
        request: web.Request,
        id_field: str,
        table: dict[str, dict[str, Any]],
        names: tuple[str, ...],
    ) -> web.Response:
        body = await json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get(id_field), str):
            return fastapi_422(["body", id_field], "Field required", body)
        for name in names:
            value = body.get(name)
            if value is not None and _not_int(value):
                return fastapi_422(["body", name], "Input should be a valid integer", value)
        row = table.get(body[id_field])
        if row is None:
            what = "Key" if id_field == "key" else "Team"
            detail = {"error": f"{what} not found, passed {id_field}={body[id_field]}"}
            return web.json_response({"detail": detail}, status=404)
        # exclude_unset: a limit named with null is cleared, one not named is kept.
        row.update({k: None if v is None else int(v) for k, v in body.items() if k in names})
        return web.json_response(row)

    async def key_update(self, request: web.Request) -> web.Response:
        return await self._update(request, "key", self.keys, KEY_LIMITS)

    async def team_list(self, _: web.Request) -> web.Response:
        return web.json_response(list(self.teams.values()))

    async def team_update(self, request: web.Request) -> web.Response:
        return await self._update(request, "team_id", self.teams, TEAM_LIMITS)
