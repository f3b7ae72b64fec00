"""The dashboard's left column: panels stacked in a column that scrolls, where the panel the
control keys act on (the admission lanes, class ``keep``) never scrolls out of view.

Why: at 80x24 the panels above the lanes (GPUs, the engines and the gate's own line) took the
column's few rows, and the operator pressed ``-`` on a lane below the fold. So the panels above
a kept one that can give way (``Yielding``: the engines, the GPUs) are told how many lines are
left for them once everything else above it is counted, and fit their text to that. The panel
nearest the lanes gives way first (the engines: the gate's line compacts first, then the
engines' own lines), down to its fewest lines, then the next one up (the GPUs: one line for
all). Panels below the kept one scroll as before.

The lines are shared out from what each panel's text would take at a given room (``takes``),
never from the heights they have on screen (which the sharing itself changes), so the same
data and size always get the same layout.

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

    def takes(self, lines: int | None) -> int:
        """The lines its text would take now given at most ``lines`` (None: no limit); its
        fewest when even those are more."""


class KeepInView(Vertical):
    """A vertical column of panels keeping its ``keep`` panels in view (module docstring)."""

    def on_resize(self, _event: events.Resize) -> None:
        self.fit()  # the terminal's size changed

    def on_panel_resized(self, message: Panel.Resized) -> None:
        message.stop()
        # A lane added at the gate, a ``sending:`` line, an engine's line wrapping: fitted once
        # the layout has taken the new height (fitted now, the panels' sizes are the old ones).
        self.fit()
        self.call_after_refresh(self.fit)
        self.call_after_refresh(self.let_go_if_over)

    def let_go_if_over(self) -> None:
        """A panel that grew may leave no row for the blank lines another holds (decided on
        the sizes before): those are let go, so no held blank pushes a line out of view."""
        if self.virtual_size.height <= self.scrollable_content_region.height:
            return
        for child in self.children:
            if isinstance(child, Panel) and child.held:
                child.let_go()

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
        chrome = sum(p.outer_size.height - p.content_region.height for p in yielding)
        lines = [p.takes(None) for p in yielding]
        for i in reversed(range(len(yielding))):  # the nearest the kept panel first
            over = sum(lines) + chrome - left
            if over <= 0:
                break
            lines[i] = yielding[i].takes(max(1, lines[i] - over))
        # A panel gives way in whole steps (all its GPUs on one line): what a step left over
        # goes back to the panels nearest the kept one, which may show more with it.
        for i in reversed(range(len(yielding))):
            spare = left - sum(lines) - chrome
            if spare <= 0:
                break
            lines[i] = yielding[i].takes(lines[i] + spare)
        # Rows still to spare are room for each to grow into (new text before the next fit, the
        # lines a panel holds a while): a cap, not a height.
        spare = max(0, left - sum(lines) - chrome)
        for panel, n in zip(yielding, lines, strict=True):
            panel.give_way(max(1, n + spare))
