"""TerminalDiff: what it sends for a frame, and the styles it switches between."""

from __future__ import annotations

import random
import re

import pytest
from rich.color import ColorSystem
from rich.style import Style

from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.termdiff import _PLAIN, _UNKNOWN, Pen, TerminalDiff, apply_sgr, sgr_change

STYLES = [
    Style(color="#d8dee9", bgcolor="#10141a"),
    Style(color="#d8dee9", bgcolor="#10141a", bold=True),
    Style(color="#4fd18b", bgcolor="#10141a", dim=True),
    Style(color="#4fd18b", bgcolor="#1d2430", bold=True, dim=True, italic=True),
    Style(color="color(214)", bgcolor="#10141a", reverse=True, underline=True),
    Style(color="red", strike=True),
    Style(),
]


def frame(cells: dict[tuple[int, int], tuple[str, Style]]) -> str:
    """A frame as Textual writes one: a cursor position, then each segment in its full
    style followed by a reset."""
    return "".join(f"\x1b[{y + 1};{x + 1}H" + style.render(text) for (y, x), (text, style)
                   in sorted(cells.items()))  # fmt: skip


def pen_of(style: Style) -> Pen:
    return apply_sgr(_PLAIN, style._make_ansi_codes(ColorSystem.TRUECOLOR))


def test_a_style_change_takes_the_terminal_to_the_style_asked_and_is_never_longer() -> None:
    pens = [pen_of(s) for s in STYLES] + [_PLAIN]
    for was in [*pens, _UNKNOWN]:
        for now in pens:
            change = sgr_change(was, now)
            if was == now:
                assert change == ""
                continue
            assert change.startswith("\x1b[") and change.endswith("m")
            # Applied to what the terminal had, it gives exactly the style asked for.
            assert apply_sgr(_PLAIN if was == _UNKNOWN else was, change[2:-1]) == now
            if was != _UNKNOWN:
                whole = "\x1b[0;" + ";".join(c for c in now if c) + "m"
                assert len(change) <= len(whole)


def test_an_unchanged_frame_sends_nothing_and_a_changed_number_sends_only_its_cells() -> None:
    diff = TerminalDiff()
    cells = {
        (0, 0): ("  run ", STYLES[0]),
        (0, 6): ("12", STYLES[1]),
        (0, 8): ("  wait 0", STYLES[0]),
        (1, 0): ("GPU util 97%", STYLES[2]),
    }
    first = diff.feed("\x1b[?25l" + frame(cells))
    assert "run" in first and "GPU util 97%" in first
    assert diff.feed(frame(cells)) == ""  # Textual repainting the same lines: nothing sent
    cells[(0, 6)] = ("13", STYLES[1])
    sent = diff.feed(frame(cells))
    # One cell moved: the cursor to it, its style (from the last one written), the digit;
    # nothing else of the line.
    assert sent.startswith("\x1b[1;8H\x1b[") and sent.endswith("m3")
    assert apply_sgr(pen_of(STYLES[2]), sent[len("\x1b[1;8H\x1b[") : -2]) == pen_of(STYLES[1])
    # A clear makes it forget the screen: the next frame is sent whole.
    diff.feed("\x1b[2J")
    assert "run" in diff.feed(frame(cells))


def test_changes_are_sent_grouped_by_style() -> None:
    diff = TerminalDiff()
    cells = {(y, x): (f"{y}{x}", STYLES[(y + x) % 2]) for y in range(10) for x in (0, 10, 20)}
    diff.feed("\x1b[?25l" + frame(cells))
    cells = {key: (text.replace("0", "5"), style) for key, (text, style) in cells.items()}
    sent = diff.feed(frame(cells))
    # Two styles among the changed cells: the style switched at most twice, not per cell.
    assert sent.count("m") <= 2


def test_wide_characters_are_written_as_they_come() -> None:
    diff = TerminalDiff()
    cells = {(0, 0): ("漢字", STYLES[0]), (0, 4): (" x", STYLES[1])}
    assert "漢字" in diff.feed("\x1b[?25l" + frame(cells))
    # Their cells are not trusted: the same text is written again, the cells after it are not.
    again = diff.feed(frame(cells))
    assert "漢字" in again and " x" not in again


def test_a_visible_cursor_is_left_where_the_app_put_it() -> None:
    diff = TerminalDiff()
    sent = diff.feed("\x1b[?25h" + frame({(2, 3): ("ab", STYLES[0])}) + "\x1b[5;7H")
    assert sent.endswith("\x1b[5;7H")


def test_random_frames_keep_the_terminal_model_equal_to_the_apps() -> None:
    """Frame after frame of random writes: what was sent, applied to a screen, is what the app
    wrote applied to one (both read by a minimal screen model of cursor moves, styles and
    text; tests/functional/test_termdiff_tmux.py checks the same in a real terminal)."""
    rng = random.Random(7)
    diff = TerminalDiff()
    raw_screen: dict[tuple[int, int], tuple[str, Pen]] = {}
    sent_screen: dict[tuple[int, int], tuple[str, Pen]] = {}
    # A terminal keeps its cursor and style from one write to the next.
    raw_state = sent_state = (0, 0, _PLAIN)
    for _ in range(200):
        cells = {
            (rng.randrange(8), rng.randrange(0, 60, 3)): (
                "".join(rng.choice("ab 0123─█⠿") for _ in range(rng.randint(1, 6))),
                rng.choice(STYLES),
            )
            for _ in range(rng.randint(1, 12))
        }
        data = frame(cells)
        raw_state = play(data, raw_screen, raw_state)
        sent_state = play(diff.feed(data), sent_screen, sent_state)
        assert sent_screen == raw_screen
    assert diff.written < diff.read / 1.5


State = tuple[int, int, Pen]  # the cursor's row and column, the style


def play(data: str, screen: dict[tuple[int, int], tuple[str, Pen]], state: State) -> State:
    """``screen`` after ``data`` (cursor positions, forward moves, SGR and plain text only),
    from ``state``; the state after it."""
    y, x, pen = state
    for m in re.finditer(r"\x1b\[([0-9;]*)([HCm])|([^\x1b]+)", data):
        params, final, text = m.groups()
        if text is not None:
            for ch in text:
                screen[(y, x)] = (ch, pen)
                x += 1
        elif final == "H":
            row, _, col = params.partition(";")
            y, x = int(row) - 1, int(col) - 1
        elif final == "C":
            x += int(params or 1)
        else:
            pen = apply_sgr(pen, params)
    return y, x, pen


@pytest.mark.parametrize(("value", "name"), [(None, "DiffLinuxDriver"), ("0", "LinuxDriver")])
def test_the_app_writes_through_the_diff_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch, value: str | None, name: str
) -> None:
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    if value is None:
        monkeypatch.delenv("GPUWATCH_TERM_DIFF", raising=False)
    else:
        monkeypatch.setenv("GPUWATCH_TERM_DIFF", value)
    app = GpuwatchApp(live_session(DashboardOptions(urls=[])))
    assert app.driver_class.__name__ == name
