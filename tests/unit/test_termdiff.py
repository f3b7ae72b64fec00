"""TerminalDiff: what it sends for a frame, and the styles it switches between; byte by byte
for small frames (cursor moves, style switches, gaps written through, what makes it forget
the screen); the driver class that writes through one."""

from __future__ import annotations

import os
import random
import re
from typing import Any

import pytest
from rich.color import ColorSystem
from rich.style import Style

from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.termdiff import (
    _PLAIN,
    _UNKNOWN,
    Pen,
    TerminalDiff,
    apply_sgr,
    diff_driver,
    sgr_change,
)

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


# Byte by byte: the exact sequences sent for small frames.
HIDE = "\x1b[?25l"
RED = "\x1b[31m"  # the app's styles, as it writes them
BLUE = "\x1b[34m"


def shown(data: str) -> tuple[TerminalDiff, str]:
    diff = TerminalDiff()
    return diff, diff.feed(data)


def hidden(*frames: str) -> tuple[TerminalDiff, list[str]]:
    """A diff with the cursor hidden (no cursor move after each write) and what each of
    ``frames`` sent."""
    diff = TerminalDiff()
    diff.feed(HIDE)
    return diff, [diff.feed(f) for f in frames]


def test_a_fresh_diff_writes_at_the_top_left_and_leaves_a_visible_cursor_where_the_app_did() -> (
    None
):
    diff, sent = shown("x")
    # The terminal's style is unknown at first: a reset before the first character.
    assert sent == "\x1b[1;1H\x1b[0mx"
    assert diff.feed("\x1b[3;4H") == "\x1b[3;4H"
    # The terminal's cursor is known after that move: text there needs no position.
    assert diff.feed("y") == "y"


def test_it_counts_what_it_read_and_what_it_wrote() -> None:
    diff = TerminalDiff()
    first = diff.feed("ab")
    assert (diff.read, diff.written) == (2, len(first))
    second = diff.feed("\x1b[1;1Hcd")
    assert (diff.read, diff.written) == (2 + 8, len(first) + len(second))


def test_carriage_return_newline_and_backspace_move_the_apps_cursor() -> None:
    _, (sent,) = hidden("ab\r\ncd\bX\x1b[3;1H\bY\n\nZ")
    # cd on the second row, X over the d, Y at the left edge (a backspace there stays), Z
    # two rows below it.
    assert sent == "\x1b[1;1H\x1b[0mab\x1b[2;1HcX\x1b[3;1HY\x1b[5;2HZ"


def test_other_control_characters_and_strings_are_passed_on_in_their_place() -> None:
    _, (sent,) = hidden("ab\x07cd")
    assert sent == "\x1b[1;1H\x1b[0mab\x07cd"
    for seq in ("\x1b]0;title\x07", "\x1bPq#0\x1b\\", "\x1b=", "\x1b\\"):
        _, (sent,) = hidden(seq)
        assert sent == seq


@pytest.mark.parametrize("esc", ["\x1b7", "\x1b8", "\x1bc", "\x1bD", "\x1bM"])
def test_an_escape_that_may_move_the_cursor_or_screen_makes_it_forget(esc: str) -> None:
    _, (_, sent) = hidden("\x1b[1;1Hab", esc + "\x1b[1;1Hab")
    assert sent == esc + "\x1b[1;1H\x1b[0mab"


def test_a_string_terminator_alone_keeps_the_screen() -> None:
    _, (_, sent) = hidden("\x1b[1;1Hab", "\x1b\\\x1b[1;1Hab")
    assert sent == "\x1b\\"


@pytest.mark.parametrize(
    "chunks",
    [
        ["ab\x1b[2", ";3HX"],  # text before the cut
        ["ab", "\x1b[2", ";3HX"],  # the cut at the start of a write
        ["ab", "\x1b", "[2;3", "HX"],
        ["ab\x1b[2;3H\x1b]0;t", "itle\x07X"],  # an escape before the cut one
    ],
)
def test_a_sequence_cut_between_writes_is_read_whole(chunks: list[str]) -> None:
    diff = TerminalDiff()
    diff.feed(HIDE)
    sent = "".join(diff.feed(c) for c in chunks)
    title = "\x1b]0;title\x07" if "title" in "".join(chunks) else ""
    assert sent == "\x1b[1;1H\x1b[0mab" + title + "\x1b[2;3HX"


