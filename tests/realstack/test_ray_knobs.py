"""Ray Serve's own knobs, changed through gpuwatch's one apply path, against a real Ray Serve
(tests/realstack/raykit.py: one cluster for the session, two applications)."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.control.guard import Guard, ReadOnlyError
from gpuwatch.control.knobs.apply import apply_changes, find, open_audit
from gpuwatch.control.knobs.base import Knob, KnobChange, KnobConflict, KnobEndpoint
from gpuwatch.control.knobs.ray import RayServeKnobs
from tests.helpers import eventually
from tests.realstack.raykit import ROOT, RayServe

# Ray Serve's gauges: requests waiting at the caller (proxy or handle), and at a replica.
QUEUED = "ray_serve_deployment_queued_queries"
PROCESSING = "ray_serve_replica_processing_queries"


def knob_of(knobs: list[Knob], target: str, name: str) -> Knob:
    return next(k for k in knobs if k.target == target and k.name == name)


def replicas(d: dict[str, Any]) -> list[str]:
    return sorted(r["replica_id"] for r in d["replicas"])


async def test_max_ongoing_requests_changes_in_ray_and_nothing_else(
    ray_serve: RayServe, tmp_path: Path
) -> None:
    ray_serve.reset()
    before = ray_serve.details()
    adapter = RayServeKnobs(KnobEndpoint("ray", ray_serve.dashboard))
    try:
        knobs = await adapter.read()
        shown = knob_of(knobs, "llm/Forward", "max_ongoing_requests")
        assert shown.value == 8
        audit = open_audit(tmp_path / "audit.jsonl")
        after = await apply_changes(adapter, [KnobChange(shown, 2)], Guard(), audit, "t@h")
    finally:
        await adapter.close()
    back = find(after, shown)
    assert back is not None and back.value == 2
    # Ray's own API: in force, and in the config as submitted.
    now = ray_serve.details()
    forward = now["applications"]["llm"]["deployments"]["Forward"]
    assert forward["deployment_config"]["max_ongoing_requests"] == 2
    (entry,) = now["applications"]["llm"]["deployed_app_config"]["deployments"]
    assert entry == {"name": "Forward", "num_replicas": 1, "max_ongoing_requests": 2}
    # A live update: the replica was not restarted.
    assert replicas(forward) == replicas(before["applications"]["llm"]["deployments"]["Forward"])
    # The other application: its config byte for byte, its deployment, its replica.
    old, new = before["applications"]["other"], now["applications"]["other"]
    assert json.dumps(new["deployed_app_config"]) == json.dumps(old["deployed_app_config"])
    assert (
        new["deployments"]["Echo"]["deployment_config"]
        == (old["deployments"]["Echo"]["deployment_config"])
    )
    assert replicas(new["deployments"]["Echo"]) == replicas(old["deployments"]["Echo"])
    (line,) = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert json.loads(line)["after"] == {"ray llm/Forward": {"max_ongoing_requests": 2}}


async def running_in_sim(client: httpx.AsyncClient, sim: str) -> float:
    r = await client.get(f"{sim}/metrics")
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            if s.name == "vllm:num_requests_running":
                return s.value
    raise AssertionError("the simulator has no vllm:num_requests_running")


async def test_the_new_limit_holds_in_ray_and_shows_in_its_metrics(
    ray_serve: RayServe, tmp_path: Path
) -> None:
    """max_ongoing_requests 8 -> 1: three requests at once reach the simulator one at a time,
    and Ray's own gauges say so (one processing at the replica, the others queued)."""
    ray_serve.reset()
    adapter = RayServeKnobs(KnobEndpoint("ray", ray_serve.dashboard))
    try:
        shown = knob_of(await adapter.read(), "llm/Forward", "max_ongoing_requests")
        audit = open_audit(tmp_path / "audit.jsonl")
        await apply_changes(adapter, [KnobChange(shown, 1)], Guard(), audit, "t@h")
    finally:
        await adapter.close()
    body = {"model": "sim-model", "prompt": "hello", "max_tokens": 120, "ignore_eos": True}
    seen: list[float] = []  # requests running in the simulator, sampled while they run
    queued: list[float] = []  # Ray's gauge of requests waiting at Ray, sampled likewise
    async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
        sends = [
            asyncio.create_task(client.post(f"{ray_serve.serve}/v1/completions", json=body))
            for _ in range(3)
        ]

        async def sampled_until_done() -> bool:
            seen.append(await running_in_sim(client, ray_serve.sim))
            queued.extend(ray_serve.metric(QUEUED, deployment="Forward", application="llm"))
            return all(s.done() for s in sends)

        await eventually(sampled_until_done, 90, message=lambda: f"not done: sim saw {seen}")
        answers = [s.result() for s in sends]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert max(seen) == 1, seen  # never two at once: the limit held
    assert max(queued) >= 1, queued  # Ray's gauge: the others waited at Ray
    processing = ray_serve.metric(PROCESSING, deployment="Forward", application="llm")
    assert processing and max(processing) <= 1, processing


