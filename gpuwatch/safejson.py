"""A JSON decoder for bodies from strangers: every failure is one BadJSON with a short message.

``json.loads`` fails in ways that are not ``JSONDecodeError``: deep nesting raises
RecursionError, an integer over 4300 digits raises a bare ValueError (CPython's int/str
conversion limit), and it accepts ``NaN``/``Infinity``, which no JSON peer means and which a
later ``json.dumps(allow_nan=False)`` would refuse. A server that catches only
JSONDecodeError answers those with a 500. This module bounds size, depth, integer length and
constants before anything else sees the value.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any, NoReturn

__all__ = ["BadJSON", "loads_bounded"]

MAX_INT_DIGITS = 100

# Strings are skipped whole so a bracket inside one is not counted as nesting.
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_TOKENS_STR = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_OPEN = frozenset((b"[", b"{", "[", "{"))


class BadJSON(ValueError):
    """The body is not JSON this program accepts; the message is short and safe to echo."""


def _reject_constant(name: str) -> NoReturn:
    raise BadJSON(f"non-finite number {name} is not JSON")


def _parse_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise BadJSON(f"integer with {digits} digits is too long (limit {MAX_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 overflows to inf
        raise BadJSON("number out of range for a float")
    return value


def _check_depth(data: bytes | str, max_depth: int) -> None:
    """Count bracket nesting without recursion, so a million ``[`` cost a loop, not a crash."""
    matches: Iterator[re.Match[bytes]] | Iterator[re.Match[str]]
    matches = _TOKENS.finditer(data) if isinstance(data, bytes) else _TOKENS_STR.finditer(data)
    depth = 0
    for match in matches:
        token = match.group()
        if len(token) != 1:
            continue  # a string
        if token in _OPEN:
            depth += 1
            if depth > max_depth:
                raise BadJSON(f"nesting deeper than {max_depth} levels")
        else:
            depth -= 1


def loads_bounded(data: bytes | str, *, max_depth: int = 64, max_bytes: int | None = None) -> Any:
    """Decode ``data`` or raise BadJSON (never RecursionError, never a bare ValueError)."""
    if max_bytes is not None and len(data) > max_bytes:
        raise BadJSON(f"body of {len(data)} bytes is over the limit of {max_bytes}")
    _check_depth(data, max_depth)
    try:
        return json.loads(
            data,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_reject_constant,
        )
    except BadJSON:
        raise
    except json.JSONDecodeError as exc:
        raise BadJSON(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except UnicodeDecodeError:
        raise BadJSON("body is not valid UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise BadJSON(f"invalid JSON: {type(exc).__name__}") from None
