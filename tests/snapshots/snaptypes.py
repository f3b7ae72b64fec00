"""The snapshot fixture's type: pytest-textual-snapshot annotates ``snap_compare`` as taking a
path only, while it takes an app, key presses, a size and a ``run_before``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from textual.app import App
from textual.pilot import Pilot

AnyPilot = Pilot[Any]


class SnapCompare(Protocol):
    def __call__(
        self,
        app: App[Any],
        press: Iterable[str] = (),
        terminal_size: tuple[int, int] = (80, 24),
        run_before: Callable[[AnyPilot], Awaitable[None] | None] | None = None,
    ) -> bool: ...
