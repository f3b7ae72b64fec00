"""Steering a gate's admission limits, safely: the state machine behind the dashboard's keys.

No UI here. Every change goes through the one ``Guard`` (read-only refuses there, and nothing
is sent); keys pressed within ``COALESCE_S`` of each other become one PATCH; a change that
pauses or cuts a lane by more than half waits for the operator's confirmation; every PATCH
carries ``If-Match`` with the version it was made from (a 409 says who changed the limits first
and nothing is overwritten); and the limits shown are what the gate answered, never an
optimistic local value. Whoever shows it (the TUI) implements ``SteeringView``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, Literal, Protocol, TypeVar

from gpuwatch.adminapi import LANE_KEYS, LaneLimits, Limits, LimitsPatch, LimitValue, TenantLimits
from gpuwatch.control.gate import GateClient, GateConflict, GateError
from gpuwatch.control.guard import Guard, ReadOnlyError, confirmation_reason
from gpuwatch.fmt import clip
from gpuwatch.monitor.state import EventLevel

T = TypeVar("T")
P = TypeVar("P")  # what a steering's keys leave waiting to be sent

Severity = Literal["information", "warning", "error"]

# `o` lowers the output cap to the next step below the current value, `O` raises it to the
# next step above; above the top step there is no cap (None).
OUTPUT_STEPS: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096)
# `b` / `B` step a lane's token budget (max_inflight_tokens) the same way.
BUDGET_STEPS: tuple[int, ...] = (8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 512_000)
QUEUE_STEP = 8
# `c` / `C` step the selected tenant's in-flight cap; above the top step there is no cap.
TENANT_CAP_STEPS: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32)
# Keys pressed within this long of each other become one PATCH.
COALESCE_S = 0.4

# (lane, or "" for the gate-wide flag; key; the new value computed from the old one). The
# value's type is the key's (an int for max_inflight, a bool for paused): Any, per key.
Op = tuple[str, str, Callable[[Any], Any]]


def step_output(
    current: int | None, down: bool, steps: tuple[int, ...] = OUTPUT_STEPS
) -> int | None:
    """The next output cap (or token budget, with ``BUDGET_STEPS``) from ``current`` in the
    direction asked, by value.

    A cap set elsewhere (700, 3000, 100) moves to the nearest step beyond it in that direction;
    lowering below the smallest step, or raising "no cap", leaves it as it is.
    """
    if down:
        if current is None:
            return steps[-1]
        below = [s for s in steps if s < current]
        return below[-1] if below else current
    if current is None:
        return None
    above = [s for s in steps if s > current]
    return above[0] if above else None


def show_value(value: Any) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def describe(before: Limits, patch: LimitsPatch) -> list[str]:
    """``chat.max_inflight 16 -> 8`` lines for a patch against the limits it applies to."""
    lines = []
    if patch.paused is not None:
        lines.append(f"paused {str(before.paused).lower()} -> {str(patch.paused).lower()}")
    for lane, changes in patch.lanes.items():
        old_lane = before.lanes.get(lane)
        for key, value in changes.items():
            old = old_lane.value(key) if old_lane else None
            lines.append(f"{lane}.{key} {show_value(old)} -> {show_value(value)}")
    for tenant, sent in patch.tenants.items():
        was = before.tenants.get(tenant)
        now = None if sent is None else (was or TenantLimits()).with_values(sent)
        lines.append(f"tenant {tenant} {_tenant_limits(was)} -> {_tenant_limits(now)}")
    return lines


def _tenant_limits(limits: TenantLimits | None) -> str:
    if not limits:
        return "no limits"
    shown = ["paused"] if limits.paused else []
    if limits.max_inflight is not None:
        shown.append(f"max_inflight {limits.max_inflight}")
    return ", ".join(shown) or "no limits"


def _changes(limits: TenantLimits | None) -> dict[str, LimitValue] | None:
    return None if limits is None else limits.changes()


def lane_diff(before: LaneLimits, after: LaneLimits) -> dict[str, LimitValue]:
    """The limits of ``after`` that differ from ``before``, by name."""
    return {k: after.value(k) for k in LANE_KEYS if before.value(k) != after.value(k)}


def patch_from(base: Limits, ops: list[Op]) -> LimitsPatch:
    """The PATCH that ``ops``, applied in order to ``base``, amount to (only what changed)."""
    paused = base.paused
    lanes = dict(base.lanes)
    for lane, key, compute in ops:
        if key == "paused":
            paused = compute(paused)
        elif lane in lanes:
            lanes[lane] = lanes[lane].with_values({key: compute(lanes[lane].value(key))})
    for name, values in lanes.items():
        # An adaptive lane's bounds move together: `-` under its floor takes the floor along
        # (1 at the least), rather than a change the gate would refuse.
        if values.policy == "adaptive":
            floor = min(values.min_inflight, max(1, values.max_inflight))
            lanes[name] = replace(values, min_inflight=floor)
    changes = {name: lane_diff(base.lanes[name], values) for name, values in lanes.items()}
    return LimitsPatch(
        paused if paused != base.paused else None,
        {name: diff for name, diff in changes.items() if diff},
    )


def revert_of(before: Limits, patch: LimitsPatch) -> LimitsPatch:
    """The PATCH that puts back what ``patch`` changed in ``before``."""
    return LimitsPatch(
        before.paused if patch.paused is not None else None,
        {
            lane: {k: before.lanes[lane].value(k) for k in changes}
            for lane, changes in patch.lanes.items()
        },
        # A tenant without limits before gets its entry removed (null), not an empty one.
        {tenant: _changes(before.tenants.get(tenant)) for tenant in patch.tenants},
    )


class OperatorView(Protocol):
    """What any steering needs from whoever shows it: tell, log, ask, repaint. The gate's
    ``SteeringView`` and the native knobs' ``KnobView`` (control/knobs/steer.py) both build
    on it, so one screen answers both."""

    def event(self, level: EventLevel, text: str) -> None: ...

    def notify(self, text: str, severity: Severity = "information") -> None: ...

    async def confirm(self, title: str, details: list[str]) -> bool:
        """Ask the operator; True to go ahead."""

    def changed(self) -> None:
        """Pending changes or the selection moved: show them."""


class SteeringView(OperatorView, Protocol):
    """What the gate's control needs from whoever shows it."""

    def limits(self) -> Limits | None:
        """The gate's limits as last answered, or None while there is no gate."""

    def gate_reason(self) -> str | None:
        """Why there is no gate to steer (its last error), if any."""

    def show_limits(self, limits: Limits) -> None:
        """The gate answered with these limits (a change's result or a 409's current ones)."""

    async def edit_form(self, lane: str, limits: Limits) -> dict[str, LimitValue] | None:
        """The operator's changes to ``lane`` from a form, or None when cancelled."""

    def tenants(self, lane: str) -> list[str]:
        """The ids of the tenants the gate shows for ``lane`` now, busiest first."""


