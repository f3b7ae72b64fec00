"""The Ray Serve adapter's reading of Ray's answer and the PUT it builds, on an answer shaped as
ray[serve] 2.60.0 gives it (tests/fixtures/ray/serve-applications.json: recorded from the test
cluster, trimmed, with an autoscaling application and one deployed from Python added). Against
a real Ray: tests/realstack/test_ray_knobs.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.adminapi import Json
from gpuwatch.control.knobs.base import Knob, KnobChange, KnobConflict, KnobError
from gpuwatch.control.knobs.http import Doc
from gpuwatch.control.knobs.ray import deploy_body, knobs_of

ANSWER = Path(__file__).parent.parent / "fixtures" / "ray" / "serve-applications.json"
WHERE = "ray GET http://h:8265/api/serve/applications/"


def answer() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(ANSWER.read_text())
    return loaded


def doc(data: Any) -> Doc:
    return Doc(data, WHERE)


def apps_of(body: dict[str, Json]) -> dict[str, Any]:
    """The PUT's applications by name."""
    apps: Any = body["applications"]
    return {a["name"]: a for a in apps}


def knob(knobs: list[Knob], target: str, name: str) -> Knob:
    return next(k for k in knobs if k.target == target and k.name == name)


def test_every_deployment_has_its_knobs() -> None:
    knobs = knobs_of(doc(answer()))
    assert {(k.target, k.name, k.value) for k in knobs} == {
        ("llm/Forward", "max_ongoing_requests", 8),
        ("llm/Forward", "max_queued_requests", -1),
        ("llm/Forward", "num_replicas", 1),
        ("other/Echo", "max_ongoing_requests", 3),
        ("other/Echo", "max_queued_requests", -1),
        ("other/Echo", "num_replicas", 1),
        # Autoscaling: the autoscaler owns num_replicas; its bounds are the knobs.
        ("scaled/Scaled", "max_ongoing_requests", 8),
        ("scaled/Scaled", "max_queued_requests", -1),
        ("scaled/Scaled", "min_replicas", 1),
        ("scaled/Scaled", "max_replicas", 4),
        ("python/Py", "max_ongoing_requests", 16),
        ("python/Py", "max_queued_requests", -1),
        ("python/Py", "num_replicas", 1),
    }
    k = knob(knobs, "llm/Forward", "max_ongoing_requests")
    assert (k.kind, k.minimum, k.nullable) == ("int", 1, False)
    assert knob(knobs, "llm/Forward", "max_queued_requests").minimum == -1


def test_the_submitted_config_wins_over_the_value_in_force() -> None:
    # Ray takes a PUT at once and puts it in force a control loop later: the config says what
    # was asked last.
    data = answer()
    data["applications"]["llm"]["deployed_app_config"]["deployments"][0]["max_ongoing_requests"] = 4
    assert knob(knobs_of(doc(data)), "llm/Forward", "max_ongoing_requests").value == 4


def test_the_put_carries_every_config_app_as_read_with_only_the_change() -> None:
    data = answer()
    shown = knob(knobs_of(doc(data)), "llm/Forward", "max_ongoing_requests")
    body = deploy_body(doc(data), [KnobChange(shown, 2)])
    apps = apps_of(body)
    # Every application deployed from a config, and only those (Ray keeps a serve.run one).
    assert list(apps) == ["llm", "other", "scaled"]
    for name in ("other", "scaled"):
        assert json.dumps(apps[name]) == json.dumps(
            data["applications"][name]["deployed_app_config"]
        )
    expected = copy.deepcopy(data["applications"]["llm"]["deployed_app_config"])
    expected["deployments"][0]["max_ongoing_requests"] = 2
    assert apps["llm"] == expected
    for key in ("proxy_location", "http_options", "grpc_options", "target_capacity"):
        assert body[key] == data[key]
    assert data == answer()  # the answer itself untouched


def test_a_deployment_the_config_does_not_list_is_added_by_name_only() -> None:
    data = answer()
    shown = knob(knobs_of(doc(data)), "scaled/Scaled", "max_ongoing_requests")
    body = deploy_body(doc(data), [KnobChange(shown, 3)])
    scaled = apps_of(body)["scaled"]
    assert scaled["deployments"] == [{"name": "Scaled", "max_ongoing_requests": 3}]