def test_a_style_it_cannot_follow_is_passed_on_and_the_next_known_one_starts_from_a_reset() -> None:
    _, (first, second, third) = hidden("\x1b[1;1Hab", "\x1b[4:3mc", "\x1b[0;1md")
    assert first == "\x1b[1;1H\x1b[0mab"
    assert second == "\x1b[4:3mc"
    assert third == "\x1b[0;1md"


@pytest.mark.parametrize(
    ("move", "where"),
    [
        ("\x1b[2;3f", "\x1b[2;3H"),
        ("\x1b[3H", "\x1b[3;1H"),
        ("\x1b[;5H", "\x1b[1;5H"),
        ("\x1b[H", "\x1b[1;1H"),
    ],
)
def test_cursor_positions_with_defaults(move: str, where: str) -> None:
    _, (sent,) = hidden("\x1b[4;4Hz" + move + "X")
    assert sent == "\x1b[4;4H\x1b[0mz" + where + "X"


def test_a_private_sequence_with_a_position_final_is_passed_on() -> None:
    _, (sent,) = hidden("\x1b[?1H")
    assert sent == "\x1b[?1H"


def test_showing_and_hiding_the_cursor() -> None:
    diff = TerminalDiff()
    # Hidden: no move to where the app left its cursor; the text before is sent first.
    assert diff.feed("ab\x1b[5;5H" + HIDE) == "\x1b[1;1H\x1b[0mab" + HIDE
    # Shown again: the cursor goes where the app has it, before the switch.
    assert diff.feed("\x1b[?25h") == "\x1b[5;5H\x1b[?25h"
    # Already there: no move.
    assert diff.feed(HIDE + "\x1b[?25h") == HIDE + "\x1b[?25h"
    # Several modes in one sequence.
    assert diff.feed("\x1b[?1049;25l\x1b[1;1Hab") == "\x1b[?1049;25l\x1b[1;1H\x1b[0mab"


def test_a_mode_switch_that_is_not_a_screen_keeps_the_screen() -> None:
    _, (_, sent) = hidden("\x1b[1;1Hab", "\x1b[?1000h\x1b[1;1Hab")
    assert sent == "\x1b[?1000h"


@pytest.mark.parametrize("mode", ["47", "1047", "1049", "1049;25"])
def test_the_alternate_screen_makes_it_forget(mode: str) -> None:
    _, (_, sent) = hidden("\x1b[1;1Hab", f"\x1b[?{mode}h\x1b[1;1Hab")
    assert sent.endswith("\x1b[1;1H\x1b[0mab")


def test_a_clear_is_sent_in_the_apps_style_at_the_apps_cursor_and_the_screen_forgotten() -> None:
    _, (sent, again) = hidden("ab\x1b[41m\x1b[3;1H\x1b[2J", "\x1b[0m\x1b[1;1Hab")
    # The cells before the clear first, then the background it paints, then where.
    assert sent == "\x1b[1;1H\x1b[0mab\x1b[41m\x1b[3;1H\x1b[2J"
    assert again == "\x1b[1;1H\x1b[0mab"


@pytest.mark.parametrize(
    "seq", ["\x1b[2J", "\x1b[?2J", "\x1b[K", "\x1b[2S", "\x1b[3L", "\x1b[3X", "\x1b[?3X"]
)
def test_clears_and_scrolls_make_it_forget(seq: str) -> None:
    _, (_, sent) = hidden("\x1b[1;1Hab", seq + "\x1b[1;1Hab")
    assert sent.endswith("\x1b[1;1H\x1b[0mab")


@pytest.mark.parametrize(
    "seq", ["\x1b[2A", "\x1b[B", "\x1b[3C", "\x1b[4G", "\x1b[2d", "\x1b[s", "\x1b[u"]
)
def test_relative_moves_and_saved_cursors_make_it_forget(seq: str) -> None:
    _, (_, sent) = hidden("\x1b[1;1Hab", seq + "\x1b[1;1Hab")
    assert sent == seq + "\x1b[1;1H\x1b[0mab"


@pytest.mark.parametrize("seq", ["\x1b[4h", "\x1b[c", "\x1b[1 q"])
def test_other_sequences_are_passed_on_and_keep_the_screen(seq: str) -> None:
    _, (_, sent) = hidden("\x1b[1;1Hab", seq + "\x1b[1;1Hab")
    assert sent == seq


