"""Record the demo as a user would (``gpuwatch demo --record``), then replay the file in
tmux: the replayed screen shows what the live one showed, the cursor keys move through time,
RO and the REPLAY clock are on screen, and the control keys are refused."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers import eventually_sync

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)"
)
CLOCK = re.compile(r"REPLAY (\d\d:\d\d:\d\d)")
LIVE_CLOCK = re.compile(r" RW\s+(\d\d:\d\d:\d\d)")
EVENT = re.compile(r"(\d\d:\d\d:\d\d) ([^│|]+?)\s*(?:[│|]|$)")


def capture(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
    ).stdout


def start(session: str, pidfile: Path, args: str) -> None:
    cmd = (
        f'echo $$ > {pidfile}; until [ "$(tput cols)x$(tput lines)" = 160x48 ]; do sleep 0.05;'
        f" done; exec {sys.executable} -m gpuwatch {args}"
    )
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", cmd], check=True
    )


def keys(session: str, *names: str) -> None:
    subprocess.run(["tmux", "send-keys", "-t", session, *names], check=True)


def count(path: Path, query: str) -> int:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return int(db.execute(query).fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def events(screen: str) -> list[tuple[str, str]]:
    """The events panel's lines: (HH:MM:SS, text)."""
    tail = [line for line in screen.splitlines()[-12:] if "REPLAY" not in line]
    return [m.groups() for line in tail for m in EVENT.finditer(line)]  # type: ignore[misc]


def quit_and_wait(session: str, pidfile: Path) -> None:
    proc = psutil.Process(int(pidfile.read_text()))
    procs = [proc, *proc.children(recursive=True)]
    keys(session, "q")

    def running() -> list[int]:
        # A zombie has exited; tmux (its parent, after exec) reaps it in its own time.
        out = []
        for p in procs:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p.pid)
            except psutil.NoSuchProcess:
                continue
        return out

    eventually_sync(lambda: not running(), 20, message=lambda: f"still running: {running()}")


def test_record_the_demo_and_replay_it_in_tmux(tmp_path: Path) -> None:
    path = tmp_path / "demo.db"
    live, replay = f"gw-rec-{os.getpid()}", f"gw-replay-{os.getpid()}"
    try:
        start(live, tmp_path / "live.pid", f"demo --rate 3 --record {path}")

        def node_shown() -> str | None:
            screen = capture(live)
            ready = all(p in screen for p in ("vllm", "RTX 4090", "admission", "run "))
            return screen if ready and count(path, "SELECT COUNT(*) FROM rows") > 0 else None

        eventually_sync(node_shown, 60, message=lambda: f"no node shown:\n{capture(live)}")
        keys(live, "+")  # a limit change: its event, and the gate's audit entry, get recorded
        eventually_sync(
            lambda: count(path, "SELECT COUNT(*) FROM audit") > 0,
            30,
            message="the gate's audit entry was never recorded",
        )
        shots: list[str] = []

        def next_instant() -> str | None:
            # A screen with events, drawn in a later second than the last one taken.
            screen = capture(live)
            drawn = LIVE_CLOCK.search(screen)
            if not drawn or not any(t < drawn.group(1) for t, _ in events(screen)):
                return None
            if shots and drawn.group(1) == LIVE_CLOCK.search(shots[-1]).group(1):  # type: ignore[union-attr]
                return None
            return screen

        for _ in range(3):
            shots.append(eventually_sync(next_instant, 10))
        quit_and_wait(live, tmp_path / "live.pid")

        start(replay, tmp_path / "replay.pid", f"replay {path}")
        first = eventually_sync(
            lambda: (s := capture(replay)) and CLOCK.search(s) and s,
            30,
            message=lambda: f"no replay shown:\n{capture(replay)}",
        )
        assert " RO " in first and " RW " not in first

        def clock() -> str:
            found = CLOCK.search(capture(replay))
            return found.group(1) if found else ""

        for shot in shots:
            # The live screen's last events, from before the second it was drawn in, are on
            # the replayed screen at that second.
            shown = events(shot)
            at = LIVE_CLOCK.search(shot).group(1)  # type: ignore[union-attr]
            keys(replay, ":")
            eventually_sync(lambda: "go to:" in capture(replay), 10)
            keys(replay, at, "Enter")
            eventually_sync(lambda at=at: clock() == at, 10, message=lambda: capture(replay))
            again = events(capture(replay))
            older = [e for e in shown if e[0] < at]
            assert older and all(e in again for e in older), (older, again)
        screen = capture(replay)
        assert "RTX 4090" in screen and "vllm" in screen and "chat" in screen
        # The cursor keys move the clock; a control key is refused by the guard, with why.
        before = clock()
        keys(replay, "[")
        eventually_sync(lambda: clock() != before, 10)
        keys(replay, "}")
        eventually_sync(lambda: "next event" in capture(replay) or clock() != before, 10)
        keys(replay, "+")
        eventually_sync(lambda: "read-only" in capture(replay), 10, message=lambda: capture(replay))
        quit_and_wait(replay, tmp_path / "replay.pid")
    finally:
        for session in (live, replay):
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
