"""The audit trail: an append-only log of limit changes, one JSON object per line.

Appending a line costs the same at entry 10 and entry 100,000 (the limits file, written whole
on every change, no longer carries the trail). The file is rotated by size: past ``max_bytes``
it becomes ``<name>.1`` (replacing the previous one) and a new file starts. The newest
``KEEP`` entries are also held in memory, newest first, for the admin API.

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
_LINE_MAX = 256 * 1024


class AuditError(GpuwatchError):
    """An audit log that cannot be read back; the message names the file and line."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AuditLog:
    def __init__(self, path: Path, max_bytes: int = MAX_BYTES) -> None:
        self.path = path
        self.rotated = path.with_name(path.name + ".1")
        self.max_bytes = max_bytes
        self.recent: deque[AuditEntry] = deque(maxlen=KEEP)  # newest first

    def load(self) -> None:
        """Read the newest entries back (the rotated file first, then the current one)."""
        entries: list[AuditEntry] = []
        for path in (self.rotated, self.path):
            entries.extend(self._read(path))
        self.recent.clear()
        self.recent.extendleft(entries[-KEEP:])

    def _read(self, path: Path) -> list[AuditEntry]:
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
                out.append(AuditEntry.from_json(loads_bounded(line, max_bytes=_LINE_MAX)))
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
        line = (json.dumps(entry.to_json(), separators=(",", ":")) + "\n").encode()
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
        self.recent.appendleft(entry)

    def write_all(self, entries: Iterable[AuditEntry]) -> None:
        """Replace the log with ``entries`` (oldest first), atomically: for migration."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        items = list(entries)
        with open(tmp, "wb") as fh:
            for entry in items:
                fh.write((json.dumps(entry.to_json(), separators=(",", ":")) + "\n").encode())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        self.recent.clear()
        self.recent.extendleft(items[-KEEP:])
