"""``e``: every limit of the selected lane in one form, validated as you type; Apply sends one
PATCH with what changed."""

from __future__ import annotations

from typing import Generic, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.validation import Function, Integer, Number, ValidationResult, Validator
from textual.widgets import Button, Input, Label, Select, Static

from gpuwatch.adminapi import (
    ADMISSION_POLICIES,
    MEDIA_CAPS,
    POLICIES,
    UPSTREAM_TIMEOUTS,
    LaneLimits,
    Limits,
    LimitValue,
)
from gpuwatch.tui.markup import escape

V = TypeVar("V")

FIELDS = (
    ("max_inflight", "max in flight", "0 admits nothing new"),
    ("max_queue", "max queued", ""),
    ("queue_timeout_s", "queue timeout (s)", ""),
    ("max_queue_wait_s", "max queue wait (s)", "empty: the TTFT target less prefill"),
    # A silent upstream: no first byte of the answer, or no next chunk, within these.
    ("upstream_first_byte_timeout_s", "upstream 1st byte (s)", "empty: no limit"),
    ("upstream_idle_timeout_s", "upstream idle (s)", "empty: no limit"),
    ("max_prompt_tokens", "max prompt tokens", "empty: no cap"),
    ("max_output_tokens", "max output tokens", "empty: no cap"),
    ("max_inflight_tokens", "max tokens in flight", "empty: no budget"),
    # Adaptive admission: the max_* above are the upper bounds of the effective limits.
    ("target_ttft_p99_s", "adaptive p99 TTFT (s)", "empty: no target"),
    ("min_inflight", "adaptive min in flight", ""),
    ("min_inflight_tokens", "adaptive min tokens", "empty: no lower bound"),
)
# The image and embedding caps, in the form of the lanes they are for (and of any lane that
# has one set): a chat lane has no use for max_pixels.
MEDIA_FIELDS = {
    "max_pixels": ("max pixels (w x h)", "empty: no cap"),
    "max_steps": ("max steps", "empty: no cap"),
    "max_n": ("max images (n)", "empty: no cap"),
    "max_inputs": ("max inputs per request", "empty: no cap (always refused over)"),
    "max_input_tokens": ("max tokens per input", "empty: no cap"),
}
MEDIA_LANES = {
    "image": ("max_pixels", "max_steps", "max_n"),
    "embed": ("max_inputs", "max_input_tokens"),
}


def fields_for(name: str, lane: LaneLimits) -> tuple[tuple[str, str, str], ...]:
    media = [k for k in MEDIA_CAPS if k in MEDIA_LANES.get(name, ()) or lane.value(k) is not None]
    return FIELDS + tuple((k, *MEDIA_FIELDS[k]) for k in media)


def _optional_int(text: str) -> bool:
    return text.strip() == "" or (text.strip().isdigit() and int(text) >= 1)


def _optional_seconds(text: str, allow_zero: bool = False) -> bool:
    if text.strip() == "":
        return True
    try:
        value = float(text)
    except ValueError:
        return False
    return (value >= 0 if allow_zero else value > 0) and value <= 86_400


def _optional_wait(text: str) -> bool:
    return _optional_seconds(text, allow_zero=True)


VALIDATORS: dict[str, list[Validator]] = {
    "max_inflight": [Integer(minimum=0, failure_description="a whole number >= 0")],
    "max_queue": [Integer(minimum=0, failure_description="a whole number >= 0")],
    "queue_timeout_s": [Number(minimum=0.001, failure_description="a number of seconds > 0")],
    "max_prompt_tokens": [Function(_optional_int, "empty, or a whole number >= 1")],
    "max_output_tokens": [Function(_optional_int, "empty, or a whole number >= 1")],
    "max_inflight_tokens": [Function(_optional_int, "empty, or a whole number >= 1")],
    "target_ttft_p99_s": [Function(_optional_seconds, "empty, or a number of seconds > 0")],
    "max_queue_wait_s": [Function(_optional_wait, "empty, or a number of seconds >= 0")],
    **{
        k: [Function(_optional_seconds, "empty, or a number of seconds > 0")]
        for k in UPSTREAM_TIMEOUTS
    },
    "min_inflight": [Function(_optional_int, "a whole number >= 1")],
    "min_inflight_tokens": [Function(_optional_int, "empty, or a whole number >= 1")],
    **{k: [Function(_optional_int, "empty, or a whole number >= 1")] for k in MEDIA_CAPS},
}


def parse_field(key: str, text: str) -> LimitValue:
    text = text.strip()
    if key in ("max_prompt_tokens", "max_output_tokens", "max_inflight_tokens", *MEDIA_CAPS) and (
        text == ""
    ):
        return None
    if (
        key
        in (
            "target_ttft_p99_s",
            "max_queue_wait_s",
            "min_inflight",
            "min_inflight_tokens",
            *UPSTREAM_TIMEOUTS,
        )
        and text == ""
    ):
        # (min_inflight is empty only from a gate without adaptive admission: left as it is)
        return None
    if key in ("queue_timeout_s", "target_ttft_p99_s", "max_queue_wait_s", *UPSTREAM_TIMEOUTS):
        return float(text)
    return int(text)


