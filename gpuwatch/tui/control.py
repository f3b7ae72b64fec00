"""Steering admission from the keyboard, safely.

Every change: goes through ``control.guard`` (read-only refuses there, and nothing is sent);
is coalesced with the keys pressed just before it into one PATCH; asks for confirmation when
it pauses or cuts a lane by more than half; carries ``If-Match`` with the version on screen (a
409 says who changed the limits first and refreshes the panel); and shows what the gate
answered, never an optimistic local value.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual.timer import Timer

from gpuwatch.control.gate import GateClient, GateError
from gpuwatch.control.guard import ReadOnlyError, confirmation_reason
from gpuwatch.tui.screens.audit import AuditScreen
from gpuwatch.tui.screens.confirm import ConfirmationModal
from gpuwatch.tui.screens.edit import EditLimits

if TYPE_CHECKING:
    from gpuwatch.tui.app import GpuwatchApp

# `o` walks down this list, `O` up it: none is the top.
OUTPUT_STEPS: tuple[int | None, ...] = (None, 4096, 2048, 1024, 512, 256, 128)
QUEUE_STEP = 8
# Keys pressed within this long of each other become one PATCH.
COALESCE_S = 0.4
CONTROL_ACTIONS = frozenset(
    {
        "inflight",
        "scale_inflight",
        "queue",
        "output",
        "pause",
        "edit",
        "undo",
        "select_lane",
        "next_lane",
    }
)


def step_output(current: int | None, down: bool) -> int | None:
    if current in OUTPUT_STEPS:
        i = OUTPUT_STEPS.index(current)
    else:  # a cap set elsewhere: snap to the nearest step in the direction asked
        below = [i for i, v in enumerate(OUTPUT_STEPS) if v is not None and v < current]  # type: ignore[operator]
        i = (below[0] - 1) if below else len(OUTPUT_STEPS) - 1
    i = min(len(OUTPUT_STEPS) - 1, i + 1) if down else max(0, i - 1)
    return OUTPUT_STEPS[i]


def describe(before: dict[str, Any], patch: dict[str, Any]) -> list[str]:
    """``chat.max_inflight 16 -> 8`` lines for a patch against the limits it applies to."""
    lines = []
    if "paused" in patch:
        lines.append(f"paused {str(before['paused']).lower()} -> {str(patch['paused']).lower()}")
    for lane, changes in patch.get("lanes", {}).items():
        for key, value in changes.items():
            old = before["lanes"][lane][key]
            lines.append(f"{lane}.{key} {_show(old)} -> {_show(value)}")
    return lines


def _show(value: Any) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


Op = tuple[str, str, Callable[[Any], Any]]  # (lane or "" for global, key, new value from old)


def patch_from(base: dict[str, Any], ops: list[Op]) -> dict[str, Any]:
    """The PATCH that ``ops``, applied in order to ``base``, amount to (only what changed)."""
    paused = base["paused"]
    lanes = {name: dict(lane) for name, lane in base["lanes"].items()}
    for lane, key, compute in ops:
        if key == "paused":
            paused = compute(paused)
        elif lane in lanes:
            lanes[lane][key] = compute(lanes[lane][key])
    patch: dict[str, Any] = {}
    if paused != base["paused"]:
        patch["paused"] = paused
    for name, lane in lanes.items():
        changed = {k: v for k, v in lane.items() if base["lanes"][name][k] != v}
        if changed:
            patch.setdefault("lanes", {})[name] = changed
    return patch


class ControlMixin:
    """The control half of GpuwatchApp (kept apart so app.py stays about showing)."""

    selected_lane: str = "chat"
    _ops: list[Op]
    _base: dict[str, Any] | None
    _flush_timer: Timer | None
    _own_versions: set[int]
    _send_lock: asyncio.Lock
    gate_client: GateClient | None

    def _init_control(self: GpuwatchApp) -> None:
        self._ops = []
        self._base = None  # the limits on screen when the first of the pending keys was pressed
        self._flush_timer = None
        self._own_versions = set()
        self._send_lock = asyncio.Lock()

    # -- what can be done -----------------------------------------------------------------

    def check_action(self: GpuwatchApp, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in CONTROL_ACTIONS and (self.guard.read_only or self.monitor.gate is None):
            return None  # shown greyed in the footer
        return True

    def _lanes(self: GpuwatchApp) -> list[str]:
        gate = self.monitor.gate
        return list(gate.limits["lanes"]) if gate and gate.limits else []

    def _allowed(self: GpuwatchApp, what: str) -> bool:
        try:
            self.guard.check(what)
        except ReadOnlyError as exc:
            self.notify(str(exc), severity="warning")
            return False
        gate = self.monitor.gate
        if gate is None or gate.limits is None or self.gate_client is None:
            reason = (
                gate.status.reason
                if gate and gate.status.reason
                else "start gpuwatch with --admin URL"
            )
            self.notify(f"no gate to steer: {reason}", severity="warning")
            return False
        return True

    # -- lane selection -------------------------------------------------------------------

    def action_select_lane(self: GpuwatchApp, index: int) -> None:
        lanes = self._lanes()
        if 0 <= index < len(lanes):
            self.selected_lane = lanes[index]
            self._repaint()

    def action_next_lane(self: GpuwatchApp) -> None:
        lanes = self._lanes()
        if lanes:
            i = lanes.index(self.selected_lane) if self.selected_lane in lanes else -1
            self.selected_lane = lanes[(i + 1) % len(lanes)]
            self._repaint()

    # -- changes --------------------------------------------------------------------------

    def action_inflight(self: GpuwatchApp, delta: int) -> None:
        self._propose("max_inflight", lambda v: max(0, v + delta))

    def action_scale_inflight(self: GpuwatchApp, factor: float) -> None:
        self._propose("max_inflight", lambda v: max(0, round(v * factor)) if v else int(factor > 1))

    def action_queue(self: GpuwatchApp, delta: int) -> None:
        self._propose("max_queue", lambda v: max(0, v + delta))

    def action_output(self: GpuwatchApp, down: bool) -> None:
        self._propose("max_output_tokens", lambda v: step_output(v, down))

    def action_pause(self: GpuwatchApp) -> None:
        self._propose("paused", lambda v: not v, lane="")

    def _propose(
        self: GpuwatchApp, key: str, compute: Callable[[Any], Any], lane: str | None = None
    ) -> None:
        lane = self.selected_lane if lane is None else lane
        if not self._allowed(f"change of {lane + '.' if lane else ''}{key}"):
            return
        if self._base is None:
            self._base = copy.deepcopy(self.monitor.gate.limits)  # type: ignore[union-attr]
        self._ops.append((lane, key, compute))
        if self._flush_timer is not None:
            self._flush_timer.stop()
        self._flush_timer = self.set_timer(COALESCE_S, self._flush)
        self._repaint()

    def pending_lines(self: GpuwatchApp) -> list[str]:
        return (
            describe(self._base, patch_from(self._base, self._ops))
            if self._base and self._ops
            else []
        )

    def _flush(self: GpuwatchApp) -> None:
        self._flush_timer = None
        ops, base = self._ops, self._base
        self._ops, self._base = [], None
        if ops and base is not None:
            # A worker: the confirmation modal waits for the operator.
            self.run_worker(self._commit(ops, base), group="control")

    async def _commit(self: GpuwatchApp, ops: list[Op], base: dict[str, Any]) -> None:
        async with self._send_lock:  # one change at a time, in the order the keys came
            current = self.monitor.gate.limits  # type: ignore[union-attr]
            newer = range(base["version"] + 1, current["version"] + 1)
            if newer and all(v in self._own_versions for v in newer):
                base = copy.deepcopy(current)  # only our own changes came between: build on them
            patch = patch_from(base, ops)
            if patch:
                await self.apply_patch(patch, base)
            self._repaint()

    async def apply_patch(
        self: GpuwatchApp, patch: dict[str, Any], base: dict[str, Any], undo: bool = False
    ) -> None:
        """Confirm if it can hurt, then send it with If-Match on the version it was made from."""
        lines = describe(base, patch)
        reason = confirmation_reason(base, patch)
        if reason:
            gate = self.monitor.gate.url if self.monitor.gate else "?"
            details = [f"gate   {gate}", f"why    {reason}", "", *lines]
            if not await self.push_screen_wait(ConfirmationModal("Apply this change?", details)):
                self.monitor.event("info", f"change cancelled: {'; '.join(lines)}")
                self._repaint()
                return
        await self._send(patch, base, lines, undo)

    async def _send(
        self: GpuwatchApp, patch: dict[str, Any], base: dict[str, Any], lines: list[str], undo: bool
    ) -> None:
        assert self.gate_client is not None
        try:
            after = await self.gate_client.patch(patch, if_match=base["version"])
        except ReadOnlyError as exc:
            self.notify(str(exc), severity="warning")
            return
        except GateError as exc:
            body = exc.body if isinstance(exc.body, dict) else {}
            if exc.status == 409:
                actor = body.get("actor") or "someone else"
                self.notify(
                    f"limits changed by {actor}: refreshed, nothing overwritten", severity="warning"
                )
                self.monitor.event(
                    "warn", f"change refused: limits changed by {actor} (v{base['version']} is old)"
                )
                if body.get("limits"):
                    self.monitor.apply_gate(body["limits"], None)
            else:
                self.notify(f"change refused: {exc}", severity="error")
                self.monitor.event("bad", f"change refused: {exc}")
            self._repaint()
            return
        self._own_versions.add(after["version"])
        self.monitor.apply_gate(after, None)
        verb = "undone" if undo else "limits"
        self.monitor.event("info", f"{verb} v{after['version']}: {'; '.join(lines)}")
        if not undo:
            self.guard.record("; ".join(lines), base, patch)
        self._repaint()

    def action_undo(self: GpuwatchApp) -> None:
        if not self._allowed("undo"):
            return
        if not self.guard.history:
            self.notify("nothing to undo from this screen")
            return
        entry = self.guard.history.pop()
        before, patch = entry["before"], entry["after"]
        revert: dict[str, Any] = {}
        if "paused" in patch:
            revert["paused"] = before["paused"]
        for lane, changes in patch.get("lanes", {}).items():
            revert.setdefault("lanes", {})[lane] = {k: before["lanes"][lane][k] for k in changes}
        self.run_worker(self._undo(revert), group="control")

    async def _undo(self: GpuwatchApp, revert: dict[str, Any]) -> None:
        async with self._send_lock:
            current = copy.deepcopy(self.monitor.gate.limits)  # type: ignore[union-attr]
            await self.apply_patch(revert, current, undo=True)

    def action_edit(self: GpuwatchApp) -> None:
        if not self._allowed("edit"):
            return
        limits = copy.deepcopy(self.monitor.gate.limits)  # type: ignore[union-attr]
        lane = self.selected_lane

        async def edit() -> None:
            changes = await self.push_screen_wait(EditLimits(self.monitor.gate.url, lane, limits))  # type: ignore[union-attr]
            if changes:
                async with self._send_lock:
                    await self.apply_patch({"lanes": {lane: changes}}, limits)

        self.run_worker(edit(), group="control")

    def action_audit(self: GpuwatchApp) -> None:
        if self.gate_client is None:
            self.notify("no gate: start gpuwatch with --admin URL", severity="warning")
            return

        async def show() -> None:
            try:
                entries = await self.gate_client.audit(50)  # type: ignore[union-attr]
            except GateError as exc:
                await self.push_screen(AuditScreen(None, str(exc)))
                return
            await self.push_screen(AuditScreen(entries))

        self.run_worker(show(), group="control")
