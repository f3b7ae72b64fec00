"""The monitor's tap: every reading it is fed, written a second at a time to a recording.

Rows wait in memory for at most ``flush_s`` and are committed together, so a kill -9 loses at
most that second. When SQLite cannot write (the disk is full, the file went away) recording
stops cleanly: an event says why, what was committed stays readable, the dashboard goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from gpuwatch.adminapi import AuditEntry
from gpuwatch.control.gate import GateClient, GateError
from gpuwatch.control.guard import Guard
from gpuwatch.fmt import clip
from gpuwatch.monitor.state import Monitor
from gpuwatch.record import codec, store
from gpuwatch.record.codec import SAME_LIMITS as SAME_LIMITS

PRUNE_EVERY_S = 60.0
AUDIT_EVERY_S = 5.0


def monitor_meta(monitor: Monitor) -> dict[str, Any]:
    """What a player needs to build the same monitor."""
    return {
        "urls": list(monitor.endpoints),
        "interval_s": monitor.interval_s,
        "window_s": monitor.window_s,
        "slo": monitor.health.slo,
        "admin_url": monitor.gate.url if monitor.gate else None,
        "started": monitor.started,
    }


class Recorder:
    """Writes what ``monitor`` is fed to ``path`` once attached to it (``attach``: the file is
    created or checked then, so a bad file fails before anything starts)."""

    def __init__(
        self,
        path: Path,
        keep_s: float | None = None,
        max_bytes: int | None = None,
        flush_s: float = 1.0,
    ) -> None:
        self.path = path
        self.keep_s, self.max_bytes, self.flush_s = keep_s, max_bytes, flush_s
        self.monitor: Monitor | None = None
        self.db: sqlite3.Connection | None = None
        self.pending: list[tuple[Any, ...]] = []
        self.dictionaries: dict[str, bytes] = {}
        self.new_dictionaries: list[tuple[str, bytes]] = []
        self.last_limits: Any = None
        # Added to the monitor's clock: 0 unless appending to a file whose clock ran further
        # (a recording from before a reboot), so the file's clock never runs backwards.
        self.shift = 0.0
        self.rows_written = 0
        self.stopped: str | None = None  # why recording stopped, once it has
        self._lock: int | None = None  # the file's writer lock, held while recording

    def attach(self, monitor: Monitor, **meta: Any) -> Recorder:
        """Start recording ``monitor``; RecordingError (one line) for a file that is not ours.
        ``meta`` adds to what the file says about itself (the host, the title); a file
        another recorder is writing to is refused the same way."""
        self._lock = store.lock_for_writing(self.path)
        try:
            self.db = store.create(self.path, {**monitor_meta(monitor), **meta})
            last = self.db.execute("SELECT mono, wall FROM rows ORDER BY id DESC LIMIT 1")
            row = last.fetchone()
            self.dictionaries = store.dictionaries(self.db)
        except (sqlite3.Error, store.RecordingError) as exc:
            if self.db is not None:
                self.db.close()
                self.db = None
            self._unlock()
            if isinstance(exc, store.RecordingError):
                raise
            raise store.RecordingError(f"{self.path}: cannot record: {exc}") from exc
        if row is not None and row[0] > monitor.clock():
            self.shift = row[0] + max(0.0, monitor.wall() - row[1]) - monitor.clock()
            store.set_meta(self.db, {"started": monitor.started + self.shift})
        self.monitor = monitor
        monitor.tap = self
        return self

    # -- the tap --------------------------------------------------------------------------

    def reading(self, kind: str, mono: float, wall: float, payload: Any) -> None:
        source = None
        if kind == "scrape":
            source = payload.source
        elif kind == "gate":
            limits, status, error, current = payload
            if limits is not None:
                if limits == self.last_limits:
                    limits = SAME_LIMITS
                else:
                    self.last_limits = limits
            payload = (limits, status, error, current)
        encoded = codec.encode_payload(kind, payload)
        data = None
        if encoded is not None:
            raw = codec.to_json(encoded)
            key = codec.dictionary_key(kind, source)
            zdict = self.dictionaries.get(key)
            if zdict is None:
                zdict = self.dictionaries[key] = raw
                self.new_dictionaries.append((key, raw))
            data = codec.pack(raw, zdict)
        self.pending.append((mono + self.shift, wall, kind, source, data))

    # -- writing --------------------------------------------------------------------------

    def flush(self) -> bool:
        """Commit what waits; False once recording has stopped."""
        if self.db is None:
            return False
        rows, self.pending = self.pending, []
        if not rows:
            return True
        try:
            store.insert_rows(self.db, rows, self.new_dictionaries)
            self.new_dictionaries = []
        except sqlite3.Error as exc:
            self.stop(str(exc))
            return False
        self.rows_written += len(rows)
        return True

    def prune(self) -> None:
        if self.db is None or (self.keep_s is None and self.max_bytes is None):
            return
        try:
            if store.prune(self.db, time.time(), self.keep_s, self.max_bytes):
                self.last_limits = None  # the row holding them may be gone: write them again
        except sqlite3.Error as exc:
            self.stop(str(exc))

    def save_audit(self, entries: list[AuditEntry]) -> None:
        if self.db is None:
            return
        try:
            store.insert_audit(self.db, entries)
        except sqlite3.Error as exc:
            self.stop(str(exc))

    def stop(self, reason: str) -> None:
        """Stop recording for good: the tap off, the file closed, an event saying why."""
        if self.stopped is not None:
            return
        self.stopped = clip(reason)
        if self.monitor is not None:
            self.monitor.tap = None
        self.pending.clear()
        if self.db is not None:
            try:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                self.db.close()
            except sqlite3.Error:
                pass
            self.db = None
        self._unlock()
        if self.monitor is not None:
            self.monitor.event("bad", f"recording to {self.path} stopped: {self.stopped}")

    def close(self) -> None:
        """The last rows committed and the file closed (the WAL folded back in)."""
        if self.db is None:
            return
        self.flush()
        if self.db is not None:
            if self.monitor is not None:
                self.monitor.tap = None
            self.db.close()
            self.db = None
        self._unlock()

    def _unlock(self) -> None:
        """Let another recorder have the file (after the last commit and the close)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    async def run(self, admin_url: str | None = None, token: str | None = None) -> None:
        """Commit every ``flush_s``; prune every minute; with a gate, its audit trail every
        5 s (read through a client of its own, behind a read-only guard)."""
        if admin_url is None:
            await self._run(None)
            return
        async with GateClient(admin_url, token, Guard(read_only=True)) as gate:
            await self._run(gate)

    async def _run(self, gate: GateClient | None) -> None:
        pruned = audited = 0.0
        try:
            while self.db is not None:
                await asyncio.sleep(self.flush_s)
                if not self.flush():
                    return
                now = time.monotonic()
                if now - pruned >= PRUNE_EVERY_S:
                    pruned = now
                    self.prune()
                if gate is not None and now - audited >= AUDIT_EVERY_S:
                    audited = now
                    # A gate that does not answer already shows so (DOWN): nothing to add.
                    with contextlib.suppress(GateError):
                        self.save_audit(await gate.audit(50))
        except Exception as exc:
            # Anything else (a value SQLite cannot bind, a bug) would end this task unseen, the
            # dashboard and `gpuwatch record` going on (exit 0) with nothing written. Stopping
            # says why: an event on screen, one line and exit 1 from `gpuwatch record`.
            self.stop(f"{type(exc).__name__}: {exc}")
        finally:
            self.close()  # cancelled (the program ends): what waits is committed