def guard_allows(guard: Guard, view: OperatorView, what: str) -> bool:
    """The guard's answer for ``what``, asked before anything is computed or sent; the
    operator is told why not. Every steering asks it first."""
    try:
        guard.check(what)
    except ReadOnlyError as exc:
        view.notify(str(exc), "warning")
        return False
    return True


class InFlight:
    """The changes a steering has in flight, each a task (they take the steering's lock in
    turn): a failure is an event naming ``what``, every end a repaint; all are stopped when
    the screen goes. The gate's ``Steering`` and the knobs' ``KnobSteering`` share it."""

    def __init__(self, view: OperatorView, what: str) -> None:
        self.view = view
        self.what = what
        self.tasks: set[asyncio.Task[None]] = set()

    def __bool__(self) -> bool:
        return bool(self.tasks)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            self.view.event("bad", f"{self.what}: {type(exc).__name__}: {exc}")
        self.view.changed()

    async def earlier(self) -> None:
        """Wait for the changes spawned before the one asking (a form opens after them)."""
        others = [t for t in self.tasks if t is not asyncio.current_task()]
        await asyncio.gather(*others, return_exceptions=True)

    async def wait(self) -> None:
        """Until every change has been answered (those spawned meanwhile too)."""
        while self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)

    def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()

    def undo(
        self,
        history: list[T],
        revert: Callable[[T], Awaitable[bool]],
        lock: asyncio.Lock,
        nothing: str,
    ) -> None:
        """Undo the newest change of ``history`` with ``revert`` (True when it went through),
        after the changes already in flight (they are the last change, so undo undoes them);
        one that did not go through (refused, cancelled) stays undoable. ``nothing``: the note
        when there is nothing to undo. The gate's lanes and the knobs share this flow."""
        if not history and not self:
            self.view.notify(nothing)
            return

        async def undo() -> None:
            async with lock:  # after the changes sent before it
                if not history:
                    self.view.notify(nothing)
                    return
                last = history.pop()
                if not await revert(last):
                    history.append(last)
                self.view.changed()

        self.spawn(undo())


