"""The fleet screen: every engine Prometheus knows in one table, the sickest first.

k9s-like: ``s`` sorts by the next column (``S`` flips the order), ``/`` filters, ``m`` groups
by model, ``enter`` drills into a node, ``space`` marks a row; with rows marked, the limit keys
and the edit form change every marked node's gate at once, after one confirmation that lists
every node's ``old -> new``. It reads the ``FleetSession`` it is given; what only the app can
do (open a node, read the fleet again) it asks with a message (``Drill``, ``Moved``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Input

from gpuwatch.control.fleet import GateAddress, Planned, address_of, lanes_of
from gpuwatch.control.guard import ReadOnlyError
from gpuwatch.control.steering import COALESCE_S, QUEUE_STEP, Op
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.monitor.fleet import COLUMNS, SORT_KEYS
from gpuwatch.monitor.state import EventLevel
from gpuwatch.session.fleet import FleetSession
from gpuwatch.sources.promql import WINDOW, FleetRow
from gpuwatch.tui.markup import escape
from gpuwatch.tui.screens.confirm import ConfirmationModal
from gpuwatch.tui.screens.edit import EditLimits
from gpuwatch.tui.screens.results import ResultsScreen
from gpuwatch.tui.timecursor import TimeCursor
from gpuwatch.tui.widgets.events import EventsPanel
from gpuwatch.tui.widgets.fleet import FleetTable, RowKey
from gpuwatch.tui.widgets.panel import Panel

SORT_NAMES = {"health": "health", "instance": "instance", "model": "model"} | {
    c.key: c.header for c in COLUMNS
}

OUTCOME_LEVEL: dict[str, EventLevel] = {"applied": "ok", "409": "warn", "unchanged": "info"}


class FleetScreen(Screen[None]):
    BINDINGS = [
        Binding("enter", "drill", "drill down"),
        Binding("space", "mark", "mark"),
        Binding("s", "sort", "sort"),
        Binding("S", "reverse", "reverse sort", show=False),
        Binding("slash", "filter", "filter", key_display="/"),
        Binding("m", "group", "group by model"),
        Binding("escape", "clear", "clear filter/marks", show=False),
        Binding("tab", "next_lane", "lane", priority=True),
        Binding("plus", "inflight(1)", "+in-flight", key_display="+"),
        Binding("minus", "inflight(-1)", "-in-flight", key_display="-"),
        Binding("right_square_bracket", f"queue({QUEUE_STEP})", f"queue +{QUEUE_STEP}",
                key_display="]", show=False),
        Binding("left_square_bracket", f"queue(-{QUEUE_STEP})", f"queue -{QUEUE_STEP}",
                key_display="[", show=False),
        Binding("e", "edit", "edit marked"),
    ]  # fmt: skip
    DEFAULT_CSS = """
    FleetScreen { layout: vertical; }
    FleetScreen #fleet-title { height: 1; background: $panel; padding: 0 1; }
    FleetScreen #fleet-status { height: auto; max-height: 2; padding: 0 1; }
    FleetScreen #fleet-filter { display: none; height: 3; }
    FleetScreen #fleet-filter.shown { display: block; }
    FleetScreen #fleet-events { height: 7; border: round $panel-lighten-2; padding: 0 1; }
    FleetScreen.-short #fleet-events { height: 4; }
    """

    class Drill(Message):
        """Open ``row``'s node dashboard."""

        def __init__(self, row: FleetRow) -> None:
            super().__init__()
            self.row = row

    class Moved(Message):
        """The time cursor moved: read the fleet there."""

    def __init__(self, fleet: FleetSession, time_cursor: TimeCursor | None = None) -> None:
        super().__init__()
        self.fleet = fleet
        # In the past (--at): where the fleet is read (shared with the app, which reads there).
        self.time_cursor = time_cursor
        self.sort = "health"
        self.reverse = False
        self.filter_text = ""
        self.by_model = False
        self.marked: set[RowKey] = set()
        self.lane = DEFAULT_LANES[0].name
        self.lanes = [lane.name for lane in DEFAULT_LANES]
        self._pending: list[Op] = []
        self.coalesce_s = COALESCE_S  # a test widens it: what it tests is coalescing, not speed
        self._pending_what: list[str] = []
        self._flush_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Panel(id="fleet-title")
        yield Panel(id="fleet-status")
        yield Input(placeholder="filter: instance, node, model or dialect", id="fleet-filter")
        yield FleetTable(id="fleet-table")
        yield EventsPanel(id="fleet-events")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(FleetTable).focus()
        self.paint()

    def on_resize(self) -> None:
        self.set_class(self.size.height < 36, "-short")
        self.paint()

    # -- painting -------------------------------------------------------------------------

    def rows(self) -> list[Any]:
        return self.fleet.state.view(self.sort, self.reverse, self.filter_text, self.by_model)

    def paint(self) -> None:
        state = self.fleet.state
        counts = state.counts()
        summary = "  ".join(
            f"{n} {level}" for level, n in counts.items() if n and level != "NO DATA"
        )
        order = (
            ("A-Z" if self.sort in ("instance", "model") else "highest first")
            if not self.reverse
            else "flipped"
        )
        extra = []
        if self.filter_text:
            extra.append(f"filter [b]{escape(self.filter_text)}[/]")
        if self.by_model:
            extra.append("grouped by model")
        if self.marked:
            extra.append(f"[b]{len(self.marked)} marked[/], lane [b]{escape(self.lane)}[/]")
        title = (
            f"[b]gpuwatch fleet[/] · {escape(self.fleet.options.prometheus)}  "
            f"{len(state.rows)} engines  {summary}  sort [b]{escape(SORT_NAMES[self.sort])}[/] "
            f"({order})  windows {WINDOW}"
        )
        if self.fleet.options.read_only:
            title += "  [b $warn]READ-ONLY[/]"
        if self.time_cursor is not None:  # the past: the replay's RO and clock
            at = time.localtime(self.time_cursor.at)
            clock = time.strftime("%H:%M:%S", at)
            title += f"  [b reverse $warn] RO [/] [b reverse $accent] REPLAY {clock} [/]"
            title += f" [dim]{time.strftime('%Y-%m-%d', at)}[/]"
        self.query_one("#fleet-title", Panel).show(title)
        status = []
        reading = state.reading
        if reading is None:
            status.append("[dim]waiting for Prometheus' first answer...[/]")
        elif reading.error:
            kept = " [dim](the last good rows)[/]" if reading.rows else ""
            status.append(f"[$bad]{escape(reading.error)}[/]{kept}")
        status.append("  ".join(extra))
        self.query_one("#fleet-status", Panel).show("\n".join(s for s in status if s))
        self.query_one(FleetTable).render_rows(state, self.rows(), self.marked, self.sort)
        self.query_one(EventsPanel).render_events(state.events)

    # -- keys -----------------------------------------------------------------------------

    def _cursor(self) -> RowKey | None:
        return self.query_one(FleetTable).cursor_key()

    def action_drill(self) -> None:
        key = self._cursor()
        row = next((r for r in self.fleet.state.rows if r.key == key), None)
        if row is not None:
            self.post_message(self.Drill(row))

    def action_mark(self) -> None:
        key = self._cursor()
        if key is None:
            return
        self.marked.symmetric_difference_update({key})
        table = self.query_one(FleetTable)
        row = table.cursor_row
        self.paint()
        table.move_cursor(row=min(row + 1, table.row_count - 1))

    def action_sort(self) -> None:
        self.sort = SORT_KEYS[(SORT_KEYS.index(self.sort) + 1) % len(SORT_KEYS)]
        self.paint()

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self.paint()

    def action_group(self) -> None:
        self.by_model = not self.by_model
        self.paint()

    def action_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.add_class("shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "fleet-filter":
            self.filter_text = event.value.strip()
            self.paint()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "fleet-filter":
            if not event.value.strip():
                event.input.remove_class("shown")
            self.query_one(FleetTable).focus()

    def action_clear(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        if self.filter_text or box.has_class("shown"):
            box.value = ""
            box.remove_class("shown")
            self.filter_text = ""
            self.query_one(FleetTable).focus()
        else:
            self.marked.clear()
        self.paint()

    def action_next_lane(self) -> None:
        self.lane = (
            self.lanes[(self.lanes.index(self.lane) + 1) % len(self.lanes)]
            if self.lane in self.lanes
            else self.lanes[0]
        )
        self.notify(f"lane {self.lane}", timeout=2)
        self.paint()

    # -- one change for many gates --------------------------------------------------------

    def marked_gates(self) -> list[GateAddress]:
        """The gates of the marked rows (one per gate, however many of its rows are marked);
        with nothing marked, the row under the cursor."""
        keys = self.marked or ({k} if (k := self._cursor()) else set())
        seen: dict[str, GateAddress] = {}
        for row in self.fleet.state.rows:
            if row.key in keys and row.gate and row.gate not in seen:
                seen[row.gate] = address_of(row.gate, row.node, self.fleet.options.gates)
        return list(seen.values())

    def action_inflight(self, delta: int) -> None:
        lane = self.lane
        self._change(
            f"{lane}.max_inflight {delta:+d}",
            [(lane, "max_inflight", lambda v: max(0, (v or 0) + delta))],
        )

    def action_queue(self, delta: int) -> None:
        lane = self.lane
        self._change(
            f"{lane}.max_queue {delta:+d}",
            [(lane, "max_queue", lambda v: max(0, (v or 0) + delta))],
        )

    def action_edit(self) -> None:
        self._change(f"edit lane {self.lane}", None)

    def _change(self, what: str, ops: list[Op] | None) -> None:
        """Keys pressed within 0.4 s of each other become one change (as on a node: ``+ + +``
        is one confirmation of +3); the edit form goes at once."""
        if not self.marked_gates():
            self.notify(
                "no gate on the marked rows: mark nodes that have one (space)", severity="warning"
            )
            return
        if ops is None:
            self._start(what, None)
            return
        self._pending.extend(ops)
        self._pending_what.append(what)
        if self._flush_timer is not None:
            self._flush_timer.stop()
        self._flush_timer = self.set_timer(self.coalesce_s, self._flush)

    def _flush(self) -> None:
        ops, whats = self._pending, self._pending_what
        self._pending, self._pending_what, self._flush_timer = [], [], None
        if ops:
            self._start(", ".join(dict.fromkeys(whats)), ops)

    def _start(self, what: str, ops: list[Op] | None) -> None:
        gates = self.marked_gates()
        if gates:
            self.run_worker(
                self._run_change(what, gates, ops), group="fleet-change", exclusive=True
            )

    async def _run_change(self, what: str, gates: list[GateAddress], ops: list[Op] | None) -> None:
        change = self.fleet.change
        try:
            read = await change.read(gates)
        except ReadOnlyError as exc:
            self.notify(str(exc), severity="error")
            self.fleet.state.event("warn", str(exc))
            return
        self.lanes = lanes_of(read) or self.lanes
        if ops is None:
            ops = await self._edit_ops(read)
            if ops is None:
                return
        planned = change.plan(read, ops)
        lines = [line for p in planned for line in p.summary()]
        if not any(p.problem is None for p in planned):
            self.notify("nothing to apply: " + "; ".join(lines), severity="warning")
            return
        title = f"{what} on {len(planned)} gate(s)"
        if not await self.app.push_screen_wait(ConfirmationModal(title, lines)):
            self.notify("change cancelled: nothing sent")
            return
        outcomes = await change.apply(planned)
        for o in outcomes:
            level = OUTCOME_LEVEL.get(o.result, "bad")
            self.fleet.state.event(
                level, f"{o.gate.node} ({o.gate.instance}): {o.result} {o.detail}"
            )
        await self.app.push_screen_wait(ResultsScreen(title, outcomes))
        self.paint()

    async def _edit_ops(self, read: list[Planned]) -> list[Op] | None:
        """The edit form on the first readable gate's lane; its values go to every gate."""
        base = next((p for p in read if p.problem is None and self.lane in p.before.lanes), None)
        if base is None:
            self.notify(f"no marked gate answered with a lane {self.lane}", severity="warning")
            return None
        label = f"{len(read)} gate(s), shown: {base.gate.node}"
        changes = await self.app.push_screen_wait(EditLimits(label, self.lane, base.before))
        if not changes:
            return None
        lane = self.lane
        return [(lane, k, _constant(v)) for k, v in changes.items()]


def _constant(value: Any) -> Callable[[Any], Any]:
    """An op's new value that does not depend on the old one (the edit form's fields)."""
    return lambda _old: value
