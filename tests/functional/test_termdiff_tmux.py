"""In a real terminal (a tmux pane), what TerminalDiff sends shows exactly what the app wrote:
the same frames written as they are in one pane and through the diff in another read back
the same, colours and all, after every few frames."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from rich.style import Style

from tests.functional.tmuxkit import stop, tmux
from tests.helpers import eventually_sync
from tests.unit.test_termdiff import STYLES, frame

REPLAY = """
import sys, termios, time, tty
from gpuwatch.tui.termdiff import TerminalDiff
tty.setraw(1)  # as Textual's driver: a newline is only a newline
frames = open(sys.argv[1], encoding="utf-8").read().split("\\0")[: int(sys.argv[3])]
diff = TerminalDiff() if sys.argv[2] == "diff" else None
for data in frames:
    sys.stdout.write(diff.feed(data) if diff else data)
sys.stdout.write("\\x1b[?25l")
sys.stdout.flush()
open(sys.argv[1] + "." + sys.argv[2] + ".done", "w").close()
time.sleep(60)
"""


def frames(seed: int, count: int) -> list[str]:
    """Random frames as Textual writes them: box lines, braille, digits, a wide character now
    and then, in the dashboard's kinds of style; one clears the screen halfway."""
    rng = random.Random(seed)
    out = ["\x1b[?25l\x1b[2J"]
    for i in range(count):
        cells: dict[tuple[int, int], tuple[str, Style]] = {}
        for _ in range(rng.randint(1, 15)):
            text = "".join(rng.choice("ab 0123─│█⠿⡇") for _ in range(rng.randint(1, 12)))
            if rng.random() < 0.1:
                text += "漢"
            cells[(rng.randrange(20), rng.randrange(0, 66, 3))] = (text, rng.choice(STYLES))
        out.append(("\x1b[2J" if i == count // 2 else "") + frame(cells))
    return out


def screen(session: str) -> str:
    return subprocess.run(
        tmux(session, "capture-pane", "-e", "-p", "-t", session), capture_output=True, text=True
    ).stdout


def test_what_the_diff_sends_shows_what_the_app_wrote(tmp_path: Path) -> None:
    stream = tmp_path / "frames"
    stream.write_text("\0".join(frames(11, 120)), encoding="utf-8")
    root = str(Path(__file__).resolve().parents[2])  # this checkout's gpuwatch
    for upto in (3, 40, 61, 121):
        sessions = {}
        for mode in ("raw", "diff"):
            name = sessions[mode] = f"gw-termdiff-{os.getpid()}-{mode}-{upto}"
            cmd = [sys.executable, "-c", REPLAY, str(stream), mode, str(upto)]
            size = ["-x", "80", "-y", "24"]
            where = ["-c", root, "-e", f"PYTHONPATH={root}"]
            line = subprocess.list2cmdline(cmd)
            subprocess.run(
                tmux(name, "new-session", "-d", "-s", name, *size, *where, line), check=True
            )
        try:
            for mode in sessions:
                done = Path(f"{stream}.{mode}.done")
                eventually_sync(done.exists, 30, message=f"{mode} never finished")
                done.unlink()
            raw, sent = screen(sessions["raw"]), screen(sessions["diff"])
            assert "─" in raw or "█" in raw
            assert sent == raw, f"after {upto} frames"
        finally:
            for name in sessions.values():
                stop(name)
