"""Record 60 s of the seeded demo as a user would (``gpuwatch demo --record``, tmux 160x48),
then replay the file in tmux: at three instants the replayed pane's text is the live pane's,
the cursor keys move through time, RO and the REPLAY clock are on screen, and the control keys
are refused.

What legitimately differs between the two panes, and is left out of the comparison:
- the header's mode and clock: `` RW  03:12:40`` live, `` RO  REPLAY 03:12:40`` replayed (the
  same second: the live header names its tick, ``:`` goes to the recorded tick of that second);
  the replayed clock is wider, so the header's end (the endpoint's title) is cut that much
  earlier at 160 columns: the replayed header must be the live one up to there;
- the last line: the live footer (key list) is the replay bar in a replay;
- blank rows inside the left-hand panels: a live panel keeps its tallest height for 30 s of
  real time (``Panel.HOLD_S``), which depends on the live paint history; the left column is
  compared without them (every text row, in order), the charts' half row for row; a held row
  only takes a row the column has free, so no text row is ever pushed out of view by one;
- the left column's scrollbar thumb (the block glyphs in its two-column gutter): its place and
  length follow the scroll and the rows below the last one shown, not what is on screen.
Everything else (the header's badge and reason, every panel, every chart, the events) must be
equal, character for character.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import time
from difflib import unified_diff
from pathlib import Path

import psutil
import pytest

from tests.functional.tmuxkit import capture, keys, start, stop
from tests.helpers import eventually_sync

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)"
)
CLOCK = re.compile(r"REPLAY (\d\d:\d\d:\d\d)")
LIVE_CLOCK = re.compile(r" RW\s+(\d\d:\d\d:\d\d)")
# The header's mode and clock, live or replayed: the part of the header that may differ.
MODE_CLOCK = re.compile(r"\s+R[OW]\s+(?:REPLAY )?\d\d:\d\d:\d\d\s+")
RECORD_S = 60.0
INSTANTS_S = (12.0, 30.0, 48.0)  # into the recording: where the three live panes are taken
CHARTS_FROM_COLUMN = 80  # at 160x48 the charts are the right half of the body


def count(path: Path, query: str) -> int:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return int(db.execute(query).fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0


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


REPLAY_WIDER = len(" REPLAY ")  # how much earlier the replayed header is cut


def comparable(screen: str) -> list[str]:
    """The pane without what may differ: the header's mode and clock, and the last line (the
    footer live, the replay bar replayed)."""
    lines = screen.splitlines()
    return [MODE_CLOCK.sub(" <mode clock> ", lines[0]).rstrip(), *lines[1:-1]]


BLANK_ROW = re.compile(r"^│\s*│$")


def left_column(body: list[str]) -> list[str]:
    """The left-hand panels without their blank rows: a live panel keeps the height of its
    tallest text for 30 s of real time (``Panel.HOLD_S``, so the layout does not jump), which
    depends on what the live program painted before, not on the recording. A held row only
    takes a row the column has free, never one of a text line (which would leave the live
    column a line short of its replay), so every text row is compared."""
    rows = [line[:CHARTS_FROM_COLUMN] for line in body]
    return [r for r in rows if r.strip() and not BLANK_ROW.match(r.strip())]


# The left column's scrollbar: its two columns just left of the charts, where its thumb's ends
# are drawn in eighths (U+2581..U+2588).
GUTTER = slice(CHARTS_FROM_COLUMN - 2, CHARTS_FROM_COLUMN)
THUMB = str.maketrans({chr(c): " " for c in range(0x2581, 0x2589)})


def no_thumb(body: list[str]) -> list[str]:
    """The rows with the left column's scrollbar thumb blanked: where it is and how long it is
    follow where the live screen was scrolled and the rows below the last one shown, not what
    is on screen; only the gutter's thumb glyphs go, nothing else in a row."""
    return [r[: GUTTER.start] + r[GUTTER].translate(THUMB) + r[GUTTER.stop :] for r in body]


