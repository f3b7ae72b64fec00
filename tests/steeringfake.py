"""The one stand-in for the dashboard behind ``Steering``: a ``SteeringView`` that remembers what
it was told and answers its modals as set (tests/unit/test_steering_control.py drives it with a
gate in memory, tests/functional/test_steering.py with a real gate)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuwatch.adminapi import Limits, LimitValue
from tests.operatorview import RecordingOperator


@dataclass
class RecordingView(RecordingOperator):
    """What the screen would show (``current``, ``notes``, ``events``), what it asked
    (``titles``, ``asked``, ``forms``) and how often it was told to redraw (``changes``); the
    gate's read failure (``reason``), the operator's answers (``confirm_answer``,
    ``form_answer``) and each lane's busy tenants (``busy``) as a test sets them."""

    current: Limits | None = None
    reason: str | None = None
    form_answer: dict[str, LimitValue] | None = None
    busy: dict[str, list[str]] = field(default_factory=dict)
    titles: list[str] = field(default_factory=list)
    forms: list[tuple[str, int]] = field(default_factory=list)
    changes: int = 0

    def limits(self) -> Limits | None:
        return self.current

    def gate_reason(self) -> str | None:
        return self.reason

    def show_limits(self, limits: Limits) -> None:
        self.current = limits

    async def confirm(self, title: str, details: list[str]) -> bool:
        self.titles.append(title)
        return await super().confirm(title, details)

    async def edit_form(self, lane: str, limits: Limits) -> dict[str, LimitValue] | None:
        self.forms.append((lane, limits.version))
        return self.form_answer

    def tenants(self, lane: str) -> list[str]:
        return self.busy.get(lane, [])

    def changed(self) -> None:  # counted here; the knobs' view ignores it
        self.changes += 1
