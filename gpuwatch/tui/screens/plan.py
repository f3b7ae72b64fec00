"""``P``: the last ``gpuwatch plan sweep`` saved for this gate: the knee, the boring zone, the
recommended limits beside those in force, and Apply (the steering's confirmation, If-Match and
audit, as this operator)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, DataTable, Footer, Static

from gpuwatch.adminapi import Limits
from gpuwatch.plan.planner import Plan
from gpuwatch.plan.report import HEADERS, check_text, probe_rows, spread_text
from gpuwatch.tui.markup import escape


def _show(value: Any) -> str:
    return "null" if value is None else str(value)


class PlanScreen(Screen[bool]):
    """Dismissed with True when the operator pressed Apply."""

    BINDINGS = [Binding("escape,P,q", "dismiss(False)", "back")]
    DEFAULT_CSS = """
    PlanScreen #title { height: 1; background: $panel; }
    PlanScreen #summary { height: auto; padding: 0 1; }
    PlanScreen #limits { height: auto; max-height: 8; }
    PlanScreen #probes { height: 1fr; }
    PlanScreen #buttons { height: auto; padding: 0 1; }
    PlanScreen Button { margin-right: 2; }
    """

    def __init__(
        self,
        plan: Plan | None,
        in_force: Limits | None,
        gate_url: str,
        hint: str | None = None,
    ) -> None:
        super().__init__()
        self.plan = plan
        self.in_force = in_force
        self.gate_url = gate_url
        self.hint = hint

    def compose(self) -> ComposeResult:
        yield Static(
            f"[b]plan[/] for the gate {escape(self.gate_url)}  [dim]esc to go back[/]", id="title"
        )
        with Vertical():
            yield Static(self._summary(), id="summary")
            if self.plan is not None and self.plan.recommended is not None:
                yield DataTable(id="limits", cursor_type="none")
                with Horizontal(id="buttons"):
                    yield Button("Apply", id="apply", variant="warning")
                    yield Button("Back", id="back")
            if self.plan is not None and self.plan.probes:
                yield DataTable(id="probes", zebra_stripes=True, cursor_type="row")
        yield Footer()

    def _summary(self) -> str:
        plan = self.plan
        if plan is None:
            return escape(self.hint or "no plan saved for this gate")
        lines = [
            f"{escape(plan.subject)} ({plan.mode}), {escape(plan.created)}; {escape(plan.traffic)}",
            f"SLO: TTFT <= {plan.target.ttft_s:g} s for >= {plan.target.goodput:.1%} of arrivals",
        ]
        if plan.knee is None or plan.boring is None:
            lines.append("[b]no knee found[/]: " + escape("; ".join(plan.notes)))
        else:
            lines.append(
                f"knee [b]{plan.knee:.2f} req/s[/]; boring zone [b]<= {plan.boring:.2f} req/s[/]"
                f" (x{plan.headroom:g})"
            )
            if (at_knee := plan.at_knee) is not None:
                lines.append(escape(spread_text(at_knee)))
        lines.extend(escape(check_text(c, plan.target.goodput)) for c in plan.checks)
        return "\n".join(lines)

    def on_mount(self) -> None:
        plan = self.plan
        if plan is None:
            return
        rec = plan.recommended
        if rec is not None:
            table = self.query_one("#limits", DataTable)
            table.add_columns(f"lane {rec.lane}", "now", "plan", "why")
            lane = self.in_force.lanes.get(rec.lane) if self.in_force else None
            for key, value in rec.limits().items():
                now = _show(lane.value(key)) if lane else "?"
                table.add_row(key, now, _show(value), rec.reasons.get(key, ""))
            self.query_one("#back", Button).focus()
        if plan.probes:
            probes = self.query_one("#probes", DataTable)
            probes.add_columns(*HEADERS)
            for row in probe_rows(plan.probes):
                probes.add_row(*row)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        # Apply is the dashboard's to send (through its steering), once this screen is gone:
        # the confirmation it asks for must answer to the screen under it.
        self.dismiss(event.button.id == "apply")
