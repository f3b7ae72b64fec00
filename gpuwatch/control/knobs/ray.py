"""Ray Serve's own knobs, per deployment, through the dashboard's Serve REST API (port 8265).

``GET /api/serve/applications/`` answers every application (Ray's ServeInstanceDetails): each
deployment's ``deployment_config`` as in force and, for an application deployed from a config,
``deployed_app_config``, the config as submitted (only what it sets). Knobs per deployment:
``max_ongoing_requests``, ``max_queued_requests`` (-1: no limit), and ``num_replicas``, or, when
the deployment autoscales, its ``min_replicas`` / ``max_replicas``. A value the submitted config
sets is read from there (Ray takes a PUT at once and applies it a control loop later), else the
one in force.

A change is a ``PUT /api/serve/applications/`` of the WHOLE declarative config: Ray deletes every
config-deployed application the body leaves out. So the config is read right before, only the
changed fields of the changed deployment are set in it, and every application goes back as
read, byte for byte. Checked against ray[serve] 2.60.0 (ray/dashboard/modules/serve/
serve_head.py, ray/serve/schema.py, ray/serve/_private/application_state.py).

What it refuses, before sending: a deployment of an application deployed from Python
(``serve.run``): it has no declarative config, and a PUT naming it would take it over; an
application without a config in Ray's answer (deploying, being deleted: leaving it out would
delete it); a config whose ``runtime_env`` Ray redacted (sent back, the secrets would be lost).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpuwatch.adminapi import Json
from gpuwatch.control.knobs.base import (
    Knob,
    KnobChange,
    KnobConflict,
    KnobEndpoint,
    KnobError,
    KnobValue,
    same_value,
)
from gpuwatch.control.knobs.http import Doc, KnobHttp
from gpuwatch.fmt import clip

APPS = "/api/serve/applications/"
DECLARATIVE = "declarative"
REDACTED = "<redacted>"  # what Ray's dashboard puts for a secret when it redacts (browsers)
# (name, minimum): the deployment's own fields (Ray's DeploymentSchema bounds).
FIELDS = (("max_ongoing_requests", 1), ("max_queued_requests", -1))
AUTOSCALING = (("min_replicas", 0), ("max_replicas", 1))
AUTOSCALING_NAMES = frozenset(dict(AUTOSCALING))
APPLY_WAIT_S = 10.0  # how long a write waits for Ray's control loop to put it in force
POLL_S = 0.1


@dataclass(frozen=True)
class _Deployment:
    app: str
    name: str
    declarative: bool
    in_force: Doc  # deployment_config
    declared: dict[str, Json] | None  # its entry in deployed_app_config, if listed
    # Ray is still putting a config on its replicas (the deployment or a replica UPDATING, a
    # replica STARTING): the controller shows the new value before every replica runs with it,
    # and a replica's own limit (its semaphore) moves only when its reconfigure is done.
    settling: bool = False

    @property
    def target(self) -> str:
        return f"{self.app}/{self.name}"

    def autoscaling(self) -> Doc:
        return self.in_force.get("autoscaling_config")

    def value(self, name: str) -> int:
        """The value the config sets, else the one in force."""
        auto = name in AUTOSCALING_NAMES
        declared = self.declared or {}
        if auto:
            part = declared.get("autoscaling_config")
            declared = part if isinstance(part, dict) else {}
        set_here = declared.get(name)
        if isinstance(set_here, int) and not isinstance(set_here, bool):
            return set_here
        source = self.autoscaling() if auto else self.in_force
        return source.get(name).integer()

    def in_force_value(self, name: str) -> Json:
        source = self.autoscaling() if name in AUTOSCALING_NAMES else self.in_force
        return source.get(name).value if source.present else None

    def knobs(self) -> list[Knob]:
        fields = [(n, low) for n, low in FIELDS if self.in_force.get(n).present]
        if self.autoscaling().present:
            fields += [(n, low) for n, low in AUTOSCALING if self.autoscaling().get(n).present]
        elif self.in_force.get("num_replicas").present:
            fields.append(("num_replicas", 1))  # the autoscaler owns it when there is one
        return [
            Knob("ray", self.target, name, self.value(name), "int", minimum=low)
            for name, low in fields
        ]


def _deployments(details: Doc) -> list[_Deployment]:
    out = []
    for app_name, app in details.get("applications").items():
        config = app.get("deployed_app_config")
        declared: dict[str, dict[str, Json]] = {}
        if config.present and config.get("deployments").present:
            for entry in config.get("deployments").array():
                declared[entry.get("name").text()] = entry.object()
        declarative = app.get("source").value == DECLARATIVE and config.present
        for name, deployment in app.get("deployments").items():
            in_force = deployment.get("deployment_config")
            in_force.object()
            replicas = deployment.get("replicas")
            states = [r.get("state").value for r in replicas.array()] if replicas.present else []
            settling = deployment.get("status").value == "UPDATING" or any(
                state in ("UPDATING", "STARTING") for state in states
            )
            out.append(
                _Deployment(app_name, name, declarative, in_force, declared.get(name), settling)
            )
    return out


def knobs_of(details: Doc) -> list[Knob]:
    """Every deployment's knobs in Ray's ServeInstanceDetails; KnobError saying where it is
    not that."""
    return [k for d in _deployments(details) for k in d.knobs()]


def deploy_body(details: Doc, changes: Sequence[KnobChange]) -> dict[str, Json]:
    """The PUT that makes ``changes`` and nothing else: Ray's config as read in ``details``,
    every application in it, with only the changed fields of the changed deployments set.
    KnobError (or KnobConflict, if a knob moved since it was shown) when it cannot be made."""
    found = {d.target: d for d in _deployments(details)}
    apps: dict[str, dict[str, Json]] = {}
    for name, app in details.get("applications").items():
        config = app.get("deployed_app_config")
        if app.get("source").value != DECLARATIVE:
            continue  # deployed from Python: a PUT leaves it where it is
        if not config.present:
            raise KnobError(
                f"ray application {clip(repr(name), 80)} has no config in Ray's answer "
                "(deploying or being deleted): a PUT without it would delete it; nothing "
                "written, retry"
            )
        apps[name] = copy.deepcopy(config.object())
    if REDACTED in json.dumps(list(apps.values())):
        raise KnobError(
            "ray answered a config with redacted runtime_env values: sent back, they would "
            "replace the real ones; nothing written"
        )
    for change in changes:
        deployment = found.get(change.knob.target)
        if deployment is None:
            raise KnobError(f"{change.knob.label}: no such deployment now; nothing written")
        if not deployment.declarative:
            raise KnobError(
                f"{change.knob.label}: its application was deployed from Python (serve.run), "
                "not from a config; Ray's config API would take it over; nothing written"
            )
        now = deployment.value(change.knob.name)
        if not same_value(now, change.knob.value):
            raise KnobConflict(change.knob, change.knob.value, now)
        _set(apps[deployment.app], deployment, change.knob.name, change.value)
    body: dict[str, Json] = {}
    instance = details.object()
    for key in ("proxy_location", "http_options", "grpc_options", "target_capacity"):
        if key in instance:
            body[key] = instance[key]
    body["applications"] = list(apps.values())
    return body


def _set(app: dict[str, Json], deployment: _Deployment, name: str, value: KnobValue) -> None:
    entries = app.setdefault("deployments", [])
    if not isinstance(entries, list):
        app_name = clip(repr(deployment.app), 80)
        raise KnobError(f"ray application {app_name}: its deployments are not a list")
    entry = next(
        (e for e in entries if isinstance(e, dict) and e.get("name") == deployment.name), None
    )
    if entry is None:
        entry = {"name": deployment.name}
        entries.append(entry)
    if name not in AUTOSCALING_NAMES:
        entry[name] = value
        return
    # A config that sets no autoscaling_config gets the one in force whole, this one field
    # changed: sending only the field would reset the others to Ray's defaults.
    auto = entry.get("autoscaling_config")
    auto = copy.deepcopy(auto if isinstance(auto, dict) else deployment.autoscaling().object())
    auto[name] = value
    entry["autoscaling_config"] = auto


class RayServeKnobs:
    def __init__(self, endpoint: KnobEndpoint) -> None:
        self.endpoint = endpoint
        self._http = KnobHttp(endpoint)

    async def details(self) -> Doc:
        """Ray's ServeInstanceDetails, as it answers them now."""
        return Doc(await self._http.call("GET", APPS), self._http.where("GET", APPS))

    async def read(self) -> list[Knob]:
        return knobs_of(await self.details())

    async def write(self, changes: Sequence[KnobChange]) -> None:
        body = deploy_body(await self.details(), changes)  # the whole config, right before
        await self._http.call("PUT", APPS, body=body)
        await self._in_force(changes)

    async def _in_force(self, changes: Sequence[KnobChange]) -> None:
        """Wait (bounded) until Ray's control loop has put the values in force."""
        deadline = time.monotonic() + APPLY_WAIT_S
        while True:
            found = {d.target: d for d in _deployments(await self.details())}
            waiting = []
            for change in changes:
                d = found.get(change.knob.target)
                now = None if d is None else d.in_force_value(change.knob.name)
                if not (isinstance(now, int) and same_value(now, change.value)):
                    waiting.append(f"{change.knob.label} {clip(now, 30)}")
                elif d is not None and d.settling:
                    waiting.append(f"{change.knob.label}: replicas still being updated")
            if not waiting:
                return
            if time.monotonic() >= deadline:
                raise KnobError(
                    f"ray took the config, but after {APPLY_WAIT_S:g} s still runs "
                    + ", ".join(waiting)
                )
            await asyncio.sleep(POLL_S)

    async def close(self) -> None:
        await self._http.close()
