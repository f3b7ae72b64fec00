"""The dashboard's side of steering: ``control.steering.Steering`` shown with Textual.

The session's ``NodeView`` reads the gate's state from its monitor; ``DashboardControl`` is the
rest of ``SteeringView`` (``session.node.SteeringUI``): notifications, the confirmation and the
edit form as modals over the screen that shows the session, and its repaint. Every decision
lives in ``Steering``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from textual.screen import Screen

from gpuwatch.adminapi import Limits, LimitValue
from gpuwatch.control.knobs.base import Knob, KnobValue
from gpuwatch.control.steering import Severity
from gpuwatch.tui.screens.confirm import ConfirmationModal
from gpuwatch.tui.screens.edit import EditLimits
from gpuwatch.tui.screens.edit_knobs import EditKnobs

# What the keys do on a knob row (control/knobs/steer.py): bindings of their own on the gate's
# keys (tab + - * / p e u), so that the footer says what a key does on the row selected. They
# are offered on a knob row alone, and the gate's meanings of those keys on a lane row alone.
KNOB_ACTIONS = frozenset({"knob_next", "knob_step", "knob_pause", "knob_edit", "knob_undo"})
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
    """``SteeringUI`` for the screen showing a session: ``repaint`` shows what changed."""

    def __init__(self, screen: Screen[Any], repaint: Callable[[], None]) -> None:
        self.screen = screen
        self.repaint = repaint

    def notify(self, text: str, severity: Severity = "information") -> None:
        self.screen.notify(text, severity=severity)

    async def confirm(self, title: str, details: list[str]) -> bool:
        return bool(await self._ask(ConfirmationModal(title, details)))

    async def edit_form(self, gate: str, lane: str, limits: Limits) -> dict[str, LimitValue] | None:
        changes = await self._ask(EditLimits(gate, lane, limits))
        return changes if isinstance(changes, dict) else None

    async def edit_knobs(self, title: str, knobs: list[Knob]) -> dict[str, KnobValue] | None:
        changes = await self._ask(EditKnobs(title, knobs))
        return changes if isinstance(changes, dict) else None

    def changed(self) -> None:
        self.repaint()

    async def _ask(self, modal: Screen[Any]) -> Any:
        """Push a modal and wait for its answer (from a plain task, not only a worker)."""
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(result: Any) -> None:
            if not answer.done():
                answer.set_result(result)

        self.screen.app.push_screen(modal, callback=done)
        return await answer
