"""The dashboard's side of steering: ``control.steering.Steering`` shown with Textual.

``DashboardControl`` implements ``SteeringView`` over the app (its monitor, notifications,
modals) and nothing else; every decision lives in ``Steering``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gpuwatch.adminapi import Limits, LimitValue
from gpuwatch.control.steering import Severity
from gpuwatch.monitor.state import EventLevel
from gpuwatch.tui.screens.confirm import ConfirmationModal
from gpuwatch.tui.screens.edit import EditLimits

if TYPE_CHECKING:
    from textual.screen import Screen

    from gpuwatch.tui.app import GpuwatchApp

# The actions that steer: greyed in the footer when there is nothing to steer.
CONTROL_ACTIONS = frozenset(
    {
        "inflight",
        "scale_inflight",
        "queue",
        "output",
        "budget",
        "pause",
        "adaptive",
        "edit",
        "undo",
        "select_lane",
        "next_lane",
        "next_tenant",
        "tenant_pause",
        "tenant_cap",
    }
)


class DashboardControl:
    """``SteeringView`` for the app: the monitor's gate state, notifications and modals."""

    def __init__(self, app: GpuwatchApp) -> None:
        self.app = app

    def limits(self) -> Limits | None:
        # A gate that does not answer has no limits to steer: its last ones may be gone.
        gate = self.app.monitor.gate
        return gate.limits if gate and gate.status.state == "UP" else None

    def gate_reason(self) -> str | None:
        gate = self.app.monitor.gate
        return gate.status.reason if gate else None

    def show_limits(self, limits: Limits) -> None:
        self.app.monitor.apply_gate(limits, None, current=True)

    def event(self, level: EventLevel, text: str) -> None:
        self.app.monitor.event(level, text)

    def notify(self, text: str, severity: Severity = "information") -> None:
        self.app.notify(text, severity=severity)

    async def confirm(self, title: str, details: list[str]) -> bool:
        return bool(await self._ask(ConfirmationModal(title, details)))

    async def edit_form(self, lane: str, limits: Limits) -> dict[str, LimitValue] | None:
        gate = self.app.monitor.gate
        changes = await self._ask(EditLimits(gate.url if gate else "?", lane, limits))
        return changes if isinstance(changes, dict) else None

    def tenants(self, lane: str) -> list[str]:
        gate = self.app.monitor.gate
        live = gate.lanes.get(lane) if gate else None
        return [t.id for t in live.tenants] if live else []

    def changed(self) -> None:
        self.app.repaint()

    async def _ask(self, screen: Screen[Any]) -> Any:
        """Push a modal and wait for its answer (from a plain task, not only a worker)."""
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(result: Any) -> None:
            if not answer.done():
                answer.set_result(result)

        self.app.push_screen(screen, callback=done)
        return await answer
