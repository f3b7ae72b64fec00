"""The gate's admin token, read from a file or ``$GPUWATCH_ADMIN_TOKEN``; never from argv.

One reader for the gate (which checks the token) and for its clients (which send it), so both
sides agree on what a token file holds.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "GPUWATCH_ADMIN_TOKEN"


def read_token(path: Path | None) -> str | None:
    """The admin token from a file or the environment; ValueError with the reason."""
    if path is not None:
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(f"cannot read admin token file {path}: {exc.strerror or exc}") from exc
        if not token:
            raise ValueError(f"admin token file {path} is empty")
        return token
    return os.environ.get(ENV_VAR) or None
