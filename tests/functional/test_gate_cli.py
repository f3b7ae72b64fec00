"""``gpuwatch gate`` and ``gpuwatch limits`` as processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def gw(
    *args: str, env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    token = tmp_path / "token"
    token.write_text("tok-123\n")
    state = tmp_path / "state.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "gate", "--upstream", "http://127.0.0.1:9",
         "--listen", "127.0.0.1:0", "--state-file", str(state), "--admin-token-file", str(token)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    assert line.startswith("gpuwatch gate: http://127.0.0.1:"), proc.stderr.read()
    url = line.split()[2]
    try:
        yield url, token, state
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_limits_get_set_pause_resume_audit(gate: tuple[str, Path, Path]) -> None:
    url, token, state = gate
    common = ["--admin", url, "--admin-token-file", str(token)]
    out = gw("limits", "get", *common)
    assert out.returncode == 0, out.stderr
    assert "version 1  paused false" in out.stdout and "chat" in out.stdout
    out = gw("limits", "set", "chat.max_inflight=4", "chat.max_output_tokens=512", *common)
    assert out.returncode == 0, out.stderr
    limits = json.loads(gw("limits", "get", "--json", *common).stdout)
    assert limits["version"] == 2
    assert (
        limits["lanes"]["chat"]["max_inflight"] == 4
        and limits["lanes"]["chat"]["max_output_tokens"] == 512
    )
    assert gw("limits", "set", "chat.max_output_tokens=none", *common).returncode == 0
    assert gw("limits", "pause", *common).returncode == 0
    assert json.loads(gw("limits", "get", "--json", *common).stdout)["paused"] is True
    assert gw("limits", "resume", *common).returncode == 0
    audit = json.loads(gw("limits", "audit", "--limit", "2", *common).stdout)
    assert [e["change"] for e in audit] == [{"paused": False}, {"paused": True}]
    assert "@" in audit[0]["actor"]  # user@host of the operator
    persisted = json.loads(state.read_text())
    assert persisted["limits"]["version"] == 5


def test_refusals_exit_1_with_the_servers_reason(gate: tuple[str, Path, Path]) -> None:
    url, token, _ = gate
    common = ["--admin", url, "--admin-token-file", str(token)]
    out = gw("limits", "set", "chat.max_inflight=-2", *common)
    assert out.returncode == 1
    assert "HTTP 400: lanes.chat.max_inflight: must be >= 0, got -2" in out.stderr
    out = gw("limits", "set", "chat.max_inflight=3", "--if-match", "99", *common)
    assert out.returncode == 1 and "HTTP 409: limits changed by" in out.stderr
    out = gw("limits", "get", "--admin", url)  # no token
    assert out.returncode == 1 and "HTTP 401" in out.stderr
    env = {**os.environ, "GPUWATCH_ADMIN_TOKEN": "tok-123"}
    assert gw("limits", "get", "--admin", url, env=env).returncode == 0


def test_read_only_refuses_and_sends_nothing(gate: tuple[str, Path, Path]) -> None:
    url, token, state = gate
    before = state.read_text()
    out = gw(
        "limits",
        "set",
        "chat.max_inflight=1",
        "--read-only",
        "--admin",
        url,
        "--admin-token-file",
        str(token),
    )
    assert out.returncode == 1 and "refused: read-only mode" in out.stderr
    assert state.read_text() == before


def test_usage_errors() -> None:
    assert gw("limits", "set", "chat=3", "--admin", "http://127.0.0.1:9").returncode == 2
    assert gw("limits", "set", "--admin", "http://127.0.0.1:9").returncode == 2
    out = gw("limits", "get", "--admin", "http://127.0.0.1:9")
    assert out.returncode == 1 and "unreachable" in out.stderr


def test_gate_refuses_non_loopback_without_token(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GPUWATCH_ADMIN_TOKEN"}
    out = gw(
        "gate",
        "--upstream",
        "http://127.0.0.1:9",
        "--listen",
        "0.0.0.0:0",
        "--state-file",
        str(tmp_path / "s"),
        env=env,
    )
    assert out.returncode == 2
    assert "refusing to listen on 0.0.0.0 without an admin token" in out.stderr


def test_gate_refuses_corrupt_state_file(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text("{oops")
    out = gw(
        "gate",
        "--upstream",
        "http://127.0.0.1:9",
        "--listen",
        "127.0.0.1:0",
        "--state-file",
        str(state),
    )
    assert out.returncode == 1
    assert f"state file {state} is corrupt" in out.stderr and "never reset silently" in out.stderr
    assert state.read_text() == "{oops"


def test_gate_config_errors_name_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "gate.toml"
    cfg.write_text("[lanes.chat]\nmax_inflight = -1\n")
    out = gw(
        "gate", "--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:0", "--config", str(cfg)
    )
    assert out.returncode == 2
    assert f"{cfg}: key 'lanes.chat.max_inflight' must be >= 0" in out.stderr
    cfg.write_text("[lanes.batch]\nmax_inflight = 2\n")
    out = gw(
        "gate", "--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:0", "--config", str(cfg)
    )
    assert out.returncode == 2 and "new lane 'lanes.batch' needs 'prefixes'" in out.stderr


def test_limits_set_image_and_embedding_caps(gate: tuple[str, Path, Path]) -> None:
    """The issue's own command line: ``gpuwatch limits set image.max_steps=30``."""
    url, token, _ = gate
    common = ["--admin", url, "--admin-token-file", str(token)]
    out = gw("limits", "set", "image.max_steps=30", "image.media_policy=reject", *common)
    assert out.returncode == 0, out.stderr
    assert "max_steps 30  (reject)" in out.stdout
    limits = json.loads(gw("limits", "get", "--json", *common).stdout)
    assert limits["lanes"]["image"]["max_steps"] == 30
    out = gw("limits", "set", "embed.max_inputs=0", *common)
    assert out.returncode == 1 and "lanes.embed.max_inputs: must be >= 1" in out.stderr


def test_limits_set_a_tenants_limits(gate: tuple[str, Path, Path]) -> None:
    url, token, _ = gate
    common = ["--admin", url, "--admin-token-file", str(token)]
    out = gw("limits", "set", "tenants.team.a.max_inflight=2", "tenants.bob.paused=true", *common)
    assert out.returncode == 0, out.stderr
    assert "tenant team.a: max_inflight 2" in out.stdout and "tenant bob: paused" in out.stdout
    out = gw("limits", "set", "tenants.bob=none", *common)
    assert out.returncode == 0, out.stderr
    limits = json.loads(gw("limits", "get", "--json", *common).stdout)
    assert limits["tenants"] == {"team.a": {"paused": False, "max_inflight": 2}}
    out = gw("limits", "set", "tenants.bob.colour=1", *common)
    assert out.returncode == 1 and "tenants.bob.colour" in out.stderr