def same_pane(live: list[str], replayed: list[str]) -> bool:
    header, again = live[0], replayed[0]
    cut = header[: len(again)] == again and len(header) - len(again) <= REPLAY_WIDER
    body, body_again = no_thumb(live[1:]), no_thumb(replayed[1:])
    charts_same = [r[CHARTS_FROM_COLUMN:] for r in body] == [
        r[CHARTS_FROM_COLUMN:] for r in body_again
    ]
    return cut and charts_same and left_column(body) == left_column(body_again)


def charts(screen: str) -> list[str]:
    return [line[CHARTS_FROM_COLUMN:] for line in screen.splitlines()[1:-10]]


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
        began = time.monotonic()
        keys(live, "+")  # a limit change: its event, and the gate's audit entry, get recorded
        eventually_sync(
            lambda: count(path, "SELECT COUNT(*) FROM audit") > 0,
            30,
            message="the gate's audit entry was never recorded",
        )
        # The live pane, watched through the whole recording. A pane is taken at an instant
        # when it is settled (two captures alike, so no frame half drawn) and its charts were
        # redrawn at that tick (they redraw every 3 s, so between redraws the live charts show
        # an older tick than the header does).
        shots: list[str] = []
        wanted = list(INSTANTS_S)
        last_tick: tuple[str, str] | None = None  # (clock, pane) of the last settled tick
        ticks = redraws = 0
        previous = ""
        while time.monotonic() - began < RECORD_S:
            screen = capture(live)
            drawn = LIVE_CLOCK.search(screen)
            settled = drawn is not None and screen == previous
            previous = screen
            if not settled:
                time.sleep(0.05)  # polling tmux, not waiting for a condition
                continue
            assert drawn is not None
            if last_tick is None or last_tick[0] != drawn.group(1):
                redrawn = last_tick is not None and charts(last_tick[1]) != charts(screen)
                ticks, redraws = ticks + 1, redraws + redrawn
                due = wanted and time.monotonic() - began >= wanted[0]
                if redrawn and due:
                    shots.append(screen)
                    wanted.pop(0)
                last_tick = (drawn.group(1), screen)
            time.sleep(0.05)
        assert len(shots) == len(INSTANTS_S), (
            f"took {len(shots)} live panes ({ticks} ticks seen, {redraws} with new charts):\n"
            f"{capture(live)}"
        )
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
            live_clock = LIVE_CLOCK.search(shot)
            assert live_clock is not None, shot
            at = live_clock.group(1)
            keys(replay, ":")
            eventually_sync(lambda: "go to:" in capture(replay), 10)
            keys(replay, at, "Enter")

            def settled_at(at: str = at) -> str | None:
                a = capture(replay)
                if "go to:" in a or clock() != at:
                    return None
                b = capture(replay)
                return b if a == b else None

            again = eventually_sync(settled_at, 10, message=lambda: capture(replay))
            if not same_pane(comparable(shot), comparable(again)):
                diff = "\n".join(
                    unified_diff(comparable(shot), comparable(again), "live", "replay", lineterm="")
                )
                raise AssertionError(f"the replayed pane at {at} is not the live one:\n{diff}")
        screen = capture(replay)
        assert "RTX 4090" in screen and "vllm" in screen and "chat" in screen
        # The cursor keys move the clock; a control key is refused by the guard, with why.
        before = clock()
        keys(replay, "[")
        eventually_sync(lambda: clock() != before, 10)
        moved = clock()
        keys(replay, "Right")
        eventually_sync(lambda: clock() != moved, 10)
        stepped = clock()
        # To the recording's end (a minute on, twice: a jump stops at the end), where "}" has no
        # event left to go to and says so (what its next event is elsewhere depends on timing).
        keys(replay, "]")
        eventually_sync(lambda: clock() != stepped, 10)
        keys(replay, "]", "}")
        eventually_sync(
            lambda: "no event that way" in capture(replay), 10, message=lambda: capture(replay)
        )
        keys(replay, "+")
        eventually_sync(lambda: "read-only" in capture(replay), 10, message=lambda: capture(replay))
        quit_and_wait(replay, tmp_path / "replay.pid")
    finally:
        for session in (live, replay):
            stop(session)
