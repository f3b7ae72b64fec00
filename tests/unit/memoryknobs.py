"""A stack held in memory behind the KnobAdapter protocol, for the apply path's unit tests:
it counts what is sent, and can move a value behind our back, refuse, or keep its own value."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from gpuwatch.control.knobs.base import Knob, KnobChange, KnobEndpoint, KnobError


class MemoryKnobs:
    def __init__(self, knobs: Sequence[Knob], stack: str = "ray") -> None:
        self.endpoint = KnobEndpoint(stack, "http://127.0.0.1:1")
        self.knobs = {k.key: k for k in knobs}
        self.reads = 0
        self.writes: list[list[KnobChange]] = []
        self.on_read: Callable[[MemoryKnobs], None] | None = None  # e.g. a change behind our back
        self.refuse: str | None = None  # write raises KnobError(refuse) after the first change
        self.keep: set[str] = set()  # names of knobs the stack silently keeps as they are
        self.closed = False

    async def read(self) -> list[Knob]:
        self.reads += 1
        if self.on_read is not None:
            self.on_read(self)
        return list(self.knobs.values())

    def set(self, name: str, value: int | float | bool | None) -> None:
        key = next(k for k in self.knobs if k[2] == name)
        self.knobs[key] = replace(self.knobs[key], value=value)

    async def write(self, changes: Sequence[KnobChange]) -> None:
        self.writes.append(list(changes))
        for n, change in enumerate(changes):
            if self.refuse is not None and n == 1:
                raise KnobError(self.refuse)
            if change.knob.name not in self.keep:
                self.set(change.knob.name, change.value)

    async def close(self) -> None:
        self.closed = True


def knob(name: str, value: int | float | bool | None, **kw: object) -> Knob:
    kind = "bool" if isinstance(value, bool) else "float" if isinstance(value, float) else "int"
    return Knob("ray", "app1/LLM", name, value, kind, **kw)  # type: ignore[arg-type]
