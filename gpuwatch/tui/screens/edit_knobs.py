"""``e`` on a knob row: every knob of that target (a Ray deployment, a Dynamo model, a vLLM
server) in one form, each checked as you type against the kind and bounds the stack enforces;
Apply sends one change with what differs, through the same path as the keys."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.validation import ValidationResult, Validator
from textual.widgets import Button, Input, Label, Select, Static

from gpuwatch.control.knobs.base import Knob, KnobValue, same_value, show_value
from gpuwatch.errors import GpuwatchError
from gpuwatch.tui.markup import escape
from gpuwatch.tui.screens.edit import ChangeForm


class NotAValue(GpuwatchError):
    """Text that is no value of the knob's kind (the validator shows why)."""


def parse_knob(knob: Knob, text: str) -> KnobValue:
    """The value ``text`` is for ``knob``: empty is no limit; NotAValue when it is none."""
    text = text.strip()
    if text == "" or text.lower() == "none":
        return None
    try:
        return int(text) if knob.kind == "int" else float(text)
    except ValueError:
        kind = "a whole number" if knob.kind == "int" else "a number"
        raise NotAValue(f"{kind}{', or empty for no limit' if knob.nullable else ''}") from None


def knob_problem(knob: Knob, text: str) -> str | None:
    """Why ``text`` cannot be sent for ``knob`` (the stack's bounds, its kind), or None."""
    try:
        value = parse_knob(knob, text)
    except NotAValue as exc:
        return str(exc)
    if value is None and knob.value is None:
        return None  # never set (a Dynamo threshold), and left so: no change
    return knob.problem(value)


class KnobValidator(Validator):
    def __init__(self, knob: Knob) -> None:
        super().__init__()
        self.knob = knob

    def validate(self, value: str) -> ValidationResult:
        problem = knob_problem(self.knob, value)
        return self.failure(problem) if problem else self.success()


def hint(knob: Knob) -> str:
    bounds = [
        f">= {knob.minimum:g}" if knob.minimum is not None else "",
        f"<= {knob.maximum:g}" if knob.maximum is not None else "",
    ]
    shown = " and ".join(b for b in bounds if b)
    return ", ".join(p for p in (shown, "empty: no limit" if knob.nullable else "") if p)


class EditKnobs(ChangeForm[KnobValue]):
    # ChangeForm's layout, with room for a knob's longer names.
    DEFAULT_CSS = """
    EditKnobs > Vertical { width: 76; }
    EditKnobs .row Label { width: 34; }
    EditKnobs .error { padding-left: 34; }
    """

    def __init__(self, title: str, knobs: list[Knob]) -> None:
        super().__init__()
        self.title_text = title
        self.knobs = knobs

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"[b]{escape(self.title_text)}[/]  [dim]as read just now[/]")
            for n, knob in enumerate(self.knobs):
                with Horizontal(classes="row"):
                    yield Label(escape(knob.name[:34]))
                    if knob.kind == "bool":
                        yield Select(
                            [("true", True), ("false", False)],
                            value=bool(knob.value),
                            allow_blank=False,
                            id=f"knob{n}",
                        )
                    else:
                        yield Input(
                            "" if knob.value is None else show_value(knob.value),
                            placeholder=hint(knob),
                            id=f"knob{n}",
                            validators=[KnobValidator(knob)],
                        )
                yield Static("", classes="error", id=f"knob{n}-error")
            with Horizontal(id="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Apply", id="apply", variant="primary")

    def changes(self) -> dict[str, KnobValue] | None:
        """New values by name where they differ from the knobs as read, or None when a field
        is invalid."""
        out: dict[str, KnobValue] = {}
        valid = True
        for n, knob in enumerate(self.knobs):
            value: KnobValue
            if knob.kind == "bool":
                value = bool(self.query_one(f"#knob{n}", Select).value)
            else:
                field = self.query_one(f"#knob{n}", Input)
                result = field.validate(field.value)
                self._show(f"knob{n}", result)
                if result is not None and not result.is_valid:
                    valid = False
                    continue
                value = parse_knob(knob, field.value)
            if not same_value(value, knob.value):
                out[knob.name] = value
        return out if valid else None
