"""The audit trail: an append-only log of limit changes, one JSON object per line.

Appending a line costs the same at entry 10 and entry 100,000 (the limits file, written whole
on every change, no longer carries the trail). The file is rotated by size: past ``max_bytes``
it becomes ``<name>.1`` (replacing the previous one) and a new file starts. The newest entries
are also held in memory, newest first, for the admin API: at most ``KEEP`` of them and at most
``RECENT_BYTES`` of their lines, whichever is fewer.

A crash (kill -9, power loss) mid-append can leave an incomplete last line. Start-up cuts it off
(and says how many bytes it dropped): left in place, the next append would join it, and that
joined line, no longer the last, would refuse the whole file at the start after.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from gpuwatch.adminapi import AdminApiError, AuditEntry
from gpuwatch.errors import GpuwatchError
from gpuwatch.safejson import JSONError, loads_bounded

log = logging.getLogger("gpuwatch.gate")

KEEP = 1000
MAX_BYTES = 8 * 1024 * 1024
# A person's entry carries the whole limits document before and after: 4.4 KB of line (5.3 KB
# held) with the default lanes, but 100 KB of line (430 KB held: many small dicts) with
# MAX_TENANT_LIMITS tenants' limits, so KEEP alone let 1000 changes hold over 400 MiB. Bounded
# by bytes too, the trail in memory costs at most about 4.3 x this (~26 MiB) whatever is in it,
# and with the default lanes still holds all KEEP entries (~5 MiB).
RECENT_BYTES = 6 * 1024 * 1024
_LINE_MAX = 256 * 1024


class AuditError(GpuwatchError):
    """An audit log that cannot be read back; the message names the file and line."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _line(entry: AuditEntry) -> bytes:
    return (json.dumps(entry.to_json(), separators=(",", ":")) + "\n").encode()


class AuditLog:
    def __init__(self, path: Path, max_bytes: int = MAX_BYTES) -> None:
        self.path = path
        self.rotated = path.with_name(path.name + ".1")
        self.max_bytes = max_bytes
        self.recent: deque[AuditEntry] = deque()  # newest first; bounded by ``_hold``
        self._sizes: deque[int] = deque()  # each held entry's line, in bytes, beside it
        self.held_bytes = 0

    def _hold(self, entries: Iterable[tuple[AuditEntry, int]]) -> None:
        """Hold ``(entry, line bytes)``, oldest first, letting the oldest held go past KEEP
        entries or RECENT_BYTES (the newest is always held)."""
        for entry, size in entries:
            self.recent.appendleft(entry)
            self._sizes.appendleft(size)
            self.held_bytes += size
            while len(self.recent) > KEEP or (
                self.held_bytes > RECENT_BYTES and len(self.recent) > 1
            ):
                self.recent.pop()
                self.held_bytes -= self._sizes.pop()

    def _clear(self) -> None:
        self.recent.clear()
        self._sizes.clear()
        self.held_bytes = 0

    def load(self) -> None:
        """Read the newest entries back (the rotated file first, then the current one)."""
        self._clear()
        for path in (self.rotated, self.path):
            self._hold(self._read(path))

    def _read(self, path: Path) -> list[tuple[AuditEntry, int]]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise AuditError(f"audit log {path}: cannot read: {exc.strerror or exc}") from exc
        lines = data.split(b"\n")
        torn = lines.pop()  # after the last newline: empty, or a line a crash cut short
        if torn:
            self._drop_torn_tail(path, len(data) - len(torn), len(torn))
        out = []
        for n, line in enumerate(lines, 1):
            try:
                entry = AuditEntry.from_json(loads_bounded(line, max_bytes=_LINE_MAX))
                out.append((entry, len(line) + 1))
            except (JSONError, AdminApiError) as exc:
                raise AuditError(f"audit log {path} line {n}: {exc}") from None
        return out

    def _drop_torn_tail(self, path: Path, keep: int, dropped: int) -> None:
        try:
            with open(path, "r+b") as fh:
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            # A file that cannot be cut cannot be appended to either: a change fails with its
            # own clear error, and reading what is whole goes on.
            log.warning(
                "audit log %s: ignoring an incomplete last line (%d bytes) a crash left; "
                "cannot cut it off: %s",
                path,
                dropped,
                exc.strerror or exc,
            )
            return
        log.warning(
            "audit log %s: dropped an incomplete last line (%d bytes) a crash left", path, dropped
        )

    def append(self, entry: AuditEntry) -> None:
        """Write one entry durably (fsync); rotate first when the file is full."""
        line = _line(entry)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size and size + len(line) > self.max_bytes:
            os.replace(self.path, self.rotated)
            _fsync_dir(self.path.parent)
            size = 0  # a new file: its name is made durable below
        with open(self.path, "ab") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        if size == 0:
            _fsync_dir(self.path.parent)  # a new file: make its name durable too
        self._hold([(entry, len(line))])

    def write_all(self, entries: Iterable[AuditEntry]) -> None:
        """Replace the log with ``entries`` (oldest first), atomically: for migration."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        items = [(entry, _line(entry)) for entry in entries]
        with open(tmp, "wb") as fh:
            for _, line in items:
                fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        self._clear()
        self._hold((entry, len(line)) for entry, line in items)
