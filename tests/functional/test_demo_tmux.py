"""``gpuwatch demo`` as a user runs it: in tmux, read the screen, quit, and nothing is left."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from gpuwatch.demo import DEMO_GATE_TOML
from gpuwatch.gate.limits import DEFAULT_LANES
from tests.functional.tmuxkit import capture, keys, start, stop
from tests.helpers import eventually_sync

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)"
)


def test_demo_in_tmux_shows_the_node_and_quits_cleanly(tmp_path: Path) -> None:
    session = f"gw-demo-{os.getpid()}"
    pidfile = tmp_path / "pid"
    start(session, pidfile, "demo --rate 2")
    try:
        badges = (" OK ", " TIGHT ", " OVERLOADED ")

        def shown() -> str | None:
            screen = capture(session)
            parts = ("vllm", "RTX 4090", "admission", "run ")
            ready = all(p in screen for p in parts) and any(b in screen for b in badges)
            return screen if ready else None

        screen = eventually_sync(
            shown, 60, message=lambda: f"the demo never showed the node:\n{capture(session)}"
        )
        demo = psutil.Process(int(pidfile.read_text()))
        children = demo.children(recursive=True)
        commands = [" ".join(c.cmdline()) for c in children]
        assert any("gpuwatch sim" in c for c in commands) and any(
            "gpuwatch gate" in c for c in commands
        )
        # The node serves the mix: embeddings and images beside chat, so vLLM holds less of
        # the GPU (0.47 of it) and the SDXL and BGE weights are loaded beside it.
        assert any("--workloads embed,image" in c for c in commands), commands
        assert "chat" in screen and "image" in screen and "18.9G/24.0G" in screen
        keys(session, "q")
        gone, alive = psutil.wait_procs([demo, *children], timeout=20)
        assert not alive, f"still running after quit: {[p.pid for p in alive]}"
    finally:
        stop(session)


def test_a_closed_terminal_takes_the_demo_s_simulator_and_gate_with_it(tmp_path: Path) -> None:
    """The SSH session drops (the terminal hangs up): the demo stops what it started, so no
    simulator or gate is left running in its own session with nobody to stop it."""
    session = f"gw-demo-hup-{os.getpid()}"
    pidfile = tmp_path / "pid"
    start(session, pidfile, "demo --rate 2")
    try:
        eventually_sync(
            lambda: "admission" in capture(session), 60, message=lambda: capture(session)
        )
        demo = psutil.Process(int(pidfile.read_text()))
        children = demo.children(recursive=True)
        assert len(children) >= 2, children
    finally:
        stop(session)
    gone, alive = psutil.wait_procs([demo, *children], timeout=20)
    assert not alive, f"still running after the terminal closed: {[p.cmdline() for p in alive]}"


def _lanes() -> tuple[list[str], int]:
    """The lanes of the demo's gate (its configured ones and the gate's defaults) and its
    chat lane's in-flight limit."""
    configured = tomllib.loads(DEMO_GATE_TOML)["lanes"]
    names = list(dict.fromkeys([*configured, *(lane.name for lane in DEFAULT_LANES)]))
    return names, configured["chat"]["max_inflight"]


def test_at_80x24_every_lane_of_the_demo_s_gate_is_on_screen(tmp_path: Path) -> None:
    """The smallest terminal over SSH: the engines' lines (the gate's own first) give way, so
    every lane row the control keys act on is on screen, none below the fold; ``-`` on the
    selected lane (chat) shows its new limit in its row, every lane still on screen."""
    session = f"gw-demo-80-{os.getpid()}"
    pidfile = tmp_path / "pid"
    start(session, pidfile, "demo --rate 2", size=(80, 24))
    lanes, chat_limit = _lanes()
    assert len(lanes) >= 3, lanes
    # A lane's row: its name, then in-flight/limit and queued/limit.
    row = re.compile(rf"^\s*({'|'.join(map(re.escape, lanes))})\s+\d+/(\d+)\s+\d+/\d+", re.M)

    def every_lane(chat: int) -> Callable[[], str | None]:
        def shown() -> str | None:
            screen = capture(session)
            rows = dict(row.findall(screen))
            return screen if set(rows) == set(lanes) and rows["chat"] == str(chat) else None

        return shown

    try:
        screen = eventually_sync(
            every_lane(chat_limit),
            60,
            message=lambda: f"not every lane of {lanes} on screen:\n{capture(session)}",
        )
        assert "vllm" in screen and "admission" in screen
        keys(session, "-")
        eventually_sync(
            every_lane(chat_limit - 1),
            30,
            message=lambda: f"the new limit or a lane not on screen:\n{capture(session)}",
        )
        keys(session, "q")
    finally:
        stop(session)
