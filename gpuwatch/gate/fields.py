"""One field of a request body, type-checked: the ``BodyError`` that names a field of the wrong
type, and a count (an output bound, steps, ``n``) in every form a server accepts. Pure.

vLLM coerces ``500.0`` and ``"500"`` to 500, so they are numbers here too: a cap that skipped
them would let the upstream read a bound the gate never checked.
"""

from __future__ import annotations

import math
import re
from typing import Any

from gpuwatch.errors import GpuwatchError

_NUMERIC = re.compile(r"\s*\+?(\d{1,18})(?:\.0*)?\s*")


class BodyError(GpuwatchError, ValueError):
    """A body field of the wrong type or form; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def count(key: str, value: Any) -> int | None:
    """A count as the upstream will read it (None for absent or null); BodyError for what is
    no whole number."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise BodyError(key, "must be an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise BodyError(key, f"must be an integer, got {value!r}")
        return int(value)
    if isinstance(value, str):
        match = _NUMERIC.fullmatch(value)
        if match is None:
            raise BodyError(key, f"must be an integer, got a string {value[:20]!r}")
        return int(match.group(1))
    raise BodyError(key, f"must be an integer, got {type(value).__name__}")
