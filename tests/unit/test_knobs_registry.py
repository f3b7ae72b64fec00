from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuwatch.config import KnobConfig
from gpuwatch.control.knobs.base import KnobEndpoint, KnobError
from gpuwatch.control.knobs.registry import adapter_for, discover, endpoint_of, origin


def test_origin() -> None:
    assert origin("http://10.0.0.5:8000/metrics") == "http://10.0.0.5:8000"


def test_stacks_on_the_engines_port_default_to_its_origin() -> None:
    for stack in ("dynamo", "vllm", "sglang", "litellm"):
        assert discover(stack, "http://h:8000/metrics", []) == KnobEndpoint(stack, "http://h:8000")
    # Ray Serve's admin API is on the dashboard's port: only the config can say where.
    assert discover("ray", "http://h:8080/metrics", []) is None
    assert discover("tgi", "http://h:8080/metrics", []) is None


def test_a_configured_entry_for_the_engine_wins(tmp_path: Path) -> None:
    cred = tmp_path / "key"
    cred.write_text("sk-1234\n")
    cred.chmod(0o600)
    configured = [
        KnobConfig("vllm", "http://other:1", engine="http://h:9/metrics"),
        KnobConfig("litellm", "http://proxy:4000", str(cred), "http://h:8000/metrics/", 5.0),
    ]
    found = discover("vllm", "http://h:8000/metrics", configured)
    assert found == KnobEndpoint("litellm", "http://proxy:4000", "sk-1234", 5.0)


def test_the_only_unnamed_entry_of_the_stack_is_used() -> None:
    ray = KnobConfig("ray", "http://127.0.0.1:8265")
    assert discover("ray", "http://h:8080/metrics", [ray]) == KnobEndpoint(
        "ray", "http://127.0.0.1:8265"
    )
    two = [ray, KnobConfig("ray", "http://127.0.0.1:9265")]
    assert discover("ray", "http://h:8080/metrics", two) is None  # which one: not a guess


def test_a_bad_credential_file_is_one_error_naming_it(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    with pytest.raises(KnobError, match=re.escape(f"litellm credential file {empty} is empty")):
        endpoint_of(KnobConfig("litellm", "http://p:4000", str(empty)))
    with pytest.raises(KnobError, match="cannot read litellm credential file"):
        endpoint_of(KnobConfig("litellm", "http://p:4000", str(tmp_path / "nope")))


def test_an_unknown_stack_has_no_adapter() -> None:
    with pytest.raises(KnobError, match="no knob adapter for stack 'tgi'"):
        adapter_for(KnobEndpoint("tgi", "http://h:1"))
