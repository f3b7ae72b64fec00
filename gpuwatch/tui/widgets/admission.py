"""The admission panel: the gate's lanes, their limits, and what they refuse per second."""

from __future__ import annotations

from gpuwatch.adminapi import REASONS, LaneLimits, LaneStatus
from gpuwatch.control.knobs.steer import KnobRef, KnobSource
from gpuwatch.monitor.state import GateView
from gpuwatch.tui.markup import escape
from gpuwatch.tui.widgets.knobs import knob_block
from gpuwatch.tui.widgets.panel import Panel
from gpuwatch.tui.widgets.tenants import tenant_lines

SHORT = {
    "queue_full": "full",
    "queue_timeout": "timeout",
    "queue_deadline": "deadline",
    "paused": "paused",
    "prompt_too_long": "prompt",
    "max_tokens": "max_tok",
    "over_token_budget": "budget",
    "max_pixels": "pixels",
    "max_steps": "steps",
    "max_n": "n",
    "max_inputs": "inputs",
    "max_input_tokens": "in_tok",
    "evicted": "evicted",
    "tenant_paused": "t_paused",
    "upstream_stalled": "stalled",
}


def _tokens(value: float) -> str:
    """Tokens at a glance: 512, 1.5k, 41k, 2.5M."""
    if value >= 1_000_000:
        return f"{value / 1e6:.1f}M".replace(".0M", "M")
    if value >= 10_000:
        return f"{value / 1e3:.0f}k"
    if value >= 1000:
        return f"{value / 1e3:.1f}k".replace(".0k", "k")
    return f"{value:.0f}"


def _budget(lane: LaneLimits, live: LaneStatus) -> str:
    """``41k/96k`` for a lane with a token budget, ``-`` without."""
    budget = lane.max_inflight_tokens
    if budget is None:
        return "-"
    return f"{_tokens(live.inflight_tokens)}/{_tokens(budget)}"


def _wait(live: LaneStatus) -> str:
    """``0.4/1.5s``: the oldest request's wait so far over the queue-wait budget in force,
    ``-`` for a lane without a budget."""
    budget = live.queue_wait.budget_s if live.queue_wait else None
    if budget is None:
        return "-"
    return f"{live.oldest_queued_s:.1f}/{budget:.1f}s"


class AdmissionPanel(Panel):
    DEFAULT_CSS = "AdmissionPanel { height: auto; }"

    # The line of the row the keys act on (the selected lane or knob), None when none is
    # shown: the dashboard keeps it in view.
    selected_line: int | None = None

    def render_gate(
        self,
        gate: GateView | None,
        selected: str | None = None,
        pending: list[str] | None = None,
        selected_tenant: str | None = None,
        compact: bool = False,
        knobs: list[KnobSource] | None = None,
        selected_knob: KnobRef | None = None,
    ) -> None:
        """The gate's lanes (``selected``: the lane the keys act on, None when a knob row is),
        then the stacks' own knobs (``knobs``), then what is being sent."""
        width = self.content_size.width  # 0 before the first layout: nothing is cut then
        knob_rows, knob_at = knob_block(knobs or [], selected_knob, compact, width)
        sending = [f" [$warn]sending: {escape('; '.join(pending))}[/]"] if pending else []
        self.selected_line = None if knob_at is None else 1 + knob_at  # under the head line
        if gate is None:
            self.display = bool(knob_rows)
            self.show("\n".join(["[b]admission[/] the stacks' own knobs", *knob_rows, *sending]))
            return
        self.display = True
        if gate.limits is None:
            reason = gate.status.reason or "reading…"
            head = f"[b]admission[/] {escape(gate.url)} [$warn]{escape(reason)}[/]"
            self.show("\n".join([head, *knob_rows, *sending]))
            return
        limits = gate.limits
        paused = " [b $bad]PAUSED (draining)[/]" if limits.paused else ""
        # The gate sheds these lanes while the upstream is stalled (gate/stallwatch.py).
        shed = [name for name, live in gate.lanes.items() if live.shed]
        if shed:
            paused += f" [b $bad]UPSTREAM STALLED: shedding {escape(', '.join(shed))}[/]"
        state = (
            ""
            if gate.status.state == "UP"
            else f" [$bad]{gate.status.state}: {escape(gate.status.reason or '')}[/]"
        )
        # The token column only when some lane has a budget: `tokens 41k/96k`.
        budgets = any(lane.max_inflight_tokens is not None for lane in limits.lanes.values())
        tokens_head = " " * 16 if budgets else ""
        # The queue-wait column only when some lane has a budget (deadline.py).
        waits = any(
            live.queue_wait is not None and live.queue_wait.budget_s is not None
            for live in gate.lanes.values()
        )
        wait_head = f"  {'wait/max':>10}" if waits else ""
        out = [
            f"[b]admission[/] {escape(gate.url)} v{limits.version}{paused}{state}",
            f"[dim] {'lane':<9}{'in-flight':>9}  {'queued':>9}{wait_head}  {'out cap':>7}"
            f"{tokens_head}  refused/s {gate.refusal_window}[/]",
        ]
        for name, lane in limits.lanes.items():
            live = gate.lanes.get(name) or LaneStatus()
            inflight, queued = live.inflight, live.queued
            # An adaptive lane admits up to its effective limit (the adaptive panel says why);
            # a static one shows the limits the gate answered with, at once.
            limit = lane.max_inflight
            if lane.policy == "adaptive" and live.effective_max_inflight is not None:
                limit = live.effective_max_inflight
            full = inflight >= limit
            inflight_color = "$warn" if full else "$foreground"
            queue_color = (
                "$bad" if queued >= lane.max_queue > 0 else "$queue" if queued else "$foreground"
            )
            cap = lane.max_output_tokens if lane.max_output_tokens is not None else "none"
            refusals = [(SHORT[r], gate.refusal_rate(name, r)) for r in REASONS]
            shown = (
                " ".join(f"[$bad]{label} {rate:.1f}[/]" for label, rate in refusals if rate > 0.05)
                or "[dim]-[/]"
            )
            label = escape(f"{name:<8}")
            if name == selected:
                label = f"[reverse]{label}[/reverse]"
                self.selected_line = len(out)
            flight = f"{inflight}/{limit}"
            waiting = f"{queued}/{lane.max_queue}"
            tokens = f"  {'tokens ' + _budget(lane, live):<14}" if budgets else ""
            wait = f"  {_wait(live):>10}" if waits else ""
            out.append(
                f" {label} [{inflight_color}]{flight:>9}[/]  [{queue_color}]{waiting:>9}[/]"
                f"{wait}  {cap!s:>7}{tokens}  {shown}"
            )
            tenant = selected_tenant if name == selected else None
            out.extend(tenant_lines(live, tenant, compact, width))
        if knob_at is not None:
            self.selected_line = len(out) + knob_at
        self.show("\n".join([*out, *knob_rows, *sending]))