class Outbox(Generic[P]):
    """All a steering has not had answered yet: the keys waiting to be sent as one change
    (``pending``, sent by ``flush``: at once, or by the timer ``wait`` starts, ``coalesce_s``
    after the last key) and the changes in flight (``inflight``). The gate's ``Steering`` and
    the knobs' ``KnobSteering`` each hold one; what a key leaves waiting (the ops on the
    gate's limits, the knobs' values) is theirs, and ``send`` makes it a change."""

    def __init__(
        self, view: OperatorView, what: str, empty: Callable[[], P], send: Callable[[P], None]
    ) -> None:
        self._empty = empty
        self._send = send
        self.pending: P = empty()
        self.inflight = InFlight(view, what)
        self._timer: asyncio.TimerHandle | None = None

    @property
    def idle(self) -> bool:
        """No key waits to be sent and no change is in flight or awaiting confirmation."""
        return not self.pending and self._timer is None and not self.inflight

    def wait(self, coalesce_s: float) -> None:
        """A key came: send what is pending ``coalesce_s`` from now, unless another key comes
        first (no timer when nothing is pending now)."""
        self._stop()
        if self.pending:
            self._timer = asyncio.get_running_loop().call_later(coalesce_s, self.flush)

    def flush(self) -> None:
        """Send what the pending keys amount to now (the coalescing timer calls this)."""
        self._stop()
        pending, self.pending = self.pending, self._empty()
        if pending:
            self._send(pending)

    async def settle(self) -> None:
        """Send what is pending now and wait until every change has been answered."""
        self.flush()
        await self.inflight.wait()

    def close(self) -> None:
        """Drop pending keys and stop changes in flight (the screen is going away)."""
        self._stop()
        self.pending = self._empty()
        self.inflight.cancel()

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


@dataclass
class Keys:
    """The gate's keys not yet sent: the limits on screen when the first came, and each
    key's op, in order."""

    base: Limits
    ops: list[Op]


@dataclass
class Change:
    """One change this operator made, for undo: the limits it was made on and the patch."""

    before: Limits
    patch: LimitsPatch


