"""Driving a real terminal: gpuwatch started in a tmux pane (160x48 unless told), its screen
read back, keys sent (the tests that look at what an operator sees over SSH).

Each session runs on a tmux server of its own (``-L``, named after it). On the one shared
server, a session started just as another test's last session ended met the server on its way
out ("server exited unexpectedly"), and the pane's environment was that of whichever process
had started the server, not this test's (``GPUWATCH_TERM_DIFF=0`` on the pytest line did not
reach the program). A server of its own is started by this process, with its environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def tmux(session: str, *args: str) -> list[str]:
    """The tmux command line ``args`` on ``session``'s own server."""
    return ["tmux", "-L", session, *args]


def capture(session: str) -> str:
    return subprocess.run(
        tmux(session, "capture-pane", "-p", "-t", session), capture_output=True, text=True
    ).stdout


def start(session: str, pidfile: Path, args: str, size: tuple[int, int] = (160, 48)) -> None:
    """``gpuwatch ARGS`` in a new session of ``size`` (columns, rows), its pid written to
    ``pidfile``. The pane can start at tmux's default size and be resized a moment later: the
    program starts once the terminal is the size asked for, so it lays out for that size from
    its first frame."""
    cols, rows = size
    cmd = (
        f'echo $$ > {pidfile}; until [ "$(tput cols)x$(tput lines)" = {cols}x{rows} ]; do'
        f" sleep 0.05; done; exec {sys.executable} -m gpuwatch {args}"
    )
    subprocess.run(
        tmux(session, "new-session", "-d", "-s", session, "-x", str(cols), "-y", str(rows), cmd),
        check=True,
    )


def keys(session: str, *names: str) -> None:
    subprocess.run(tmux(session, "send-keys", "-t", session, *names), check=True)


def stop(session: str) -> None:
    """End the session (its server goes with it); nothing if it has ended already. Its
    server's socket is removed too: tmux leaves it behind, one file a test run."""
    subprocess.run(tmux(session, "kill-session", "-t", session), capture_output=True)
    sockets = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}"
    (sockets / session).unlink(missing_ok=True)
