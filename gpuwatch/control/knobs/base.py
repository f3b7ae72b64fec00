"""The types every knob adapter shares: a knob as read, a change to one, the stack's endpoint,
the adapter's protocol and its errors.

A stack's knobs carry no version: the shared apply path (``apply.py``) reads them again right
before a change and refuses when one moved since it was shown (``KnobConflict``, the client-side
409). An adapter's ``write`` is the raw write only, after those checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from gpuwatch.config import KNOB_STACKS
from gpuwatch.errors import GpuwatchError
from gpuwatch.fmt import clip

KnobValue = int | float | bool | None  # None: "no limit", where the stack allows it
KnobKind = Literal["int", "float", "bool"]
STACKS = KNOB_STACKS  # "ray", "dynamo", "litellm", "sglang", "vllm"


def show_value(value: KnobValue) -> str:
    """A value as the operator reads it: ``none`` for no limit, ``true``/``false``, ``0.85``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class Knob:
    stack: str  # "ray" | "dynamo" | "litellm" | "sglang" | "vllm"
    # What it belongs to: Ray "app/deployment", a Dynamo model name, LiteLLM "model:<id>" /
    # "key:<alias or hashed token>" / "team:<id>", SGLang / vLLM "server".
    target: str
    name: str  # the stack's own name ("max_ongoing_requests", "paused"); never holds a dot
    value: KnobValue  # as read from the stack just now
    kind: KnobKind
    minimum: float | None = None  # bounds the stack enforces, checked before sending
    maximum: float | None = None
    nullable: bool = False  # may be set to None (no limit)

    @property
    def label(self) -> str:
        # Targets and names come from the stack: clipped, so a hostile one stays one short line.
        return f"{self.stack} {clip(self.target, 80)} {clip(self.name, 60)}"

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies the knob across reads (its value aside)."""
        return (self.stack, self.target, self.name)

    def problem(self, value: KnobValue) -> str | None:
        """Why ``value`` cannot be this knob's (kind, bounds, no limit), or None."""
        if value is None:
            return None if self.nullable else "cannot be none (no limit)"
        if self.kind == "bool":
            return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
        if isinstance(value, bool):
            return f"must be a number, got {str(value).lower()}"
        if self.kind == "int" and not isinstance(value, int):
            return f"must be an integer, got {value!r}"
        if not math.isfinite(value):
            return f"must be a finite number, got {value!r}"
        if self.minimum is not None and value < self.minimum:
            return f"must be at least {self.minimum:g}, got {show_value(value)}"
        if self.maximum is not None and value > self.maximum:
            return f"must be at most {self.maximum:g}, got {show_value(value)}"
        return None


def same_value(a: KnobValue, b: KnobValue) -> bool:
    """Equal as knob values: a bool never equals a number (True is not 1), and floats that a
    stack stored and printed back agree to a part in a billion."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return type(a) is type(b) and a == b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


@dataclass(frozen=True)
class KnobChange:
    knob: Knob  # as SHOWN to the operator: knob.value is what they saw
    value: KnobValue  # what they want

    def describe(self) -> str:
        """``ray app1/LLM max_ongoing_requests 8 -> 4``"""
        return f"{self.knob.label} {show_value(self.knob.value)} -> {show_value(self.value)}"

    def inverse(self, now: Knob) -> KnobChange:
        """The undo of this change, from ``now`` (the knob as read back after it)."""
        return KnobChange(now, self.knob.value)


class KnobError(GpuwatchError):
    """A stack's refusal, an unreachable stack, or an answer that is not its API; the message
    says where."""


class KnobConflict(KnobError):
    """The knob changed since it was shown (the client-side 409): nothing was written."""

    def __init__(self, knob: Knob, shown: KnobValue, now: KnobValue) -> None:
        super().__init__(
            f"{knob.label} changed since it was shown ({show_value(shown)} -> "
            f"{show_value(now)}): nothing written; look again and retry"
        )
        self.knob = knob
        self.shown = shown
        self.now = now


@dataclass(frozen=True)
class KnobEndpoint:
    stack: str
    url: str  # the stack's admin API base URL
    credential: str | None = None  # read from credential_file by the caller, never argv
    timeout_s: float = 3.0

    @property
    def base(self) -> str:
        return self.url.rstrip("/")


class KnobAdapter(Protocol):
    endpoint: KnobEndpoint

    async def read(self) -> list[Knob]:
        """Every knob the stack has now; KnobError when it cannot say."""
        ...

    async def write(self, changes: Sequence[KnobChange]) -> None:
        """The raw write only: the shared path (``apply.py``) has already checked the guard,
        the bounds and the conflicts. Ray: GET the whole config right before, change only the
        changed fields, PUT it back whole (nothing else touched)."""
        ...

    async def close(self) -> None: ...
