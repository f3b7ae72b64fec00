"""JSON from strangers: every failure is one ``JSONError`` (a ValueError) with a reason.

``json.loads`` fails in more ways than ``JSONDecodeError``: deep nesting raises RecursionError,
an integer over 4300 digits raises a bare ValueError, bytes are sniffed as UTF-16/32, and
``NaN`` / ``1e999`` come back as floats no other parser accepts. ``loads_bounded`` turns each of
these into a refusal, and bounds the nesting so that code walking the result (or ``json.dumps``
writing it back) never recurses deeper than ``max_depth``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from gpuwatch.errors import GpuwatchError

MAX_DEPTH = 32
MAX_INT_DIGITS = 64
_REASON_MAX = 200


class JSONError(GpuwatchError, ValueError):
    """A body (or file) that is not JSON we accept; ``str()`` is the reason, bounded."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason[:_REASON_MAX])


def _parse_int(max_digits: int) -> Any:
    def parse(text: str) -> int:
        if len(text.lstrip("-")) > max_digits:
            raise JSONError(f"an integer has more than {max_digits} digits")
        return int(text)

    return parse


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONError(f"number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise JSONError(f"{name} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Parsers disagree on which duplicate wins; a checked body must mean one thing to all.
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JSONError(f"duplicate key {json.dumps(key)[:60]}")
            seen.add(key)
    return out


def depth(value: Any, limit: int | None = None) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), without recursion; with ``limit``, the
    walk stops one level past it (then the answer is ``limit + 1``: deeper than the limit).

    Level by level, only containers kept: a scalar costs one type test in a comprehension.
    The walk that pushed every value with its level was two thirds of ``loads_bounded``'s
    time on the gate's status (bench/pollcost.py)."""
    level = [value] if isinstance(value, (dict, list)) else []
    deepest = 0
    while level:
        deepest += 1
        if limit is not None and deepest > limit:
            break
        below: list[Any] = []
        for node in level:
            children = node.values() if isinstance(node, dict) else node
            below += [c for c in children if isinstance(c, (dict, list))]
        level = below
    return deepest


def loads_bounded(
    data: bytes | str,
    max_depth: int = MAX_DEPTH,
    max_bytes: int | None = None,
    max_int_digits: int = MAX_INT_DIGITS,
) -> Any:
    """Parse UTF-8 JSON text; raises JSONError naming what was wrong.

    Refused: not UTF-8, over ``max_bytes``, nesting over ``max_depth``, integers over
    ``max_int_digits`` digits, NaN / Infinity / out-of-range floats, duplicate object keys.
    ``max_depth=0`` skips the walk that measures nesting (a hot caller with large, flat
    answers); the decoder's own recursion limit still refuses a pathological depth.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise JSONError(f"JSON is {len(data)} bytes, over the limit of {max_bytes}")
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONError(f"not UTF-8 (byte {exc.start})") from None
    else:
        text = data
    try:
        value = json.loads(
            text,
            parse_int=_parse_int(max_int_digits),
            parse_float=_parse_float,
            parse_constant=_no_constant,
            object_pairs_hook=_unique_keys,
        )
    except JSONError:
        raise
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise JSONError(f"invalid JSON: {exc.msg} at {where}") from None
    except RecursionError:
        # With the walk skipped (max_depth=0) the decoder's recursion limit is the only bound:
        # say so, not "deeper than 0".
        too_deep = f"nesting deeper than {max_depth}" if max_depth else "nesting too deep to decode"
        raise JSONError(too_deep) from None
    except ValueError as exc:  # int() and float() limits the hooks did not catch first
        raise JSONError(f"invalid JSON: {str(exc)[:80]}") from None
    if max_depth and depth(value, max_depth) > max_depth:
        raise JSONError(f"nesting deeper than {max_depth}")
    return value