def test_pending_cells_are_sent_before_a_wide_character() -> None:
    _, (sent,) = hidden("ab\x1b[1;4H漢c")
    assert sent == "\x1b[1;1H\x1b[0mab\x1b[C漢c"


LINE = "\x1b[1;1Habcdefghijklmnopqrstuvwxyz"


def test_a_cell_changed_and_changed_back_is_not_sent_and_later_ones_are() -> None:
    _, (_, sent) = hidden(LINE, "\x1b[1;1HX\x1b[1;1Ha\x1b[1;4HZ")
    assert sent == "\x1b[1;4HZ"


@pytest.mark.parametrize(
    ("cols", "sent"),
    [
        ((1, 3), "\x1b[1;1HXbX"),  # a run from the left edge
        ((11, 13), "\x1b[1;11HXlX"),
        ((11, 16), "\x1b[1;11HXlmnoX"),  # four unchanged cells: written through
        ((11, 17), "\x1b[1;11HX\x1b[5CX"),  # five: jumped over
    ],
)
def test_short_gaps_between_changed_cells_are_written_through(
    cols: tuple[int, int], sent: str
) -> None:
    a, b = cols
    _, (_, got) = hidden(LINE, f"\x1b[1;{a}HX\x1b[1;{b}HX")
    assert got == sent


def test_a_gap_in_another_style_is_jumped_over() -> None:
    _, (_, got) = hidden(LINE + "\x1b[1;12H" + RED + "l\x1b[0m", "\x1b[1;11HX\x1b[1;13HX")
    # The terminal is red after the first frame: the plain run is the one that switches.
    assert got == "\x1b[1;11H\x1b[0mX\x1b[CX"


def test_runs_in_the_terminals_style_go_first_and_moves_are_as_short_as_can_be() -> None:
    # After this the terminal's style is blue.
    _, (_, got) = hidden(LINE + "\x1b[1;5H" + BLUE + "e", RED + "\x1b[1;1HX" + BLUE + "\x1b[1;3HY")
    # Y needs no style switch: first; then X, back on the same line (a full position).
    assert got == "\x1b[1;3HY\x1b[1;1H\x1b[31mX"
    # One cell forward: ESC[C; the next adjacent run of another style needs no move.
    _, (_, got) = hidden(LINE, "\x1b[1;1HX\x1b[1;3H" + RED + "YZ")
    assert got == "\x1b[1;1HX\x1b[C\x1b[31mYZ"
    _, (_, got) = hidden(LINE, "\x1b[1;1HX" + RED + "YZ")
    assert got == "\x1b[1;1HX\x1b[31mYZ"


class FakeDriver:
    """What diff_driver needs of a Textual driver: its constructor's arguments, a file
    descriptor and ``write``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs
        self.fileno = 7
        self.out: list[str] = []

    def write(self, data: str) -> None:
        self.out.append(data)


def test_the_driver_writes_through_a_diff_and_forgets_the_screen_when_resized() -> None:
    sizes = [os.terminal_size((80, 24))]
    asked: list[int] = []

    def size(fd: int) -> os.terminal_size:
        asked.append(fd)
        if not sizes:
            raise OSError("not a terminal")
        return sizes[0]

    cls = diff_driver(FakeDriver, size)
    assert cls.__name__ == "DiffFakeDriver"
    driver = cls("app", debug=True)
    assert (driver.args, driver.kwargs) == (("app",), {"debug": True})
    driver.write(HIDE + "\x1b[1;1Hab")
    driver.write("\x1b[1;1Hab")  # the same frame: nothing written
    assert driver.out == [HIDE + "\x1b[1;1H\x1b[0mab"]
    assert asked == [7, 7]
    sizes[0] = os.terminal_size((100, 30))
    driver.write("\x1b[1;1Hab")  # resized: the frame whole again
    assert driver.out[1:] == ["\x1b[1;1H\x1b[0mab"]
    sizes.clear()
    driver.write("\x1b[1;1Hab")  # no size to be had: forgotten once
    driver.write("\x1b[1;1Hab")
    assert driver.out[2:] == ["\x1b[1;1H\x1b[0mab"]
