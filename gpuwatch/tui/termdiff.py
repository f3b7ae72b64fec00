"""What the dashboard writes to its terminal, cut to the cells that changed.

Textual repaints a changed region whole: a line whose one number moved is written again from
its widget's left edge, and each of its segments carries its full style (``ESC[0m`` then the
foreground and background as 24-bit colours: about 45 bytes before a two-letter word). Over
SSH that is most of what the dashboard costs a slow link (bench/termbytes.py).

``TerminalDiff`` sits between Textual and the terminal. It keeps what the terminal shows, cell
by cell (a character and the style it was written in), reads what Textual writes, and passes
on only the cells that differ, each run of them after one cursor move, with only the style
attributes that change from the cell written before (``ESC[0m`` only where an attribute must
be switched off). What it does not understand it passes on unchanged; anything that may
change the screen behind its back (clearing, the alternate screen, scrolling, a resize) makes
it forget the screen, so the next frame is written whole.

``diff_driver`` makes a Textual driver class that writes through one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from rich.cells import cell_len

# One token of terminal output: CSI, OSC, DCS/PM/APC/SOS strings, another escape, a control
# character, or printable text.
_TOKENS = re.compile(
    r"(\x1b\[[0-?]*[ -/]*[@-~])"
    r"|(\x1b\][^\x07\x1b]*(?:\x07|\x1b\\))"
    r"|(\x1b[PX^_].*?\x1b\\)"
    r"|(\x1b[\s\S]?)"
    r"|([\x00-\x1a\x1c-\x1f\x7f])"
    r"|([^\x00-\x1f\x7f]+)"
)
# A CSI that is cut at the end of a write: kept for the next one.
_PARTIAL = re.compile(r"\x1b(\[[0-?]*[ -/]*|\][^\x07\x1b]*|[PX^_](?:(?!\x1b\\)[\s\S])*)?$")
# CSI finals that redraw or move screen content: the screen is forgotten after them.
_CLEARS = set("JKLMST@PXbr")
# Private modes whose switch clears or swaps the screen.
_SCREEN_MODES = {"47", "1047", "1049"}

Pen = tuple[str, ...]  # SGR attributes in slot order (see _SLOTS); "" = off / default
_PLAIN: Pen = ("",) * 10
# Slot of each attribute: bold, dim, italic, underline, blink, reverse, conceal, strike, fg, bg
_ON = {1: 0, 2: 1, 3: 2, 4: 3, 21: 3, 5: 4, 6: 4, 7: 5, 8: 6, 9: 7}
_OFF = {22: (0, 1), 23: (2,), 24: (3,), 25: (4,), 27: (5,), 28: (6,), 29: (7,), 39: (8,), 49: (9,)}


@lru_cache(maxsize=4096)
def apply_sgr(pen: Pen, params: str) -> Pen:
    """The pen after ``ESC[{params}m``. Attributes it does not know (overline, underline
    colour) are kept as written in no slot: the caller passes such a sequence on as it is."""
    parts = params.split(";") if params else ["0"]
    if ":" in params or (pen == _UNKNOWN and parts[0] not in ("", "0")):
        return _UNKNOWN  # sub-parameters (curly underlines), or no reset to start from
    out = list(pen)
    i = 0
    while i < len(parts):
        try:
            code = int(parts[i] or 0)
        except ValueError:
            return _UNKNOWN
        i += 1
        if code == 0:
            out = list(_PLAIN)
        elif code in _ON:
            out[_ON[code]] = str(code)
        elif code in _OFF:
            for slot in _OFF[code]:
                out[slot] = ""
        elif 30 <= code <= 37 or 90 <= code <= 97:
            out[8] = str(code)
        elif 40 <= code <= 47 or 100 <= code <= 107:
            out[9] = str(code)
        elif code in (38, 48):
            mode = parts[i] if i < len(parts) else ""
            take = 2 if mode == "5" else 4 if mode == "2" else 0
            if not take:
                return _UNKNOWN
            out[8 if code == 38 else 9] = ";".join([str(code), *parts[i : i + take]])
            i += take
        else:
            return _UNKNOWN
    return tuple(out)


_UNKNOWN: Pen = ("?",) * 10  # a style it cannot follow: cells in it are never trusted


# The code that switches each slot off (bold and dim share 22; fg and bg go to the default).
_OFF_CODE = ("22", "22", "23", "24", "25", "27", "28", "29", "39", "49")


@lru_cache(maxsize=4096)
def sgr_change(was: Pen, now: Pen) -> str:
    """The shortest plain SGR sequence that takes the terminal from ``was`` to ``now``: the
    slots that change, each switched off by its own code (22 for bold or dim, which switches
    both, so the other is set again), or a reset and ``now`` whole when that is shorter."""
    if was == now:
        return ""
    full = "\x1b[0;" + ";".join(c for c in now if c) + "m" if any(now) else "\x1b[0m"
    if was == _UNKNOWN:
        return full
    changed = [slot for slot in range(len(now)) if was[slot] != now[slot]]
    # Off first: 22 after a 1 would switch the new bold off again.
    offs = [_OFF_CODE[slot] for slot in changed if not now[slot]]
    ons = [now[slot] for slot in changed if now[slot]]
    if "22" in offs:  # switched both bold and dim off: the one still wanted comes back
        ons += [now[slot] for slot in (0, 1) if now[slot] and was[slot] == now[slot]]
    delta = "\x1b[" + ";".join([*dict.fromkeys(offs), *ons]) + "m"
    return delta if len(delta) < len(full) else full


Cell = tuple[str, Pen]  # a character and its style; None: never written, or forgotten


class TerminalDiff:
    """Reads what an app writes to a terminal; gives what to send so the terminal shows it.

    The cells a write changes are gathered first and sent at its end (or before a sequence
    that must keep its place, such as a clear), grouped by style: a frame that changes thirty
    numbers in four styles switches the style four times, not thirty."""

    # A gap of unchanged cells this short, in the run's style, is written again rather than
    # jumped over with a cursor move (``ESC[y;xH`` is 6 to 8 bytes).
    GAP = 4

    def __init__(self) -> None:
        # Each row's cells as the app has them: characters and their styles apart (a segment is
        # compared as a string and a count, not cell by cell); a None style: never written.
        self.chars: dict[int, list[str]] = {}
        self.pens: dict[int, list[Pen | None]] = {}
        self._was: dict[int, dict[int, Cell | None]] = {}  # row -> {column: the terminal's cell}
        self.y = self.x = 0  # where the app's cursor is
        self.pen = _PLAIN  # the app's style
        self.real: tuple[int, int] | None = None  # where the terminal's cursor is, if known
        self.real_pen: Pen = _UNKNOWN  # the terminal's style
        self.cursor_shown = True
        self._partial = ""
        self.written = 0  # characters given to the terminal / read from the app (bench, tests)
        self.read = 0

    def forget(self) -> None:
        """The screen is unknown (resized, cleared): every cell is written again."""
        self.chars.clear()
        self.pens.clear()
        self._was.clear()
        self.real = None
        self.real_pen = _UNKNOWN

    def feed(self, data: str) -> str:
        data = self._partial + data
        self._partial = ""
        last = data.rfind("\x1b")  # a sequence cut short can only start at the last escape
        if last >= 0 and _PARTIAL.match(data, last):
            data, self._partial = data[:last], data[last:]
        self.read += len(data)
        out: list[str] = []
        for m in _TOKENS.finditer(data):
            csi, osc, string, esc, control, text = m.groups()
            if text is not None:
                self._text(text, out)
            elif csi is not None:
                self._csi(csi, out)
            elif control is not None:
                if control == "\r":
                    self.x = 0
                elif control == "\n":
                    self.y += 1
                elif control == "\b":
                    self.x = max(0, self.x - 1)
                else:
                    self._pass(control, out)
            else:
                self._pass(osc or string or esc or "", out)
                if esc is not None and esc != "\x1b\\":
                    self.forget()  # ESC 7/8, ESC c, ESC D/M...: cursor or screen changed
        self._flush(out)
        if self.cursor_shown and self.real != (self.y, self.x):
            self._move(out)
        result = "".join(out)
        self.written += len(result)
        return result

    def _pass(self, seq: str, out: list[str]) -> None:
        """A sequence passed on in its place: the cells changed before it are sent first."""
        self._flush(out)
        out.append(seq)

    def _move(self, out: list[str]) -> None:
        out.append(f"\x1b[{self.y + 1};{self.x + 1}H")
        self.real = (self.y, self.x)

    def _csi(self, seq: str, out: list[str]) -> None:
        final, body = seq[-1], seq[2:-1]
        if final == "m":
            pen = apply_sgr(self.pen, body)
            if pen == _UNKNOWN:  # passed on as it is, the terminal's style no longer known
                self._pass(seq, out)
                self.real_pen = _UNKNOWN
            self.pen = pen
        elif final in "Hf" and not body.startswith("?"):
            row, _, col = body.partition(";")
            self.y, self.x = int(row or 1) - 1, int(col or 1) - 1
        elif final in "hl" and body.startswith("?"):
            modes = set(body[1:].split(";"))
            self._flush(out)
            if modes & _SCREEN_MODES:
                self.forget()
            if "25" in modes:
                self.cursor_shown = final == "h"
                if self.cursor_shown and self.real != (self.y, self.x):
                    self._move(out)
            out.append(seq)
        else:
            self._flush(out)
            if final in _CLEARS:
                # Erasing paints the background of the terminal's style: the app's first.
                out.append(sgr_change(self.real_pen, self.pen))
                self.real_pen = self.pen
                if self.real != (self.y, self.x):
                    self._move(out)
            out.append(seq)
            if final in _CLEARS or final in "ABCDEFGdsu":
                self.forget()

    def _text(self, text: str, out: list[str]) -> None:
        y, x, pen = self.y, self.x, self.pen
        width = cell_len(text)
        chars, pens = self.chars.get(y), self.pens.get(y)
        if chars is None or pens is None:
            chars, pens = self.chars[y], self.pens[y] = [], []
        end = x + width
        if len(chars) < end:
            chars.extend([""] * (end - len(chars)))
            pens.extend([None] * (end - len(pens)))
        self.x = end
        if width != len(text) or pen == _UNKNOWN:
            # Wide or zero-width characters: written as they come, their cells not trusted.
            self._flush(out)
            self._write(y, x, text, pen, out)
            chars[x:end] = [""] * width
            pens[x:end] = [None] * width
            return
        if pens[x:end].count(pen) == width and "".join(chars[x:end]) == text:
            return  # the same segment again: most of what Textual repaints
        was = self._was.get(y)
        if was is None:
            was = self._was[y] = {}
        for i, ch in enumerate(text):
            at = x + i
            old_pen = pens[at]
            if chars[at] != ch or old_pen != pen:
                if at not in was:
                    was[at] = None if old_pen is None else (chars[at], old_pen)
                chars[at], pens[at] = ch, pen

    def _flush(self, out: list[str]) -> None:
        """Send the cells changed since the last flush: runs of one style, the runs of each
        style together, the style the terminal has first."""
        if not self._was:
            return
        gap = self.GAP
        runs: dict[Pen, list[tuple[int, int, str]]] = {}
        for y, was in self._was.items():
            chars, pens = self.chars[y], self.pens[y]
            first = last = -1
            pen: Pen = _PLAIN
            for x in sorted(was):
                cell_pen = pens[x]
                if cell_pen is None:
                    continue  # a wide character's cells: written as they came
                if was[x] == (chars[x], cell_pen):
                    continue  # changed and changed back
                # A short gap of unchanged cells in the run's style is written through.
                if (
                    first >= 0
                    and cell_pen == pen
                    and x - last <= gap + 1
                    and pens[last + 1 : x].count(pen) == x - last - 1
                ):
                    last = x
                    continue
                if first >= 0:
                    runs.setdefault(pen, []).append((y, first, "".join(chars[first : last + 1])))
                first = last = x
                pen = cell_pen
            if first >= 0:
                runs.setdefault(pen, []).append((y, first, "".join(chars[first : last + 1])))
        self._was.clear()
        order = sorted(runs, key=lambda p: p != self.real_pen)  # stable: first seen first
        for pen in order:
            for y, x, run in runs[pen]:
                self._write(y, x, run, pen, out)

    def _write(self, y: int, x: int, text: str, pen: Pen, out: list[str]) -> None:
        real = self.real
        if real is None or real[0] != y or real[1] > x:
            out.append(f"\x1b[{y + 1};{x + 1}H")
        elif real[1] < x:
            # Forward on the same line: ESC[nC is shorter than a full position.
            out.append(f"\x1b[{x - real[1]}C" if x - real[1] > 1 else "\x1b[C")
        if self.real_pen != pen:
            out.append(sgr_change(self.real_pen, pen))
            self.real_pen = pen
        out.append(text)
        self.real = (y, x + cell_len(text))


def diff_driver(base: type[Any], size: Callable[[int], os.terminal_size] = os.get_terminal_size
                ) -> type[Any]:  # fmt: skip
    """A subclass of the Textual driver ``base`` whose output goes through a
    ``TerminalDiff``; it forgets the screen when the terminal's size changes."""

    class DiffDriver(base):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.diff = TerminalDiff()
            self._size: os.terminal_size | None = None

        def write(self, data: str) -> None:
            try:
                now = size(self.fileno)
            except (OSError, ValueError):
                now = None
            if now != self._size:
                self._size = now
                self.diff.forget()
            out = self.diff.feed(data)
            if out:
                super().write(out)

    DiffDriver.__name__ = DiffDriver.__qualname__ = f"Diff{base.__name__}"
    return DiffDriver
