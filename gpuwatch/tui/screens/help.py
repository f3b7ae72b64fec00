"""``?``: every key, read from the app's own bindings so the list cannot drift."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gpuwatch.tui.control import KNOB_ACTIONS
from gpuwatch.tui.markup import escape


def key_label(binding: Binding) -> str:
    return binding.key_display or {
        "space": "space",
        "question_mark": "?",
        "plus": "+",
        "minus": "-",
        "asterisk": "*",
        "slash": "/",
        "left_square_bracket": "[",
        "right_square_bracket": "]",
    }.get(binding.key, binding.key)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 72; max-height: 90%; border: round $primary; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, bindings: list[Binding], notes: list[str]) -> None:
        super().__init__()
        self._keys = bindings
        self._notes = notes

    def compose(self) -> ComposeResult:
        lines = ["[b]gpuwatch keys[/]", ""]
        # The number keys are one line: they pick a row of the admission panel, in its order.
        digits = [b.key for b in self._keys if b.key.isdigit()]
        # A knob row's own meanings of the keys go under a heading of their own, after the rest.
        on_knob = [b for b in self._keys if b.action.split("(", 1)[0] in KNOB_ACTIONS]
        rest: list[Binding | None] = [b for b in self._keys if b not in on_knob]
        if on_knob:
            rest += [None, *on_knob]
        for b in rest:
            if b is None:
                lines += ["", "  [b]on a knob row[/] (the stacks' own knobs, after the lanes)"]
                continue
            if b.key.isdigit():
                if b.key == digits[0]:
                    key = f"{digits[0]}..{digits[-1]}".ljust(12)
                    lines.append(f"  [b $accent]{key}[/] pick a row: the gate's lanes, then knobs")
                continue
            # A lone "[" is left as it is by markup escapes, and then opens a tag: backslash
            # every bracket of the key itself (after padding, so the column stays 12 wide).
            key = key_label(b).ljust(12).replace("[", r"\[")
            lines.append(f"  [b $accent]{key}[/] {escape(b.description)}")
        lines += ["", *self._notes, "", "[dim]esc, q or ? closes this screen[/]"]
        with VerticalScroll():
            yield Static("\n".join(lines))
