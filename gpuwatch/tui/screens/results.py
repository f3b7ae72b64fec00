"""What a change to many gates did, one row per gate: applied, 409, unreachable, refused."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from gpuwatch.control.fleet import Outcome
from gpuwatch.fmt import clip

STYLE = {"applied": "green", "409": "bold yellow", "unchanged": "dim"}


class ResultsScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter,q", "dismiss", "close")]
    DEFAULT_CSS = """
    ResultsScreen { align: center middle; }
    ResultsScreen > Vertical {
        width: 90%; height: auto; max-height: 80%; border: thick $primary;
        background: $surface; padding: 1 2;
    }
    ResultsScreen DataTable { height: auto; max-height: 20; }
    """

    def __init__(self, title: str, outcomes: list[Outcome]) -> None:
        super().__init__()
        self.title_text = title
        self.outcomes = outcomes

    def compose(self) -> ComposeResult:
        with Vertical():
            applied = sum(o.result == "applied" for o in self.outcomes)
            yield Static(
                f"[b]{self.title_text}[/]: applied on {applied} of {len(self.outcomes)} gate(s)"
                "  [dim]esc closes[/]"
            )
            yield DataTable(cursor_type="row", id="results")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("node", "gate", "result", "version", "detail")
        for o in self.outcomes:
            table.add_row(
                Text(clip(o.gate.node, 24)),
                Text(clip(o.gate.instance, 40)),
                Text(o.result, style=STYLE.get(o.result, "bold red")),
                Text("" if o.version is None else f"v{o.version}"),
                Text(clip(o.detail, 120)),
            )
