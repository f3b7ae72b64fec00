"""The dashboard's left column: panels stacked in a column that scrolls, where the panel the
control keys act on (the admission lanes, class ``keep``) never scrolls out of view.

Why: at 80x24 the panels above the lanes (GPUs, the engines and the gate's own line) took the
column's few rows, and the operator pressed ``-`` on a lane below the fold. So the panels above
a kept one that can give way (``Yielding``: the engines) are told how many lines are left for
them once everything else above it is counted, and fit their text to that (the gate's engine
line compacts first, then the engines' own lines). Panels below the kept one scroll as before.

The room is worked out again whenever the column, or a panel in it, changes size: a lane added
at the gate, a ``sending:`` line, a resized terminal.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from textual import events
from textual.containers import Vertical
from textual.widget import Widget

from gpuwatch.tui.widgets.panel import Panel

KEEP = "keep"  # the class of a panel that stays in view


@runtime_checkable
class Yielding(Protocol):
    """A panel that can show its text in fewer lines."""

    def give_way(self, lines: int | None) -> None:
        """Take at most ``lines`` lines from now on (None: as many as the text needs)."""


class KeepInView(Vertical):
    """A vertical column of panels keeping its ``keep`` panels in view (module docstring)."""

    def on_resize(self, _event: events.Resize) -> None:
        self.fit()  # the terminal's size changed

    def on_panel_resized(self, message: Panel.Resized) -> None:
        message.stop()
        self.fit()  # a lane added at the gate, a ``sending:`` line, an engine's line wrapping

    def room(self) -> int | None:
        """Rows the column can show at most, None when that is unknown (not laid out)."""
        if not self.size.height:
            return None
        styles = self.styles
        if styles.height is not None and styles.height.is_auto and styles.max_height is not None:
            # It grows with its panels up to its max-height: that is what it could show.
            parent = self.parent
            within = parent.content_region.size if isinstance(parent, Widget) else self.app.size
            return int(styles.max_height.resolve(within, self.app.size))
        return self.scrollable_content_region.height

    def fit(self) -> None:
        """Tell the yielding panels above the last kept one how many lines they may take."""
        shown = [c for c in self.children if isinstance(c, Widget) and c.display]
        kept = [i for i, c in enumerate(shown) if c.has_class(KEEP)]
        room = self.room()
        yielding = [c for c in shown[: kept[-1]] if isinstance(c, Yielding)] if kept else []
        for child in self.children:
            if isinstance(child, Yielding) and child not in yielding:
                child.give_way(None)
        if not yielding or room is None:
            return
        # Everything down to the last kept panel that does not give way, at its height now.
        fixed = sum(c.outer_size.height for c in shown[: kept[-1] + 1] if c not in yielding)
        left = room - fixed
        for panel in yielding:
            # Beside another yielding panel: what that one leaves at its height now.
            others = sum(p.outer_size.height for p in yielding if p is not panel)
            chrome = panel.outer_size.height - panel.content_region.height
            panel.give_way(max(1, left - others - chrome))
