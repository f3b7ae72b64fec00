"""What every subcommand shares: exit codes, argument types, the one-line failure."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

# The exit codes every subcommand uses live beside the errors that carry them; re-exported here.
from gpuwatch.errors import EXIT_FAILED as EXIT_FAILED
from gpuwatch.errors import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from gpuwatch.errors import EXIT_OK as EXIT_OK
from gpuwatch.errors import EXIT_USAGE as EXIT_USAGE

TOKEN_HELP = "admin token file (else $GPUWATCH_ADMIN_TOKEN); never on the command line"
DIST_HELP = "512 (fixed), 128:2048 (uniform), lognormal:mean=800,sigma=0.6"

Handler = Callable[[argparse.Namespace], int]


def positive(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    """An argparse type: a number of ``kind`` above 0, with a one-line reason otherwise."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            name = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"not {name}: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
        return value

    return parse


positive_float = positive(float)
positive_int = positive(int)


def fail(prog: str, message: str, code: int = EXIT_USAGE) -> int:
    """Print one line naming the subcommand; return the exit code to pass on."""
    print(f"{prog}: {message}", file=sys.stderr)
    return code


def use_uvloop() -> None:
    """uvloop where it is installed: the gate and the load generator serve ~1.6x more with it."""
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return
    uvloop.install()


def parse_value(raw: str) -> Any:
    """``none`` / ``null`` / empty -> None, ``true`` / ``false``, an int, a float, else the text."""
    if raw.lower() in ("null", "none", ""):
        return None
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    try:
        return int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            return raw


def parse_assignment(
    text: str, form: str = "LANE.KEY=VALUE", last_dot: bool = False
) -> tuple[str, str, Any]:
    """``chat.max_inflight=6`` -> ("chat", "max_inflight", 6); ValueError naming the problem.
    With ``last_dot`` the key is after the last dot (a stack's knob: its target may hold dots)."""
    where, sep, raw = text.partition("=")
    lane, dot, key = where.rpartition(".") if last_dot else where.partition(".")
    if not sep or not dot or not lane or not key:
        raise ValueError(f"expected {form}, got {text!r}")
    return lane, key, parse_value(raw)
