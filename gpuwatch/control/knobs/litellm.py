"""LiteLLM's proxy: the rate limits of its deployments, virtual keys and teams.

Every call carries the master key as a bearer token (from the credential file, never argv;
``wire`` keeps it out of every message). What is read and written (the proxy's management
endpoints; see docs/native-knobs-stacks.md for the source they follow):

- deployments: ``GET /model/info`` lists them; a deployment stored in the proxy's database
  (``model_info.db_model``) has ``rpm``, ``tpm`` and ``max_parallel_requests`` in its
  ``litellm_params``, changed with ``PATCH /model/{id}/update``. The PATCH drops null fields,
  so a deployment's limit cannot be taken away here (not nullable); a deployment from the
  proxy's config file cannot be edited at all (the proxy refuses), so it shows no knob.
- virtual keys: ``GET /key/list?return_full_object=true`` (the first page), each with
  ``rpm_limit``, ``tpm_limit``, ``max_parallel_requests``; ``POST /key/update`` with the
  hashed token. A null there means no limit.
- teams: ``GET /team/list``, each with ``rpm_limit`` and ``tpm_limit``; ``POST /team/update``.
  A null means no limit.

The proxy checks no bounds on these integers; a negative limit makes no sense, so gpuwatch
refuses one before sending.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from gpuwatch.control.knobs.base import Knob, KnobChange, KnobEndpoint, KnobError
from gpuwatch.control.knobs.wire import AdminApi, number, shape_error

MODELS = "/model/info"
KEYS = "/key/list"
TEAMS = "/team/list"
KEY_PAGE = 100
MAX_ROWS = 5000

MODEL_LIMITS = ("rpm", "tpm", "max_parallel_requests")
KEY_LIMITS = ("rpm_limit", "tpm_limit", "max_parallel_requests")
TEAM_LIMITS = ("rpm_limit", "tpm_limit")


class LiteLLMKnobs:
    """The limits a LiteLLM proxy at ``endpoint.url`` lets its master key change."""

    def __init__(self, endpoint: KnobEndpoint) -> None:
        self.endpoint = endpoint
        self._api = AdminApi(endpoint)
        # "key:<alias>" -> the hashed token /key/update wants, as of the last read.
        self._tokens: dict[str, str] = {}

    def _rows(self, body: object, path: str, field: str | None) -> list[dict[str, object]]:
        rows = body.get(field) if field and isinstance(body, dict) else body
        if not isinstance(rows, list):
            raise shape_error(self._api, path, f"no {field or 'list'}")
        if len(rows) > MAX_ROWS:
            raise shape_error(self._api, path, f"{len(rows)} entries, over {MAX_ROWS}")
        if not all(isinstance(r, dict) for r in rows):
            raise shape_error(self._api, path, "an entry that is not an object")
        return rows

    def _limits(
        self, path: str, target: str, row: object, names: Sequence[str], nullable: bool
    ) -> list[Knob]:
        if not isinstance(row, dict):
            raise shape_error(self._api, path, f"{target}: no limits object")
        knobs = []
        for name in names:
            value = row.get(name)
            if value is not None and (not number(value) or not isinstance(value, int)):
                raise shape_error(self._api, path, f"{target} {name} is {value!r}")
            knobs.append(Knob("litellm", target, name, value, "int", 0, None, nullable))
        return knobs

    async def _models(self) -> list[Knob]:
        knobs: list[Knob] = []
        for row in self._rows(await self._api.call("GET", MODELS), MODELS, "data"):
            info = row.get("model_info")
            model_id = info.get("id") if isinstance(info, dict) else None
            if not isinstance(model_id, str) or not model_id:
                raise shape_error(self._api, MODELS, "a deployment without model_info.id")
            assert isinstance(info, dict)
            if info.get("db_model") is not True:
                continue  # from the config file: the proxy refuses to edit it
            params = row.get("litellm_params")
            knobs += self._limits(MODELS, f"model:{model_id}", params, MODEL_LIMITS, False)
        return knobs

    async def _keys(self) -> list[Knob]:
        params = {"return_full_object": "true", "page": "1", "size": str(KEY_PAGE)}
        rows = self._rows(await self._api.call("GET", KEYS, params=params), KEYS, "keys")
        aliases = [r.get("key_alias") for r in rows]
        tokens: dict[str, str] = {}
        knobs: list[Knob] = []
        for row, alias in zip(rows, aliases, strict=True):
            token = row.get("token")
            if not isinstance(token, str) or not token:
                raise shape_error(self._api, KEYS, "a key without its hashed token")
            # An alias names a key only where it is the only key with it.
            named = isinstance(alias, str) and alias and aliases.count(alias) == 1
            target = f"key:{alias if named else token}"
            tokens[target] = token
            knobs += self._limits(KEYS, target, row, KEY_LIMITS, True)
        self._tokens = tokens
        return knobs

    async def _teams(self) -> list[Knob]:
        knobs: list[Knob] = []
        for row in self._rows(await self._api.call("GET", TEAMS), TEAMS, None):
            team_id = row.get("team_id")
            if not isinstance(team_id, str) or not team_id:
                raise shape_error(self._api, TEAMS, "a team without team_id")
            knobs += self._limits(TEAMS, f"team:{team_id}", row, TEAM_LIMITS, True)
        return knobs

    async def read(self) -> list[Knob]:
        return [*await self._models(), *await self._keys(), *await self._teams()]

    async def write(self, changes: Sequence[KnobChange]) -> None:
        # One call per deployment, key or team, with every limit of it that changes.
        grouped: dict[str, dict[str, object]] = {}
        for change in changes:
            grouped.setdefault(change.knob.target, {})[change.knob.name] = change.value
        for target, values in grouped.items():
            kind, _, name = target.partition(":")
            if kind == "model":
                path = f"/model/{quote(name, safe='')}/update"
                await self._api.call("PATCH", path, {"litellm_params": values})
            elif kind == "key":
                token = self._tokens.get(target)
                if token is None:
                    raise KnobError(f"{self._api.where}: {target}: not among the keys read")
                await self._api.call("POST", "/key/update", {"key": token, **values})
            elif kind == "team":
                await self._api.call("POST", "/team/update", {"team_id": name, **values})
            else:
                raise KnobError(f"{self._api.where}: {target}: not a LiteLLM knob target")

    async def close(self) -> None:
        await self._api.close()
