"""``gpuwatch snapshot`` as a user runs it: a real process, real HTTP, exit codes, JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web

from tests.conftest import FIXTURES, fixture_text
from tests.functional.servers import ThreadedServer
from tests.helpers import refusing_port

SGLANG = fixture_text("sglang-2.prom")


async def sglang(_: web.Request) -> web.Response:
    return web.Response(text=SGLANG)


@pytest.fixture(scope="module")
def server():
    with ThreadedServer({"/metrics": sglang}) as srv:
        yield srv


def run(
    *args: str, stdin: bytes | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        env=env,
    )


def test_json_contract_for_a_live_endpoint(server) -> None:
    proc = run("snapshot", "--no-gpu", "--json", "--metrics", server.url("/metrics"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["schema"] == 1 and data["nvml_error"] is None and data["gpus"] == []
    assert data["errors"] == []
    for key in ("cpu_percent", "memory_total_bytes", "memory_used_bytes", "load_1m"):
        assert key in data["host"]
    assert data["host"]["memory_total_bytes"] > 0
    [engine] = data["engines"]
    assert engine["source"] == server.url("/metrics")
    assert engine["dialect"] == "sglang" and engine["model"] == "facebook/opt-125m"
    assert (engine["running"], engine["waiting"], engine["kv_cache_usage"]) == (0, 0, 0.25)
    assert engine["prefix_cache_hit_rate"] == 0.2
    assert engine["generation_tokens_total"] == 32 and engine["prompt_tokens_total"] == 5
    assert engine["preemptions_total"] is None
    ttft = engine["latency"]["ttft"]
    assert ttft["count"] == 1 and ttft["sum"] == 0.02
    # One observation in (0, 0.1]: p50 = 0.05, p99 = 0.099 (interpolated from buckets).
    assert ttft["p50"] == pytest.approx(0.05) and ttft["p99"] == pytest.approx(0.099)
    assert set(engine["latency"]) == {"ttft", "itl", "e2e", "queue"}
    assert engine["latency_window"] == "since the server started"  # says its window
    # The endpoint listens on this machine: its serving process (this test's server) is found.
    assert engine["process"]["pid"] > 0


def test_a_failed_source_exits_1_and_says_why(server) -> None:
    with refusing_port() as port:
        dead = f"http://127.0.0.1:{port}/metrics"
        proc = run(
            "snapshot", "--no-gpu", "--json", "--metrics", server.url("/metrics"), "--metrics", dead
        )
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert len(data["engines"]) == 1  # the good one still reports
    assert data["errors"] == [
        {"source": dead, "error": f"connection refused ({dead.split('/')[2]})"}
    ]
    text = run("snapshot", "--no-gpu", "--metrics", dead)
    assert text.returncode == 1
    assert f"error: {dead}: connection refused" in text.stdout.decode()
    assert b"Traceback" not in text.stderr


def test_files_and_stdin() -> None:
    vllm = FIXTURES / "vllm-3.prom"
    proc = run(
        "snapshot",
        "--no-gpu",
        "--json",
        "--metrics-file",
        str(vllm),
        "--metrics-file",
        "-",
        stdin=(FIXTURES / "llamacpp-3.prom").read_bytes(),
    )
    assert proc.returncode == 0, proc.stderr
    engines = {e["source"]: e for e in json.loads(proc.stdout)["engines"]}
    assert engines[str(vllm)]["generation_tokens_total"] == 600
    assert engines["stdin"]["dialect"] == "llamacpp" and engines["stdin"]["waiting"] == 4


def test_missing_file_is_a_source_error() -> None:
    proc = run("snapshot", "--no-gpu", "--json", "--metrics-file", "/nonexistent.prom")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["errors"] == [
        {"source": "/nonexistent.prom", "error": "cannot read: No such file or directory"}
    ]


def test_without_a_gpu_nvml_error_is_reported(server) -> None:
    proc = run("snapshot", "--json", "--metrics", server.url("/metrics"))
    data = json.loads(proc.stdout)
    if data["nvml_error"] is None:
        pytest.skip("this machine has NVML")
    assert data["nvml_error"].startswith("NVML unavailable: ")
    assert proc.returncode == 1  # a source the user asked for (the GPUs) failed
    assert len(data["engines"]) == 1  # everything else still works


@pytest.mark.parametrize(
    "args",
    [["snapshot", "--timeout", "abc"], ["snapshot", "--max-bytes", "-1"], ["snapshot", "--bogus"]],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    assert b"usage:" in proc.stderr


def test_config_file_is_used_and_bad_config_exits_2(server, tmp_path: Path) -> None:
    cfg = tmp_path / "gpuwatch" / "config.toml"
    cfg.parent.mkdir()
    cfg.write_text(f'metrics = ["{server.url("/metrics")}"]\nno_gpu = true\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = run("snapshot", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["engines"][0]["dialect"] == "sglang"
    cfg.write_text("[scrape]\ntimeout = 3\n")
    proc = run("snapshot", "--json", env=env)
    assert proc.returncode == 2
    assert (
        proc.stderr.decode().strip()
        == f"gpuwatch snapshot: config error: {cfg}: unknown key 'scrape.timeout'"
    )


def test_help_lists_every_subcommand_and_version() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    assert b"snapshot" in proc.stdout
    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith(b"gpuwatch ")
