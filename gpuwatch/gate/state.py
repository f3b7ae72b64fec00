"""The gate's state: the limits file, the audit log beside it, and the change transaction.

The limits file is small and written whole on every change: temp file in the same folder,
fsync, rename, fsync the folder, so a crash leaves the old file or the new one, never half of
one. The audit trail is an append-only log next to it (``<state file>.audit.jsonl``, see
``audit.py``). A file that cannot be read back is an error at start that names the file and
the key, never a silent reset to defaults. A state file of schema 1 (the audit embedded in it)
is migrated: its entries move to the log.

``GateState.change`` is the one way limits change: the If-Match check, the new limits, the
audit entry, and persisting both, or nothing at all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuwatch.adminapi import AdminApiError, AuditEntry
from gpuwatch.errors import GpuwatchError
from gpuwatch.gate.audit import AuditError, AuditLog
from gpuwatch.gate.limits import (
    LaneLimits,
    Limits,
    LimitsError,
    apply_patch,
    changed,
    from_json,
    unknown_lanes,
)
from gpuwatch.safejson import JSONError, loads_bounded

log = logging.getLogger("gpuwatch.gate")

SCHEMA = 2
_STATE_MAX_BYTES = 64 * 1024 * 1024  # a schema-1 file with its embedded audit can be large


class StateError(GpuwatchError):
    """The state file exists but cannot be used; the message names the path."""


class Conflict(GpuwatchError):
    """If-Match named a version that is not the current one."""

    def __init__(self, limits: Limits, actor: str | None, if_match: str) -> None:
        super().__init__(
            f"limits changed by {actor} (version {limits.version}, you had {if_match[:40]})"
        )
        self.limits = limits
        self.actor = actor


class SaveError(GpuwatchError):
    """The change could not be persisted; nothing changed."""


def default_path(host: str, port: int) -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    safe_host = host.replace(":", "_").replace("/", "_") or "any"
    return Path(base) / "gpuwatch" / f"gate-{safe_host}-{port}.json"


def audit_path(state_path: Path) -> Path:
    return state_path.with_name(state_path.name + ".audit.jsonl")


def etag(version: int) -> str:
    return f'"{version}"'


def if_match_ok(header: str, version: int) -> bool:
    """RFC 9110 If-Match: ``*``, or a list of strong tags; a bare number is accepted too
    (older clients sent one)."""
    if header.strip() == "*":
        return True
    for tag in header.split(","):
        tag = tag.strip()
        if tag.startswith("W/"):
            continue  # weak tags never match If-Match
        if tag.strip('"') == str(version):
            return True
    return False


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@dataclass
class GateState:
    path: Path
    limits: Limits
    log: AuditLog
    _listeners: list[Callable[[Limits], None]] = field(default_factory=list)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Who made the version in force, once a change was made here: the log's recent entries
    # can all be the controller's after a few minutes of moves, which would hide the person.
    _changed_by: str | None = None

    @property
    def audit(self) -> list[AuditEntry]:
        """The newest entries, newest first."""
        return list(self.log.recent)

    def last_actor(self) -> str | None:
        """Who made the limits what they are: the newest change of the limits themselves (a
        controller's line, which changes no version, is not one)."""
        if self._changed_by is not None:
            return self._changed_by
        for entry in self.log.recent:
            if entry.controller is None:
                return entry.actor
        return None

    async def record(self, entry: AuditEntry) -> None:
        """An audit line that changes no limits (the adaptive controller's), under the same
        lock as changes: lines are never written by two threads at once."""
        async with self._lock:
            await asyncio.to_thread(self.log.append, entry)

    def save(self, limits: Limits | None = None) -> None:
        data = {"schema": SCHEMA, "limits": (limits or self.limits).to_json()}
        _write_atomic(self.path, json.dumps(data, indent=1).encode())

    def on_change(self, listener: Callable[[Limits], None]) -> None:
        self._listeners.append(listener)

    def _commit(self, before: Limits, after: Limits, entry: AuditEntry) -> None:
        self.save(after)
        try:
            self.log.append(entry)
        except OSError:
            self.save(before)  # no change without its audit entry
            raise

    async def change(self, patch: Any, actor: str, if_match: str | None) -> Limits:
        """Apply ``patch`` as ``actor``: Conflict, LimitsError or SaveError leave all as it was."""
        async with self._lock:
            before = self.limits
            if if_match is not None and not if_match_ok(if_match, before.version):
                raise Conflict(before, self.last_actor(), if_match)
            after = apply_patch(before, patch)
            entry = AuditEntry(
                time.time(),
                actor,
                after.version,
                changed(before, after),
                before=before.to_json(),
                after=after.to_json(),
            )
            try:
                await asyncio.to_thread(self._commit, before, after, entry)
            except OSError as exc:
                raise SaveError(f"cannot persist limits: {exc.strerror or exc}") from exc
            self.limits = after
            self._changed_by = actor
            for listener in self._listeners:
                listener(after)
            return after


def _entries(path: Path, audit: Any) -> list[AuditEntry]:
    if not isinstance(audit, list):
        raise StateError(f"state file {path}: key 'audit' must be a list of entries")
    entries = []
    for n, entry in enumerate(audit):
        try:
            entries.append(AuditEntry.from_json(entry))
        except AdminApiError as exc:
            raise StateError(f"state file {path}: key 'audit[{n}]': {exc}") from None
    return list(reversed(entries))  # schema 1 kept newest first; the log is oldest first


def load(path: Path, lanes: Mapping[str, LaneLimits]) -> GateState:
    """Persisted limits win over the config's; a missing file starts from the config."""
    audit = AuditLog(audit_path(path))
    if not path.exists():
        try:
            audit.load()
        except AuditError as exc:
            raise StateError(str(exc)) from exc
        return GateState(path, Limits(1, False, dict(lanes)), audit)
    try:
        data = loads_bounded(path.read_bytes(), max_bytes=_STATE_MAX_BYTES)
    except OSError as exc:
        raise StateError(f"state file {path}: cannot read: {exc.strerror or exc}") from exc
    except JSONError as exc:
        raise StateError(f"state file {path} is corrupt: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") not in (1, SCHEMA):
        raise StateError(f"state file {path}: unknown schema (expected {SCHEMA})")
    try:
        limits = from_json(data.get("limits"), lanes)
    except LimitsError as exc:
        reason = str(exc).removeprefix(f"{exc.field}: ")
        raise StateError(f"state file {path} is corrupt: key '{exc.field}' {reason}") from exc
    for name in unknown_lanes(data["limits"], lanes):
        log.warning(
            "state file %s: lane %r is not in the config; its saved limits are dropped",
            path,
            name[:60],
        )
    state = GateState(path, limits, audit)
    if data["schema"] == 1:
        entries = _entries(path, data.get("audit", []))
        try:
            audit.write_all(entries)  # first, so a crash here leaves schema 1 to migrate again
            state.save()
        except OSError as exc:
            raise StateError(f"state file {path}: cannot migrate: {exc.strerror or exc}") from exc
        log.info("state file %s: moved %d audit entries to %s", path, len(entries), audit.path)
        return state
    try:
        audit.load()
    except AuditError as exc:
        raise StateError(str(exc)) from exc
    return state
