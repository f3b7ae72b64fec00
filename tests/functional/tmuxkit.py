"""Driving a real terminal: gpuwatch started in a tmux pane (160x48 unless told), its screen
read back, keys sent (the tests that look at what an operator sees over SSH)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

# The switches the program reads from its environment. A pane's environment is the tmux
# server's, i.e. that of whichever process started the server (another test, another run), not
# this one's: each is passed on (or unset) as this process has it, so GPUWATCH_TERM_DIFF=0 on
# the pytest line is what the program in the pane runs with.
PASSED_ON = ("GPUWATCH_TERM_DIFF",)


def _environment() -> str:
    return "".join(
        f"export {name}={shlex.quote(os.environ[name])}; "
        if name in os.environ
        else f"unset {name}; "
        for name in PASSED_ON
    )


def capture(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
    ).stdout


def start(session: str, pidfile: Path, args: str, size: tuple[int, int] = (160, 48)) -> None:
    """``gpuwatch ARGS`` in a new session of ``size`` (columns, rows), its pid written to
    ``pidfile``. The pane can start at tmux's default size and be resized a moment later: the
    program starts once the terminal is the size asked for, so it lays out for that size from
    its first frame."""
    cols, rows = size
    cmd = (
        f"{_environment()}echo $$ > {pidfile};"
        f' until [ "$(tput cols)x$(tput lines)" = {cols}x{rows} ]; do sleep 0.05; done;'
        f" exec {sys.executable} -m gpuwatch {args}"
    )
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", str(cols), "-y", str(rows), cmd],
        check=True,
    )


def keys(session: str, *names: str) -> None:
    subprocess.run(["tmux", "send-keys", "-t", session, *names], check=True)
