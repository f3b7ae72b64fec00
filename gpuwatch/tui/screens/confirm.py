"""A yes/no modal for changes that can hurt: pausing, or cutting a lane by more than half.
Focus starts on Cancel, so an Enter pressed by habit changes nothing."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from gpuwatch.tui.markup import escape


class ConfirmationModal(ModalScreen[bool]):
    BINDINGS = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    ConfirmationModal { align: center middle; }
    ConfirmationModal > Vertical {
        width: 70; height: auto; border: thick $bad; background: $surface; padding: 1 2;
    }
    ConfirmationModal #buttons { height: auto; align: right middle; margin-top: 1; }
    ConfirmationModal Button { margin-left: 2; }
    """

    def __init__(self, title: str, lines: list[str]) -> None:
        super().__init__()
        self.title_text = title
        self.lines = lines

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"[b $bad]{escape(self.title_text)}[/]")
            yield Static("\n".join(escape(line) for line in self.lines), id="details")
            with Horizontal(id="buttons"):
                yield Button("Cancel", id="cancel", variant="default")
                yield Button("Apply", id="apply", variant="error")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "apply")

    def action_cancel(self) -> None:
        self.dismiss(False)