def test_an_autoscaling_bound_goes_with_the_rest_of_the_autoscaling_config_in_force() -> None:
    data = answer()
    shown = knob(knobs_of(doc(data)), "scaled/Scaled", "max_replicas")
    body = deploy_body(doc(data), [KnobChange(shown, 2)])
    scaled = apps_of(body)["scaled"]
    (entry,) = scaled["deployments"]
    in_force = data["applications"]["scaled"]["deployments"]["Scaled"]["deployment_config"]
    assert entry["autoscaling_config"] == {**in_force["autoscaling_config"], "max_replicas": 2}


def test_a_deployment_from_python_is_refused() -> None:
    data = answer()
    shown = knob(knobs_of(doc(data)), "python/Py", "max_ongoing_requests")
    with pytest.raises(KnobError, match=r"deployed from Python \(serve.run\).*nothing written"):
        deploy_body(doc(data), [KnobChange(shown, 2)])


def test_an_app_without_its_config_in_the_answer_is_refused_not_deleted() -> None:
    data = answer()
    shown = knob(knobs_of(doc(data)), "llm/Forward", "max_ongoing_requests")
    data["applications"]["other"]["deployed_app_config"] = None  # deploying, say
    with pytest.raises(KnobError, match=r"'other' has no config.*would delete it"):
        deploy_body(doc(data), [KnobChange(shown, 2)])


def test_a_redacted_runtime_env_is_never_sent_back() -> None:
    data = answer()
    data["applications"]["other"]["deployed_app_config"]["runtime_env"]["env_vars"]["TOKEN"] = (
        "<redacted>"
    )
    shown = knob(knobs_of(doc(data)), "llm/Forward", "max_ongoing_requests")
    with pytest.raises(KnobError, match="redacted runtime_env"):
        deploy_body(doc(data), [KnobChange(shown, 2)])


def test_a_value_moved_in_the_config_read_right_before_the_put_is_a_conflict() -> None:
    data = answer()
    shown = knob(knobs_of(doc(data)), "llm/Forward", "max_ongoing_requests")
    data["applications"]["llm"]["deployed_app_config"]["deployments"][0]["max_ongoing_requests"] = 6
    with pytest.raises(KnobConflict, match=r"\(8 -> 6\)"):
        deploy_body(doc(data), [KnobChange(shown, 2)])


def test_a_deployment_gone_is_refused() -> None:
    data = answer()
    shown = knob(knobs_of(doc(data)), "llm/Forward", "max_ongoing_requests")
    del data["applications"]["llm"]
    with pytest.raises(KnobError, match="no such deployment now"):
        deploy_body(doc(data), [KnobChange(shown, 2)])


def _broken(path: list[str | int], value: Any) -> dict[str, Any]:
    data = answer()
    node: Any = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "the answer: not an object (a list)"),
        ({"applications": []}, "applications: not an object (a list)"),
        (
            _broken(["applications", "llm", "deployments", "Forward", "deployment_config"], "x"),
            "applications.llm.deployments.Forward.deployment_config: not an object",
        ),
        (
            _broken(
                [
                    "applications",
                    "llm",
                    "deployments",
                    "Forward",
                    "deployment_config",
                    "max_queued_requests",
                ],
                "lots",
            ),
            "Forward.deployment_config.max_queued_requests: not an integer (the string 'lots')",
        ),
        (
            _broken(["applications", "llm", "deployed_app_config", "deployments"], {"a": 1}),
            "applications.llm.deployed_app_config.deployments: not a list",
        ),
        (
            _broken(["applications", "llm", "deployed_app_config", "deployments", 0, "name"], 7),
            "deployed_app_config.deployments[0].name: not a string (the number 7)",
        ),
    ],
)
def test_an_answer_that_is_not_rays_is_one_error_saying_where(data: Any, message: str) -> None:
    with pytest.raises(KnobError) as caught:
        knobs_of(doc(data))
    assert str(caught.value).startswith(WHERE + ": ")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("status", "state", "settling"),
    [
        ("HEALTHY", "RUNNING", False),
        ("UPDATING", "RUNNING", True),  # the controller has the new config, a replica not yet
        ("HEALTHY", "UPDATING", True),
        ("HEALTHY", "STARTING", True),
        ("UNHEALTHY", "RUNNING", False),  # not ours to wait for: the write reads it back as is
    ],
)
def test_a_write_waits_while_ray_puts_the_config_on_its_replicas(
    status: str, state: str, settling: bool
) -> None:
    from gpuwatch.control.knobs.ray import _deployments

    data = answer()
    forward = data["applications"]["llm"]["deployments"]["Forward"]
    forward["status"] = status
    forward["replicas"][0]["state"] = state
    found = {d.target: d for d in _deployments(doc(data))}
    assert found["llm/Forward"].settling is settling
    assert found["other/Echo"].settling is False
