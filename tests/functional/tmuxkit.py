"""Driving a real terminal: gpuwatch started in a tmux pane of 160x48, its screen read back,
keys sent (the tests that look at what an operator sees over SSH)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def capture(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
    ).stdout


def start(session: str, pidfile: Path, args: str) -> None:
    """``gpuwatch ARGS`` in a new 160x48 session, its pid written to ``pidfile``. The pane can
    start at tmux's default size and be resized a moment later: the program starts once the
    terminal is the size asked for, so it lays out for 160x48 from its first frame."""
    cmd = (
        f'echo $$ > {pidfile}; until [ "$(tput cols)x$(tput lines)" = 160x48 ]; do sleep 0.05;'
        f" done; exec {sys.executable} -m gpuwatch {args}"
    )
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", cmd], check=True
    )


def keys(session: str, *names: str) -> None:
    subprocess.run(["tmux", "send-keys", "-t", session, *names], check=True)
