"""Steering a stack's native knobs from the keys: the state machine behind a knob row.

No UI here, and no second path for a change: every change is ``apply.apply_changes`` (the one
``Guard`` first, so read-only refuses before anything is sent; bounds; the read-before-write
conflict check; the write; the read back; the local audit). What this adds is what the keys
need: the selected knob, how each key steps a knob of each kind (``step_value``), keys pressed
within ``COALESCE_S`` of each other sent as one change per stack, the confirmation of a change
that pauses or cuts a knob by more than half, and undo (the inverse change, itself
conflict-checked and audited). Whoever shows it implements ``KnobView``; the gate's keys have
the same shape in ``control/steering.py``, whose view protocol, coalescing window, guard
check and ``Outbox`` (the keys waiting, the changes in flight, settle, close) this shares.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from gpuwatch.control.guard import Guard, ReadOnlyError
from gpuwatch.control.knobs.apply import apply_changes, knob_confirmation_reason
from gpuwatch.control.knobs.base import (
    Knob,
    KnobAdapter,
    KnobChange,
    KnobConflict,
    KnobError,
    KnobValue,
    same_value,
    show_value,
)
from gpuwatch.control.steering import COALESCE_S, OperatorView, Outbox, guard_allows
from gpuwatch.errors import GpuwatchError
from gpuwatch.fmt import clip
from gpuwatch.gate.audit import AuditError, AuditLog

# `+` / `-` on a knob, `*` / `/` (double, halve).
Step = Literal["up", "down", "double", "halve"]
# A fraction (a knob bounded to 0..1: Dynamo's busy thresholds) moves by this much a key.
FRACTION_STEP = 0.05
# The knob a stack pauses admission with (vLLM's dev-mode pause): `p` toggles it.
PAUSE_KNOB = "paused"


class NoStep(GpuwatchError):
    """A key that cannot move the knob (at a bound, a switch asked to double); says why."""


def _is_fraction(knob: Knob) -> bool:
    return (
        knob.kind == "float"
        and knob.minimum is not None
        and knob.minimum >= 0
        and knob.maximum is not None
        and knob.maximum <= 1
    )


def _moved(knob: Knob, value: float, step: Step) -> float:
    """``value`` moved by ``step``, before bounds."""
    if step in ("up", "down"):
        by = FRACTION_STEP if _is_fraction(knob) else 1
        return value + by if step == "up" else value - by
    factor = 2.0 if step == "double" else 0.5
    if knob.kind == "int":
        # As the gate's `*` and `/` (steering.scale_inflight): from 0, doubling gives 1.
        return max(0, round(value * factor)) if value else int(factor > 1)
    return value * factor


def step_value(knob: Knob, value: KnobValue, step: Step) -> KnobValue:
    """The value one key makes of ``value`` (the knob's pending or shown value).

    Numbers: ``up``/``down`` by 1 (a fraction by ``FRACTION_STEP``), ``double``/``halve``;
    clamped to the stack's bounds, except that a nullable knob raised past its maximum has no
    limit (None) and lowered from no limit starts at its maximum (as the gate's output cap
    steps past its top step to none). Switches: ``up`` on, ``down`` off. ``NoStep`` when the
    key cannot move it, with why.
    """
    if knob.kind == "bool":
        if step in ("double", "halve"):
            raise NoStep(f"{knob.label} is a switch: + turns it on, - off")
        wanted = step == "up"
        if value is wanted:
            raise NoStep(f"{knob.label} is already {show_value(wanted)}")
        return wanted
    if value is None or isinstance(value, bool):
        if not knob.nullable:
            raise NoStep(f"{knob.label} is not set: e sets it")
        if step in ("up", "double"):
            raise NoStep(f"{knob.label} has no limit already")
        if knob.maximum is None:
            raise NoStep(f"{knob.label} has no limit: e sets one")
        top = knob.maximum
        return int(top) if knob.kind == "int" else top
    moved = _moved(knob, value, step)
    if knob.kind == "float":
        moved = round(moved, 6)  # 0.85 + 0.05 is 0.9, not 0.9000000000000001
    if knob.maximum is not None and moved > knob.maximum:
        if knob.nullable:
            return None  # past the top step: no limit
        moved = knob.maximum
    if knob.minimum is not None and moved < knob.minimum:
        moved = knob.minimum
    new: KnobValue = int(moved) if knob.kind == "int" else float(moved)
    if same_value(new, value):
        bound = "maximum" if step in ("up", "double") else "minimum"
        raise NoStep(f"{knob.label} is at its {bound} {show_value(value)}")
    return new


def _pause_knob(source: KnobSource) -> Knob | None:
    return next((k for k in source.knobs if k.name == PAUSE_KNOB and k.kind == "bool"), None)


@dataclass
class KnobSource:
    """One stack's admin API as the dashboard knows it: its adapter, its knobs as last read
    (what the rows show and a change is made from), and why the last read failed, if it did."""

    adapter: KnobAdapter
    engine: str | None = None  # the engine it steers (shown beside), when known
    guessed: bool = False  # found from an engine's dialect, not named in the config
    knobs: list[Knob] = field(default_factory=list)
    error: str | None = None
    read: bool = False  # answered at least once

    @property
    def url(self) -> str:
        return self.adapter.endpoint.url

    @property
    def stack(self) -> str:
        return self.adapter.endpoint.stack

    def shown(self, knobs: list[Knob]) -> None:
        """The stack answered with these (a read, or a change's read back)."""
        self.knobs, self.error, self.read = list(knobs), None, True

    def failed(self, reason: str) -> None:
        self.error = reason

    def find(self, ref: KnobRef) -> Knob | None:
        if ref.url != self.url:
            return None
        return next((k for k in self.knobs if k.key == ref.key), None)


@dataclass(frozen=True)
class KnobRef:
    """Which knob a row is, across reads: its stack's admin URL and the knob's key."""

    url: str
    key: tuple[str, str, str]  # (stack, target, name), Knob.key

    @classmethod
    def of(cls, source: KnobSource, knob: Knob) -> KnobRef:
        return cls(source.url, knob.key)


class KnobView(OperatorView, Protocol):
    """What the knob steering needs from whoever shows it, beyond telling and asking."""

    def sources(self) -> list[KnobSource]:
        """The stacks' admin APIs, in the order their rows are shown."""

    async def edit_knobs(self, title: str, knobs: list[Knob]) -> dict[str, KnobValue] | None:
        """New values by knob name for some of ``knobs`` from a form, or None when cancelled."""


@dataclass
class Applied:
    """One change this operator made, for undo: where, what was asked, and the knobs after."""

    source: KnobSource
    changes: list[KnobChange]
    after: list[Knob]

    def inverse(self) -> list[KnobChange]:
        """The changes that put it back, made from the knobs as they were read back (so a
        knob moved by someone since is a conflict, not overwritten)."""
        now = {k.key: k for k in self.after}
        return [
            change.inverse(now.get(change.knob.key) or replace(change.knob, value=change.value))
            for change in self.changes
        ]


# Keys not yet sent: per knob, where it is, the knob as shown, and the value wanted.
Pending = dict[KnobRef, tuple[KnobSource, Knob, KnobValue]]


class KnobSteering:
    def __init__(
        self,
        guard: Guard,
        view: KnobView,
        audit: AuditLog,
        actor: str,
        coalesce_s: float = COALESCE_S,
    ) -> None:
        self.guard = guard
        self.view = view
        self.audit = audit
        self.actor = actor
        self.coalesce_s = coalesce_s
        self.selected: KnobRef | None = None  # None: the gate's lane is selected
        self.history: list[Applied] = []
        self._lock = asyncio.Lock()  # one change at a time, in the order the keys came
        self._outbox: Outbox[Pending] = Outbox(view, "knobs", dict, self._send_keys)
        self._inflight = self._outbox.inflight

    # -- state ----------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """No key waits to be sent and no change is in flight or awaiting confirmation."""
        return self._outbox.idle

    def rows(self) -> list[KnobRef]:
        """Every knob shown, in order: the rows selection moves through (a stack whose last
        read failed has none)."""
        return [KnobRef.of(s, k) for s in self.view.sources() if s.error is None for k in s.knobs]

    def current(self) -> tuple[KnobSource, Knob] | None:
        """The selected knob as last read, and its stack; None when none is (or it is gone)."""
        if self.selected is None:
            return None
        for source in self.view.sources():
            # A stack whose last read failed shows N/A: nothing to make a change from.
            knob = source.find(self.selected) if source.error is None else None
            if knob is not None:
                return source, knob
        return None

    def pending_lines(self) -> list[str]:
        pending = self._outbox.pending
        return [KnobChange(knob, value).describe() for _, knob, value in pending.values()]

    def pause_knob(self) -> Knob | None:
        """The switch that pauses the selected knob's stack (``p``), if it has one."""
        found = self.current()
        return _pause_knob(found[0]) if found is not None else None

    def select(self, ref: KnobRef | None) -> None:
        self.selected = ref
        self.view.changed()

    def allowed(self, what: str) -> bool:
        """The guard's answer, asked before anything is computed or sent; told why not."""
        return guard_allows(self.guard, self.view, what)

    def _selected_knob(self, what: str) -> tuple[KnobSource, Knob] | None:
        found = self.current()
        if found is None:
            self.view.notify("select a knob first (tab)", "warning")
            return None
        if not self.allowed(f"{what} of {found[1].label}"):
            return None
        return found

    # -- the keys -------------------------------------------------------------------------

    def step(self, step: Step) -> None:
        """One key on the selected knob; sent with the keys that follow within coalesce_s."""
        found = self._selected_knob("change")
        if found is None:
            return
        source, knob = found
        ref = KnobRef.of(source, knob)
        pending = self._outbox.pending
        _, shown, wanted = pending.get(ref, (source, knob, knob.value))
        try:
            new = step_value(shown, wanted, step)
        except NoStep as exc:
            self.view.notify(str(exc), "warning")
            return
        if same_value(new, shown.value):
            pending.pop(ref, None)  # back where it was shown: nothing to send
        else:
            pending[ref] = (source, shown, new)
        self._outbox.wait(self.coalesce_s)
        self.view.changed()

    def pause(self) -> None:
        """``p`` on a knob row: toggle the ``paused`` knob of the selected knob's stack."""
        found = self._selected_knob("pause")
        if found is None:
            return
        source = found[0]
        knob = _pause_knob(source)
        if knob is None:
            self.view.notify(
                f"{source.stack} at {source.url} has no pause knob: p on a lane row pauses "
                "the gate",
                "warning",
            )
            return
        self.flush()
        self._inflight.spawn(self._commit(source, [KnobChange(knob, not knob.value)]))

    def flush(self) -> None:
        """Send what the pending keys amount to now, one change per stack (the coalescing
        timer calls this)."""
        self._outbox.flush()

    def _send_keys(self, pending: Pending) -> None:
        by_source: dict[str, tuple[KnobSource, list[KnobChange]]] = {}
        for source, knob, value in pending.values():
            by_source.setdefault(source.url, (source, []))[1].append(KnobChange(knob, value))
        for source, changes in by_source.values():
            self._inflight.spawn(self._commit(source, changes))

    def edit(self) -> None:
        """``e`` on a knob row: every knob of the selected knob's target in one form; Apply
        sends one change with what differs."""
        found = self._selected_knob("edit")
        if found is None:
            return
        self.flush()  # keys pressed before the form are a change of their own, sent first
        source, knob = found
        self._inflight.spawn(self._edit(source, knob.target))

    async def _edit(self, source: KnobSource, target: str) -> None:
        await self._inflight.earlier()
        knobs = [k for k in source.knobs if k.target == target]
        if not knobs:
            return
        title = f"{source.stack} {clip(target, 60)} at {source.url}"
        wanted = await self.view.edit_knobs(title, knobs)
        changes = [
            KnobChange(k, wanted[k.name])
            for k in knobs
            if wanted and k.name in wanted and not same_value(wanted[k.name], k.value)
        ]
        if changes:
            await self._commit(source, changes)

    def undo(self) -> None:
        """Put back what this operator's last knob change changed (itself a change: confirmed
        if it cuts, conflict-checked, audited). Keys still waiting are sent first: they are
        the last change, so undo undoes them. An undo that did not go through stays undoable."""
        if not self.allowed("undo"):
            return
        self.flush()
        self._inflight.undo(
            self.history,
            lambda last: self._apply(last.source, last.inverse(), undo=True),
            self._lock,
            "no knob change to undo from this screen",
        )

    # -- sending --------------------------------------------------------------------------

    async def _commit(self, source: KnobSource, changes: list[KnobChange]) -> None:
        async with self._lock:
            await self._apply(source, changes)
            self.view.changed()

    async def _apply(
        self, source: KnobSource, changes: Sequence[KnobChange], undo: bool = False
    ) -> bool:
        """Confirm if it can hurt, then the one apply path. True when the stack took it."""
        lines = [c.describe() for c in changes]
        reason = knob_confirmation_reason(changes)
        if reason:
            details = [f"{source.stack:<6} {source.url}", f"why    {reason}", "", *lines]
            if not await self.view.confirm("Apply this change?", details):
                self.view.event("info", f"change cancelled: {'; '.join(lines)}")
                return False
        try:
            after = await apply_changes(source.adapter, changes, self.guard, self.audit, self.actor)
        except ReadOnlyError as exc:
            self.view.notify(str(exc), "warning")
            return False
        except KnobConflict as exc:
            self.view.notify(f"{exc.knob.label} changed elsewhere: refreshed, nothing "
                             "overwritten", "warning")  # fmt: skip
            self.view.event("warn", f"change refused: {exc}")
            await self._reread(source)
            return False
        except KnobError as exc:
            self.view.notify(f"change refused: {exc}", "error")
            self.view.event("bad", f"change refused: {exc}")
            return False
        except (AuditError, OSError) as exc:
            # The stack took the change; only its audit line is missing: said loudly, and
            # still undoable from the knobs as they are now.
            self.view.notify(f"changed, but not audited: {exc}", "error")
            self.view.event("bad", f"knob change not audited: {'; '.join(lines)}: {exc}")
            await self._reread(source)
            after = source.knobs
        source.shown(after)
        self.view.event("info", f"{'undone' if undo else 'knobs'}: {'; '.join(lines)}")
        if not undo:
            self.history.append(Applied(source, list(changes), after))
        return True

    async def _reread(self, source: KnobSource) -> None:
        """After a conflict the row shows what the stack has now (the next read would too,
        seconds later)."""
        try:
            source.shown(await source.adapter.read())
        except KnobError as exc:
            source.failed(str(exc))

    # -- tasks ----------------------------------------------------------------------------

    async def settle(self) -> None:
        """Send what is pending now and wait until every change has been answered."""
        await self._outbox.settle()

    def close(self) -> None:
        """Drop pending keys and stop changes in flight (the screen is going away)."""
        self._outbox.close()
