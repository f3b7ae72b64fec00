"""What every steering's test view shares (``control.steering.OperatorView``): it remembers what
it was told and answers the confirmations as set. The gate's test view and the knobs' add what
their steering reads."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RecordingOperator:
    confirm_answer: bool = True
    notes: list[tuple[str, str]] = field(default_factory=list)  # (severity, text)
    events: list[tuple[str, str]] = field(default_factory=list)  # (level, text)
    asked: list[list[str]] = field(default_factory=list)  # each confirmation's details

    def event(self, level: str, text: str) -> None:
        self.events.append((level, text))

    def notify(self, text: str, severity: str = "information") -> None:
        self.notes.append((severity, text))

    async def confirm(self, title: str, details: list[str]) -> bool:
        self.asked.append(details)
        return self.confirm_answer

    def changed(self) -> None:
        pass
