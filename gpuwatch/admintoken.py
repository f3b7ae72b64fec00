"""The gate's admin token, read from a file or ``$GPUWATCH_ADMIN_TOKEN``; never from argv.

One reader for the gate (which checks the token) and for its clients (which send it), so both
sides agree on what a token file holds: surrounding whitespace is not part of the token (a
trailing newline, or a padded variable, would otherwise never authenticate), and the rest must
be sendable in an ``Authorization`` header: visible ASCII, no spaces.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

ENV_VAR = "GPUWATCH_ADMIN_TOKEN"
log = logging.getLogger("gpuwatch.admintoken")


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot go in an HTTP header, or None."""
    for ch in token:
        if not ("!" <= ch <= "~"):
            what = "a space" if ch == " " else f"U+{ord(ch):04X}"
            return f"contains {what}; a token is visible ASCII without spaces"
    return None


def _warn_if_readable(path: Path) -> None:
    # Like ssh with a private key: a secret others can read is worth saying out loud.
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning(
            "admin token file %s is readable by others (mode %03o): chmod 600 it",
            path,
            stat.S_IMODE(mode),
        )


def read_token(path: Path | None, env: str = ENV_VAR, what: str = "admin token") -> str | None:
    """The admin token (or another secret: ``what``, from ``env``) from a file or the
    environment; ValueError with the reason."""
    if path is not None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read {what} file {path}: {exc.strerror or exc}") from exc
        try:
            token = data.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise ValueError(f"{what} file {path} is not UTF-8 (byte {exc.start})") from None
        if not token:
            raise ValueError(f"{what} file {path} is empty")
        problem = token_problem(token)
        if problem:
            raise ValueError(f"{what} file {path}: the token {problem}")
        _warn_if_readable(path)
        return token
    token = os.environ.get(env, "").strip()
    if not token:
        return None
    problem = token_problem(token)
    if problem:
        raise ValueError(f"${env}: the token {problem}")
    return token
