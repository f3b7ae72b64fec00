"""`gpuwatch --help`, `gpuwatch snapshot` and `gpuwatch watch --count 1` load only what they use:
neither Textual nor aiohttp nor plotext (nor for `--help` httpx, rich or prometheus_client; nor
rich for `snapshot`). Each runs as the console script does, in a fresh interpreter, and reports
the modules it loaded. The OpenTelemetry SDK loads only where export is on: not for these, nor
for a gate and a simulator serving without an endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from gpuwatch.cli.main import COMMANDS, main
from tests.functional.servers import ThreadedServer

FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"
ROOT = Path(__file__).resolve().parent.parent.parent

# `python -m gpuwatch ARGS`, then the names of the modules loaded into the file $MODULES_OUT (a
# None entry in sys.modules is an import blocked on purpose, not a module: cli/main.py's
# httpx._main).
RUNNER = """
import atexit, json, os, runpy, sys
out = os.environ["MODULES_OUT"]
loaded = lambda: sorted(name for name, module in sys.modules.items() if module is not None)
atexit.register(lambda: open(out, "w").write(json.dumps(loaded())))
sys.argv = ["gpuwatch", *sys.argv[1:]]
runpy.run_module("gpuwatch", run_name="__main__", alter_sys=True)
"""

WIDGETS_AND_SERVERS = {"textual", "aiohttp", "plotext"}
CLIENTS_AND_RENDERING = {"httpx", "rich", "prometheus_client", "pynvml", "psutil"}
EXPORT = {"opentelemetry", "google"}  # the SDK, and protobuf under it


def run_gpuwatch(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "MODULES_OUT": str(out), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    return proc, set(json.loads(out.read_text()))


def tops(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_help_loads_no_ui_server_or_client(tmp_path: Path) -> None:
    proc, modules = run_gpuwatch(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "snapshot" in proc.stdout and "usage: gpuwatch" in proc.stdout
    assert "gpuwatch.cli.main" in modules  # the check sees what ran
    assert not tops(modules) & (WIDGETS_AND_SERVERS | CLIENTS_AND_RENDERING | EXPORT)
    # No subcommand's module either: each is imported only when it runs.
    assert not {m for m in modules if m.startswith("gpuwatch.cli.")} - {
        "gpuwatch.cli.main",
        "gpuwatch.cli.common",
    }


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """A real /metrics endpoint on 127.0.0.1 serving a vLLM page."""
    page = (FIXTURES / "vllm-1.prom").read_text()

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=page)

    with ThreadedServer({"/metrics": metrics}) as server:
        yield server.url("/metrics")


@pytest.mark.parametrize("form", [["--metrics-file"], ["--metrics-file", "--json"], ["--metrics"]])
def test_snapshot_loads_no_ui_server_nor_table_library(
    tmp_path: Path, endpoint: str, form: list[str]
) -> None:
    source = endpoint if form[0] == "--metrics" else str(FIXTURES / "vllm-1.prom")
    proc, modules = run_gpuwatch(tmp_path, "snapshot", "--no-gpu", form[0], source, *form[1:])
    assert proc.returncode == 0, proc.stderr
    assert "vllm" in proc.stdout.lower()
    # It really read and parsed the page: the scraper and its reader were loaded.
    assert {"gpuwatch.snapshot", "gpuwatch.sources.scrape", "gpuwatch.sources.promtext"} <= modules
    # Nor rich: the table is plain text (a fifth of a big page's snapshot went to rich), nor
    # NVML for --no-gpu, nor httpx's own command line (click).
    assert not tops(modules) & (WIDGETS_AND_SERVERS | EXPORT | {"rich", "pynvml", "click"})


def test_watch_once_loads_no_ui_nor_server(tmp_path: Path, endpoint: str) -> None:
    """`watch --count 1`, as a cron check runs it, against a real endpoint."""
    args = ["watch", "--no-gpu", "--metrics", endpoint, "--count", "1", "--interval", "0.2"]
    proc, modules = run_gpuwatch(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    assert "vllm" in proc.stdout.lower()
    assert {"gpuwatch.watch", "gpuwatch.sources.scrape"} <= modules
    assert not tops(modules) & (WIDGETS_AND_SERVERS | EXPORT | {"click"})


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_in_the_table_registers_its_arguments(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table in cli/main.py names a module that registers the command's own options."""
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: gpuwatch {command} ")
    # The module's register ran: its description follows the usage.
    description = out.split("\n\n")[1]
    assert not description.startswith(("options:", "positional arguments:")), out


# A simulator and a gate in front of it, export off, one chat request through both; then the
# names in sys.modules.
SERVING = """
import asyncio, json, sys, tempfile
from pathlib import Path
import aiohttp
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim

async def main() -> int:
    node, sim = await start_sim(get_profile("rtx4090-llama3-8b-awq"), time_scale=50.0)
    state = Path(tempfile.mkdtemp()) / "state.json"
    _, gate = await start_gate(sim.url, GateConfig(DEFAULT_LANES), state_file=state)
    body = {"model": node.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{gate.url}/v1/chat/completions", json=body) as r:
            status = r.status
            await r.read()
    await gate.close()
    await sim.close()
    return status

status = asyncio.run(main())
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def test_gate_and_sim_without_an_endpoint_never_load_the_sdk() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", SERVING], capture_output=True, text=True, env=env, cwd=ROOT,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["status"] == 200  # a request really went through the gate to the sim
    modules = set(report["modules"])
    assert {"gpuwatch.gate.otel", "gpuwatch.sim.tracing", "gpuwatch.otlp"} <= modules
    assert not tops(modules) & EXPORT