class Steering:
    def __init__(
        self, guard: Guard, view: SteeringView, gate_url: str, coalesce_s: float = COALESCE_S
    ) -> None:
        self.guard = guard
        self.view = view
        self.gate_url = gate_url
        self.coalesce_s = coalesce_s
        self.client: GateClient | None = None
        self.selected_lane = "chat"
        self.selected_tenant: str | None = None  # a tenant id of the selected lane
        self.history: list[Change] = []
        self._own_versions: set[int] = set()
        self._lock = asyncio.Lock()  # one change at a time, in the order the keys came
        self._outbox: Outbox[Keys | None] = Outbox(view, "control", lambda: None, self._send_keys)
        self._inflight = self._outbox.inflight

    # -- state ----------------------------------------------------------------------------

    @property
    def can_steer(self) -> bool:
        """Whether the control keys do anything now (greyed in the footer otherwise)."""
        return not self.guard.read_only and self.view.limits() is not None

    @property
    def idle(self) -> bool:
        """No key waits to be sent and no change is in flight or awaiting confirmation."""
        return self._outbox.idle

    def lanes(self) -> list[str]:
        limits = self.view.limits()
        return list(limits.lanes) if limits else []

    def pending_lines(self) -> list[str]:
        keys = self._outbox.pending
        return describe(keys.base, patch_from(keys.base, keys.ops)) if keys else []

    def allowed(self, what: str) -> bool:
        """The guard's answer, and a gate to steer; the operator is told why not."""
        if not guard_allows(self.guard, self.view, what):
            return False
        if self.view.limits() is None or self.client is None:
            reason = self.view.gate_reason() or "start gpuwatch with --admin URL"
            self.view.notify(f"no gate to steer: {reason}", "warning")
            return False
        return True

    # -- lane selection -------------------------------------------------------------------

    def select_lane(self, index: int) -> None:
        lanes = self.lanes()
        if 0 <= index < len(lanes):
            self.selected_lane = lanes[index]
            self.selected_tenant = None  # a tenant is selected within its lane
            self.view.changed()

    def next_lane(self) -> None:
        lanes = self.lanes()
        if lanes:
            i = lanes.index(self.selected_lane) if self.selected_lane in lanes else -1
            self.selected_lane = lanes[(i + 1) % len(lanes)]
            self.selected_tenant = None
            self.view.changed()

    def next_tenant(self) -> None:
        """Select the next of the lane's busiest tenants; after the last, none."""
        tenants = self.view.tenants(self.selected_lane)
        if self.selected_tenant in tenants:
            i = tenants.index(self.selected_tenant) + 1
            self.selected_tenant = tenants[i] if i < len(tenants) else None
        else:
            self.selected_tenant = tenants[0] if tenants else None
            if not tenants:
                self.view.notify(f"no tenant has work in lane {self.selected_lane}")
        self.view.changed()

    # -- tenants: one change per key, like the form's (tenant limits are few and deliberate) --

    def tenant_pause(self) -> None:
        self._tenant("paused", lambda v: not v)

    def tenant_cap(self, down: bool) -> None:
        self._tenant("max_inflight", lambda v: step_output(v, down, TENANT_CAP_STEPS))

    def _tenant(self, key: str, compute: Callable[[Any], Any]) -> None:
        """``compute``: the new value of ``key`` (paused: a bool; max_inflight: int or None)."""
        tenant = self.selected_tenant
        if tenant is None:
            self.view.notify("select a tenant first (n)", "warning")
            return
        if not self.allowed(f"change of tenant {tenant}"):
            return
        self.flush()

        async def change() -> None:
            async with self._lock:
                base = self.view.limits()
                if base is None:
                    return
                old = base.tenants.get(tenant) or TenantLimits()
                if key == "paused":
                    new = replace(old, paused=compute(old.paused))
                else:
                    new = replace(old, max_inflight=compute(old.max_inflight))
                await self._apply(LimitsPatch(tenants={tenant: new.changes()}), base)
                self.view.changed()

        self._inflight.spawn(change())

    # -- the keys -------------------------------------------------------------------------

    def inflight(self, delta: int) -> None:
        self.propose("max_inflight", lambda v: max(0, v + delta))

    def scale_inflight(self, factor: float) -> None:
        self.propose("max_inflight", lambda v: max(0, round(v * factor)) if v else int(factor > 1))

    def queue(self, delta: int) -> None:
        self.propose("max_queue", lambda v: max(0, v + delta))

    def output(self, down: bool) -> None:
        self.propose("max_output_tokens", lambda v: step_output(v, down))

    def budget(self, down: bool) -> None:
        self.propose("max_inflight_tokens", lambda v: step_output(v, down, BUDGET_STEPS))

    def pause(self) -> None:
        self.propose("paused", lambda v: not v, lane="")

    def toggle_adaptive(self, default_target_s: float) -> None:
        """``A``: adaptive admission on (or off) for the selected lane, always confirmed. A
        lane without a target gets ``default_target_s`` (the dashboard's TTFT SLO); its
        ``max_inflight`` becomes the upper bound of the effective limit."""
        lane = self.selected_lane
        if not self.allowed(f"adaptive admission on {lane}"):
            return
        self.flush()  # keys pressed before are a change of their own, sent first

        async def toggle() -> None:
            async with self._lock:
                found = self._lane_now(lane)
                if found is None:
                    return
                base, current = found
                on = current.policy != "adaptive"
                changes: dict[str, LimitValue] = {"policy": "adaptive" if on else "static"}
                if on and current.target_ttft_p99_s is None:
                    changes["target_ttft_p99_s"] = default_target_s
                why = (
                    f"the gate will move {lane}'s in-flight limit between "
                    f"{current.min_inflight} and {current.max_inflight}"
                    if on
                    else f"{lane} goes back to its configured limits"
                )
                await self._apply(LimitsPatch(lanes={lane: changes}), base, why=why)
                self.view.changed()

        self._inflight.spawn(toggle())

    def _lane_now(self, lane: str) -> tuple[Limits, LaneLimits] | None:
        """The gate's limits now and ``lane``'s part of them; None (and a warning) when the
        gate has no such lane."""
        base = self.view.limits()
        current = base.lanes.get(lane) if base is not None else None
        if base is None or current is None:
            self.view.notify(f"the gate has no lane {lane}", "warning")
            return None
        return base, current

    def propose(self, key: str, compute: Callable[[Any], Any], lane: str | None = None) -> None:
        """Queue one key's change; it is sent with the keys that follow within coalesce_s."""
        lane = self.selected_lane if lane is None else lane
        base = self.view.limits()  # None only where not allowed (no gate to steer)
        if not self.allowed(f"change of {lane + '.' if lane else ''}{key}") or base is None:
            return
        # The first key waiting fixes the limits the change is made from.
        keys = self._outbox.pending = self._outbox.pending or Keys(base, [])
        keys.ops.append((lane, key, compute))
        self._outbox.wait(self.coalesce_s)
        self.view.changed()

    def flush(self) -> None:
        """Send what the pending keys amount to now (the coalescing timer calls this)."""
        self._outbox.flush()

    def _send_keys(self, keys: Keys | None) -> None:
        if keys is not None:
            self._inflight.spawn(self._commit(keys.ops, keys.base))

    def _rebased(self, base: Limits) -> Limits:
        """``base``, or the gate's present limits when only our own changes came between."""
        current = self.view.limits() or base
        if self._own_versions and current.version < max(self._own_versions):
            self._own_versions.clear()  # the gate went back (restarted): old versions mean nothing
        newer = range(base.version + 1, current.version + 1)
        if newer and all(v in self._own_versions for v in newer):
            return current
        return base

    async def _commit(self, ops: list[Op], base: Limits) -> None:
        async with self._lock:
            base = self._rebased(base)
            patch = patch_from(base, ops)
            if patch:
                await self._apply(patch, base)
            self.view.changed()

    async def _apply(
        self,
        patch: LimitsPatch,
        base: Limits,
        undo: bool = False,
        source: str | None = None,
        why: str | None = None,
    ) -> bool:
        """Confirm if it can hurt (always, for a change from ``source``: a plan, or one that
        says ``why``), then send it with If-Match on the version it was made from. True when
        the gate applied it."""
        lines = describe(base, patch)
        reason = confirmation_reason(base, patch)
        if source:
            reason = f"limits from {source}" + (f"; {reason}" if reason else "")
        if why:
            reason = why + (f"; {reason}" if reason else "")
        if reason:
            details = [f"gate   {self.gate_url}", f"why    {reason}", "", *lines]
            if not await self.view.confirm("Apply this change?", details):
                self.view.event("info", f"change cancelled: {'; '.join(lines)}")
                return False
        if source:
            lines = [f"from {source}: {lines[0]}", *lines[1:]] if lines else lines
        return await self._send(patch, base, lines, undo)

    def apply_lane(self, lane: str, changes: Mapping[str, LimitValue], source: str) -> None:
        """Several limits of one lane as one change made elsewhere (a plan's recommended
        limits): always confirmed, then sent like the keys' changes (If-Match, audited as this
        operator, undoable)."""
        if not self.allowed(f"applying {source}"):
            return

        async def apply() -> None:
            async with self._lock:
                found = self._lane_now(lane)
                if found is None:
                    return
                base, current = found
                diff = {k: v for k, v in changes.items() if current.value(k) != v}
                if not diff:
                    self.view.notify(f"the gate already has the limits of {source}")
                    return
                await self._apply(LimitsPatch(lanes={lane: diff}), base, source=source)
                self.view.changed()

        self._inflight.spawn(apply())

    async def _send(self, patch: LimitsPatch, base: Limits, lines: list[str], undo: bool) -> bool:
        assert self.client is not None
        try:
            after = await self.client.patch(patch, if_match=base.version)
        except ReadOnlyError as exc:
            self.view.notify(str(exc), "warning")
            return False
        except GateConflict as exc:
            actor = clip(exc.actor, 80) if exc.actor else "someone else"
            self.view.notify(
                f"limits changed by {actor}: refreshed, nothing overwritten", "warning"
            )
            self.view.event(
                "warn", f"change refused: limits changed by {actor} (v{base.version} is old)"
            )
            if exc.limits:
                self.view.show_limits(exc.limits)
            return False
        except GateError as exc:
            self.view.notify(f"change refused: {exc}", "error")
            self.view.event("bad", f"change refused: {exc}")
            return False
        self._own_versions.add(after.version)
        self.view.show_limits(after)
        self.view.event(
            "info", f"{'undone' if undo else 'limits'} v{after.version}: {'; '.join(lines)}"
        )
        if not undo:
            self.history.append(Change(base, patch))
        return True

    # -- undo and the form ----------------------------------------------------------------

    def undo(self) -> None:
        """Put back what this operator's last change changed (itself a change, audited).

        Keys still waiting are sent first: they are the last change, so undo undoes them. A
        change whose undo did not go through (refused, cancelled) stays undoable.
        """
        if not self.allowed("undo"):
            return
        self.flush()
        nothing = "nothing to undo from this screen"
        self._inflight.undo(self.history, self._revert, self._lock, nothing)

    async def _revert(self, change: Change) -> bool:
        current = self.view.limits()
        return current is not None and await self._apply(
            revert_of(change.before, change.patch), current, undo=True
        )

    def edit(self) -> None:
        """Every limit of the selected lane in a form; Apply sends one change."""
        if not self.allowed("edit"):
            return
        self.flush()  # keys pressed before the form are a change of their own, sent first
        self._inflight.spawn(self._edit(self.selected_lane))

    async def _edit(self, lane: str) -> None:
        await self._inflight.earlier()
        limits = self.view.limits()
        if limits is None:
            return
        changes = await self.view.edit_form(lane, limits)
        if changes:
            async with self._lock:
                # Our own changes made while the form was open are built on, not a conflict.
                await self._apply(LimitsPatch(lanes={lane: changes}), self._rebased(limits))
            self.view.changed()

    # -- tasks ----------------------------------------------------------------------------

    async def settle(self) -> None:
        """Send what is pending now and wait until every change has been answered."""
        await self._outbox.settle()

    def close(self) -> None:
        """Drop pending keys and stop changes in flight (the screen is going away)."""
        self._outbox.close()
