"""A lane's prompt and output caps applied to a request's prompt length and output bound
(``request.Output``, read once with the request), and the tokens it reserves. Pure: no I/O.

The output cap covers each name and each form a server accepts for a bound (``request``
reads them all), and every answer the request asks for.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuwatch.errors import GpuwatchError
from gpuwatch.gate.limits import LaneLimits
from gpuwatch.gate.request import OUTPUT_KEYS, Clamp, Output

_UNCHANGED = Clamp()


class OverCap(GpuwatchError):
    """An output bound over the cap under the ``reject`` policy; ``str()`` says which."""


def cap_output(output: Output, cap: int, reject: bool, default_key: str, lane: str) -> Clamp:
    """Hold the request's output, over all the answers it asks for, to ``cap`` tokens: clamp
    every output bound over ``cap // answers`` (``reject``: raise OverCap instead); set
    ``default_key`` when the body has none."""
    n = output.answers
    per_answer = cap // n
    if per_answer < 1:
        raise OverCap(f"{n} answers cannot fit lane {lane!r}'s output cap of {cap} tokens")
    present = output.bounds
    # A bound below 1 means "no bound" to some servers (llama.cpp's -1: until the context is
    # full): under a cap it is as far over as a bound can be.
    over = [k for k, v in present.items() if v is not None and (v > per_answer or v < 1)]
    if over and reject:
        each = f" for each of {n} answers" if n > 1 else ""
        raise OverCap(f"{over[0]} {present[over[0]]}{each} is over lane {lane!r}'s cap of {cap}")
    edits = dict.fromkeys(over, per_answer)
    if all(v is None for v in present.values()):
        edits[default_key] = per_answer
    if not edits:
        return _UNCHANGED
    # As numbers: a bound sent as " 500" must not put its spaces in a header.
    notes = tuple(
        f"{k} {present.get(k) or 'none'}->{per_answer}" for k in OUTPUT_KEYS if k in edits
    )
    return Clamp(edits, notes)


class CapRefused(GpuwatchError):
    """A request the lane's prompt or output cap refuses; ``reason`` is the gate's refusal
    reason (``prompt_too_long``, ``max_tokens``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def check_text(
    output: Output | None,
    limits: LaneLimits,
    lane: str,
    path: str,
    prompt_tokens: int | None,
    default_output_tokens: int,
) -> tuple[Clamp, int]:
    """A lane's prompt cap, output cap and token reservation on a request whose prompt is
    ``prompt_tokens`` long (None: unknown) and whose output is ``output`` (None: the lane has
    neither an output cap nor a budget, so it was not read): raises CapRefused. Returns what
    the output cap rewrote and the tokens to reserve from the lane's budget: prompt + output
    bound, 0 without a budget.

    The proxy calls it for every request; ``gpuwatch plan sweep`` for every simulated one, so
    the plan reserves what the gate reserves."""
    cap_prompt = limits.max_prompt_tokens
    if cap_prompt is not None and prompt_tokens is not None and prompt_tokens > cap_prompt:
        why = f"prompt is {prompt_tokens} tokens; lane {lane!r} allows {cap_prompt}"
        raise CapRefused("prompt_too_long", why)
    clamp = _UNCHANGED
    cap = limits.max_output_tokens
    if output is None:
        return clamp, 0
    if cap is not None:
        default_key = "max_output_tokens" if path.endswith("/responses") else "max_tokens"
        try:
            reject = limits.output_tokens_policy == "reject"
            clamp = cap_output(output, cap, reject, default_key, lane)
        except OverCap as exc:
            raise CapRefused("max_tokens", str(exc)) from None
    if limits.max_inflight_tokens is None:
        return clamp, 0
    bounds = output.bounds
    if clamp.edits:
        bounds = {**bounds, **{k: int(v) for k, v in clamp.edits.items()}}
    reserve = output_bound(bounds, output.answers, cap, default_output_tokens)
    return clamp, (prompt_tokens or 0) + reserve


def output_bound(
    bounds: Mapping[str, int | None], answers: int, cap: int | None, default: int
) -> int:
    """The most output tokens a (capped) request can generate, over all its answers: its own
    bound (the largest of the names present), else the lane's cap, else ``default`` (the gate's
    ``default_output_tokens``); a bound below 1 ("no bound" to some servers) counts as none."""
    given = [b for b in bounds.values() if b is not None and b >= 1]
    per_answer = max(given) if given else (cap or default)
    return per_answer * answers
