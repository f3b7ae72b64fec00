"""The one path every change to a stack's knob takes, from ``gpuwatch limits`` and from the
dashboard's keys alike:

1. the Guard, before anything is sent (read-only refuses here);
2. each value against its knob's kind and bounds (a KnobError naming the knob);
3. the knobs read again: one whose value moved since it was shown is a ``KnobConflict`` and
   nothing is written (stacks keep no versions: this is our gate's 409, done by the client);
4. the adapter's raw write;
5. the knobs read back: a value the stack did not take is a KnobError ("the stack kept 8");
6. one entry in the local audit log, in the gate's own format (``gate/audit.py``'s AuditLog of
   ``adminapi.AuditEntry`` lines), since none of these stacks keeps one.

What is left is a race window between step 3 and step 4 (milliseconds, one round trip): a
change made by someone else inside it is overwritten. Only a stack with versions could close it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from gpuwatch.adminapi import AuditEntry, JsonObject, LimitsPatch, LimitValue
from gpuwatch.control.guard import PAUSE_REASON, Guard, cut_by_more_than_half
from gpuwatch.control.knobs.base import (
    Knob,
    KnobAdapter,
    KnobChange,
    KnobConflict,
    KnobEndpoint,
    KnobError,
    same_value,
    show_value,
)
from gpuwatch.gate.audit import AuditLog

AUDIT_FILE = "knobs-audit.jsonl"
# Stacks keep no versions: every knob audit line says version 0 (the gate's start at 1).
NO_VERSION = 0


def default_audit_path() -> Path:
    """``$XDG_STATE_HOME/gpuwatch/knobs-audit.jsonl`` (``~/.local/state`` when unset)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpuwatch" / AUDIT_FILE


def open_audit(path: Path | str | None = None) -> AuditLog:
    """The local knob audit at ``path`` (default: ``default_audit_path()``), its newest entries
    loaded; an AuditError (naming file and line) when it cannot be read back."""
    log = AuditLog(Path(path) if path else default_audit_path())
    log.load()
    return log


def knob_confirmation_reason(changes: Sequence[KnobChange]) -> str | None:
    """Why these changes need the operator to confirm them, or None: pausing (a bool knob
    named "paused" set to true), or a numeric knob cut by more than half (a limit set where
    there was none counts as a cut)."""
    for change in changes:
        was, now = change.knob.value, change.value
        if change.knob.name == "paused":
            if now is True and was is not True:
                return f"{change.knob.stack} {change.knob.target}: {PAUSE_REASON}"
            continue
        if isinstance(was, bool) or isinstance(now, bool) or now is None:
            continue
        if was is None or cut_by_more_than_half(was, now):
            return f"{change.describe()} cuts it by more than half"
    return None


def _checked(adapter: KnobAdapter, changes: Sequence[KnobChange]) -> None:
    seen: set[tuple[str, str, str]] = set()
    for change in changes:
        knob = change.knob
        if knob.stack != adapter.endpoint.stack:
            raise KnobError(f"{knob.label}: not a knob of the {adapter.endpoint.stack} adapter")
        if knob.key in seen:
            raise KnobError(f"{knob.label}: changed twice in one go")
        seen.add(knob.key)
        problem = knob.problem(change.value)
        if problem:
            raise KnobError(f"{knob.label} {problem}")


def _by_key(knobs: Sequence[Knob]) -> dict[tuple[str, str, str], Knob]:
    return {k.key: k for k in knobs}


def find(knobs: Sequence[Knob], like: Knob) -> Knob | None:
    """The knob of ``knobs`` that is ``like`` (same stack, target and name), or None."""
    return _by_key(knobs).get(like.key)


def _limit(value: object) -> LimitValue:
    # The audit's change values are the gate's limit values; a bool is one (an int).
    return value if isinstance(value, (int, float)) else None


def _json(parts: dict[str, JsonObject]) -> JsonObject:
    out: JsonObject = {}
    out.update(parts)
    return out


def audit_entry(
    endpoint: KnobEndpoint,
    changes: Sequence[KnobChange],
    after: Sequence[Knob],
    actor: str,
    when: float | None = None,
) -> AuditEntry:
    """One audit line for ``changes``, in the gate's format: each "lane" is ``stack target``,
    ``change`` holds the values asked for, ``before`` the values shown, ``after`` the values
    read back (absent where the knob could not be read), ``reason`` says which API it went to."""
    lanes: dict[str, dict[str, LimitValue]] = {}
    before: dict[str, JsonObject] = {}
    now: dict[str, JsonObject] = {}
    read = _by_key(after)
    for change in changes:
        where = f"{change.knob.stack} {change.knob.target}"
        lanes.setdefault(where, {})[change.knob.name] = _limit(change.value)
        before.setdefault(where, {})[change.knob.name] = change.knob.value
        back = read.get(change.knob.key)
        if back is not None:
            now.setdefault(where, {})[change.knob.name] = back.value
    return AuditEntry(
        time.time() if when is None else when,
        actor,
        NO_VERSION,
        LimitsPatch(lanes=lanes),
        reason=f"{endpoint.stack} admin API {endpoint.base}",
        before=_json(before),
        after=_json(now) or None,
    )


def _moved(changes: Sequence[KnobChange], after: Sequence[Knob]) -> bool:
    read = _by_key(after)
    return any(
        (k := read.get(c.knob.key)) is None or not same_value(k.value, c.knob.value)
        for c in changes
    )


async def _audit_partial(
    adapter: KnobAdapter, changes: Sequence[KnobChange], audit: AuditLog, actor: str
) -> None:
    # A write that failed part way (one of several requests) may still have changed something:
    # what did change is audited, as far as the stack can still be read.
    try:
        after = await adapter.read()
    except KnobError:
        return
    if _moved(changes, after):
        audit.append(audit_entry(adapter.endpoint, changes, after, actor))


async def apply_changes(
    adapter: KnobAdapter,
    changes: Sequence[KnobChange],
    guard: Guard,
    audit: AuditLog,
    actor: str,
) -> list[Knob]:
    """Apply ``changes`` through ``adapter`` (steps in the module's docstring) and return every
    knob of the stack as read back after it. ReadOnlyError, KnobError, KnobConflict refuse;
    an AuditError or OSError from the audit file is raised after the change is made."""
    if not changes:
        return await adapter.read()
    guard.check("change " + "; ".join(c.describe() for c in changes))
    _checked(adapter, changes)
    now = _by_key(await adapter.read())
    for change in changes:
        current = now.get(change.knob.key)
        if current is None:
            raise KnobError(f"{change.knob.label}: no longer there; nothing written")
        if not same_value(current.value, change.knob.value):
            raise KnobConflict(change.knob, change.knob.value, current.value)
    try:
        await adapter.write(changes)
    except KnobError:
        await _audit_partial(adapter, changes, audit, actor)
        raise
    after = await adapter.read()
    audit.append(audit_entry(adapter.endpoint, changes, after, actor))
    read = _by_key(after)
    for change in changes:
        back = read.get(change.knob.key)
        if back is None:
            raise KnobError(f"{change.knob.label}: gone after the change")
        if not same_value(back.value, change.value):
            raise KnobError(
                f"{change.knob.label}: asked for {show_value(change.value)}, "
                f"the stack kept {show_value(back.value)}"
            )
    return after
