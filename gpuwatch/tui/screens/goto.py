"""``:`` on a screen that shows the past (a replay, the fleet at ``--at``): a time to go to."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class GoToTime(ModalScreen[str | None]):
    """``:`` asks for a time: HH:MM[:SS], a date and time, or +N[s|m|h] from the start."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    GoToTime { align: center middle; }
    GoToTime > Vertical { width: 60; height: auto; border: thick $accent; background: $surface;
                          padding: 1 2; }
    """

    def __init__(
        self, hint: str = "go to: HH:MM[:SS], YYYY-MM-DD HH:MM[:SS], or +90s / +5m from the start"
    ) -> None:
        super().__init__()
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.hint)
            yield Input(placeholder="03:12:40", id="when")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
