"""The gate's state file: limits and the audit trail, written atomically on every change.

Temp file in the same folder, fsync, rename, fsync the folder: a crash leaves the old file or
the new one, never half of one. A file that cannot be read back is an error at start, never a
silent reset to defaults.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuwatch.gate.limits import LaneLimits, Limits, LimitsError, from_json

AUDIT_KEEP = 1000
SCHEMA = 1


class StateError(Exception):
    """The state file exists but cannot be used; the message names the path."""


def default_path(host: str, port: int) -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    safe_host = host.replace(":", "_").replace("/", "_") or "any"
    return Path(base) / "gpuwatch" / f"gate-{safe_host}-{port}.json"


@dataclass
class GateState:
    path: Path
    limits: Limits
    audit: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "limits": self.limits.to_json(), "audit": self.audit}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(self.to_json(), indent=1).encode()
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def record(self, entry: dict[str, Any]) -> None:
        self.audit.insert(0, entry)
        del self.audit[AUDIT_KEEP:]


def load(path: Path, lanes: Mapping[str, LaneLimits]) -> GateState:
    """Persisted limits win over the config's; a missing file starts from the config."""
    if not path.exists():
        return GateState(path, Limits(1, False, dict(lanes)))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise StateError(f"state file {path}: unknown schema (expected {SCHEMA})")
        limits = from_json(data.get("limits"), lanes)
        audit = data.get("audit", [])
        if not isinstance(audit, list):
            raise StateError(f"state file {path}: audit must be a list")
    except (OSError, UnicodeDecodeError) as exc:
        raise StateError(f"state file {path}: cannot read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise StateError(f"state file {path} is corrupt: {exc}") from exc
    except LimitsError as exc:
        raise StateError(f"state file {path} is corrupt: {exc}") from exc
    return GateState(path, limits, audit[:AUDIT_KEEP])
