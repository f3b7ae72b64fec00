"""``a``: the gate's audit trail, newest first: when, who, what changed; and, where the node
steers a stack's own knobs, the local knob audit beside it (its version column says ``knob``:
stacks keep no versions)."""

from __future__ import annotations

import json
import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from gpuwatch.adminapi import AuditEntry
from gpuwatch.fmt import clip


class AuditScreen(Screen[None]):
    BINDINGS = [Binding("escape,a,q", "app.pop_screen", "back")]
    DEFAULT_CSS = """
    AuditScreen #title { height: 1; background: $panel; }
    AuditScreen DataTable { height: 1fr; }
    """

    def __init__(
        self,
        entries: list[AuditEntry] | None,
        error: str | None = None,
        knobs: list[AuditEntry] | None = None,
    ) -> None:
        super().__init__()
        self.gate = entries is not None
        self.entries = entries or []
        self.error = error
        self.knobs = knobs

    def compose(self) -> ComposeResult:
        what = "audit trail"
        if self.knobs is not None:  # the local knob audit, beside the gate's if there is one
            what += ": the gate's and the knobs'" if self.gate else ": the knobs' (local file)"
        title = f"[b]{what}[/] (newest first)  [dim]esc to go back[/]"
        if self.error:
            title += f"  [$bad]{self.error}[/]"
        yield Static(title, id="title")
        yield DataTable(zebra_stripes=True, cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("time", "version", "actor", "change")
        rows = [(e, str(e.version)) for e in self.entries]
        rows += [(e, "knob") for e in self.knobs or []]
        rows.sort(key=lambda row: row[0].time, reverse=True)
        for e, version in rows:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.time))
            change = json.dumps(e.change.to_json(), separators=(", ", ": "))
            if e.reason:  # the adaptive controller says why it moved the limit
                change += f"  {e.reason}"
            # Actors come from clients (an older gate saved anything): one escaped line each.
            actor = Text(clip(e.actor, 80))
            table.add_row(when, version, actor, Text(clip(change, 400)))