class ChangeForm(ModalScreen[dict[str, V] | None], Generic[V]):
    """A form of values checked as you type, each input's error on the line below it
    (``#<id>-error``); Apply (or Enter in a field) dismisses it with ``changes()``, what
    differs from the values it was opened with, unless a field is invalid. The gate lane's
    form and a stack's knobs' form (``edit_knobs.py``) are both one."""

    # The subclasses set only their widths (the labels' column and the box).
    DEFAULT_CSS = """
    ChangeForm { align: center middle; }
    ChangeForm > Vertical {
        width: 72; height: auto; max-height: 100%; overflow-y: auto;
        border: thick $primary; background: $surface; padding: 1 2;
    }
    ChangeForm .row { height: 3; }
    ChangeForm .row Label { width: 22; padding-top: 1; }
    ChangeForm .row Input, ChangeForm .row Select { width: 1fr; }
    ChangeForm .error { color: $bad; height: 1; padding-left: 22; }
    ChangeForm #buttons { height: auto; align: right middle; }
    ChangeForm Button { margin-left: 2; }
    """
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def changes(self) -> dict[str, V] | None:
        raise NotImplementedError

    def on_input_changed(self, event: Input.Changed) -> None:
        self._show(event.input.id or "", event.validation_result)

    def _show(self, key: str, result: ValidationResult | None) -> None:
        message = (
            "" if result is None or result.is_valid else "; ".join(result.failure_descriptions)
        )
        self.query_one(f"#{key}-error", Static).update(escape(message))

    def on_input_submitted(self) -> None:
        self._apply()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            self._apply()
        else:
            self.dismiss(None)

    def _apply(self) -> None:
        changes = self.changes()
        if changes is not None:
            self.dismiss(changes)

    def action_cancel(self) -> None:
        self.dismiss(None)


class EditLimits(ChangeForm[LimitValue]):
    def __init__(self, gate: str, lane: str, limits: Limits) -> None:
        super().__init__()
        self.gate, self.lane, self.limits = gate, lane, limits

    def compose(self) -> ComposeResult:
        with Vertical():
            version = self.limits.version
            yield Static(
                f"[b]lane {escape(self.lane)}[/] on {escape(self.gate)}  [dim]v{version}[/]"
            )
            lane = self.limits.lanes[self.lane]
            for key, label, hint in fields_for(self.lane, lane):
                value = lane.value(key)
                with Horizontal(classes="row"):
                    yield Label(label)
                    yield Input(
                        ""
                        if value is None
                        else f"{value:g}"
                        if isinstance(value, float)
                        else str(value),
                        placeholder=hint,
                        id=key,
                        validators=VALIDATORS[key],
                    )
                yield Static("", classes="error", id=f"{key}-error")
            with Horizontal(classes="row"):
                yield Label("output cap policy")
                yield Select(
                    [(p, p) for p in POLICIES],
                    value=lane.output_tokens_policy,
                    allow_blank=False,
                    id="output_tokens_policy",
                )
            with Horizontal(classes="row"):
                yield Label("admission")
                yield Select(
                    [(p, p) for p in ADMISSION_POLICIES],
                    value=lane.policy,
                    allow_blank=False,
                    id="policy",
                )
            if any(k for k, _, _ in fields_for(self.lane, lane) if k in MEDIA_CAPS):
                with Horizontal(classes="row"):
                    yield Label("image/embed policy")
                    yield Select(
                        [(p, p) for p in POLICIES],
                        value=lane.media_policy,
                        allow_blank=False,
                        id="media_policy",
                    )
            with Horizontal(id="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Apply", id="apply", variant="primary")

    def changes(self) -> dict[str, LimitValue] | None:
        """What differs from the lane's current limits, or None when a field is invalid."""
        lane = self.limits.lanes[self.lane]
        out: dict[str, LimitValue] = {}
        valid = True
        for key, _, _ in fields_for(self.lane, lane):
            field = self.query_one(f"#{key}", Input)
            result = field.validate(field.value)
            self._show(key, result)
            if result is not None and not result.is_valid:
                valid = False
                continue
            value = parse_field(key, field.value)
            if value != lane.value(key):
                out[key] = value
        # The selects hold one of their options (no blank): a policy's name.
        policy = str(self.query_one("#output_tokens_policy", Select).value)
        if policy != lane.output_tokens_policy:
            out["output_tokens_policy"] = policy
        admission = str(self.query_one("#policy", Select).value)
        if admission != lane.policy:
            out["policy"] = admission
        for media in self.query("#media_policy").results(Select):
            if str(media.value) != lane.media_policy:
                out["media_policy"] = str(media.value)
        return out if valid else None