async def test_a_change_behind_our_back_is_a_conflict_and_nothing_is_written(
    ray_serve: RayServe, tmp_path: Path
) -> None:
    ray_serve.reset()
    adapter = RayServeKnobs(KnobEndpoint("ray", ray_serve.dashboard))
    try:
        shown = knob_of(await adapter.read(), "llm/Forward", "max_ongoing_requests")
        # Someone else, between show and apply: the same PUT an operator's `serve deploy` sends.
        theirs = copy.deepcopy(ray_serve.config)
        theirs["applications"][0]["deployments"][0]["max_ongoing_requests"] = 6
        ray_serve.put(theirs)
        deployed = ray_serve.details()["applications"]["llm"]["last_deployed_time_s"]
        audit = open_audit(tmp_path / "audit.jsonl")
        with pytest.raises(KnobConflict, match=r"changed since it was shown \(8 -> 6\)"):
            await apply_changes(adapter, [KnobChange(shown, 2)], Guard(), audit, "t@h")
    finally:
        await adapter.close()
    llm = ray_serve.details()["applications"]["llm"]
    assert llm["last_deployed_time_s"] == deployed  # no PUT of ours reached Ray
    assert llm["deployed_app_config"]["deployments"][0]["max_ongoing_requests"] == 6
    assert not (tmp_path / "audit.jsonl").exists()


async def test_read_only_refuses_and_ray_is_not_touched(
    ray_serve: RayServe, tmp_path: Path
) -> None:
    ray_serve.reset()
    before = ray_serve.details()["applications"]
    adapter = RayServeKnobs(KnobEndpoint("ray", ray_serve.dashboard))
    try:
        shown = knob_of(await adapter.read(), "llm/Forward", "max_ongoing_requests")
        audit = open_audit(tmp_path / "audit.jsonl")
        with pytest.raises(ReadOnlyError, match="refused: read-only"):
            await apply_changes(adapter, [KnobChange(shown, 2)], Guard(True), audit, "t@h")
    finally:
        await adapter.close()
    after = ray_serve.details()["applications"]
    for app in ("llm", "other"):
        assert after[app]["last_deployed_time_s"] == before[app]["last_deployed_time_s"]
        assert after[app]["deployed_app_config"] == before[app]["deployed_app_config"]


def limits(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``gpuwatch limits ARGS`` as a user runs it, its state (the audit) and config under
    ``tmp_path``."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", "limits", *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip


def test_gpuwatch_limits_gets_sets_audits_and_refuses_read_only(
    ray_serve: RayServe, tmp_path: Path
) -> None:
    ray_serve.reset()
    ray = ("--ray", ray_serve.dashboard)
    got = limits(tmp_path, "get", *ray, "--json")
    assert got.returncode == 0, got.stderr
    shown = {(k["target"], k["name"]): k["value"] for k in json.loads(got.stdout)}
    assert shown[("llm/Forward", "max_ongoing_requests")] == 8
    assert shown[("other/Echo", "max_ongoing_requests")] == 3

    done = limits(tmp_path, "set", "llm/Forward.max_ongoing_requests=5", *ray)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ray llm/Forward max_ongoing_requests 8 -> 5"
    assert ray_serve.deployment("llm", "Forward")["deployment_config"]["max_ongoing_requests"] == 5

    refused = limits(tmp_path, "set", "llm/Forward.max_ongoing_requests=3", *ray, "--read-only")
    assert refused.returncode == 1
    assert "refused: read-only" in refused.stderr
    assert ray_serve.deployment("llm", "Forward")["deployment_config"]["max_ongoing_requests"] == 5

    audit = limits(tmp_path, "audit", *ray)
    assert audit.returncode == 0, audit.stderr
    (line,) = audit.stdout.splitlines()
    assert line.endswith("ray llm/Forward max_ongoing_requests 8 -> 5")
