"""loads_bounded: every hostile body is one JSONError with a short message, never another error."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuwatch.safejson import MAX_INT_DIGITS, JSONError, depth, loads_bounded

HOSTILE = {
    # json.loads raises RecursionError on these, not JSONDecodeError.
    "deep list": b"[" * 100_000 + b"]" * 100_000,
    "deep dict": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    # CPython's int/str conversion limit: a bare ValueError from json.loads.
    "5000-digit int": b'{"max_tokens": ' + b"9" * 5000 + b"}",
    "negative long int": b"-" + b"1" * (MAX_INT_DIGITS + 1),
    "NaN": b'{"temperature": NaN}',
    "Infinity": b"[Infinity]",
    "-Infinity": b"[-Infinity]",
    "float overflow": b"[1e999]",
    "bad utf-8": b'{"prompt": "\xff\xfe"}',
    "truncated": b'{"prompt": ',
    "empty": b"",
    "trailing garbage": b"{} x",
}


@pytest.mark.parametrize("body", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_bodies_raise_bad_json_with_a_short_message(body: bytes) -> None:
    with pytest.raises(JSONError) as info:
        loads_bounded(body)
    assert 0 < len(str(info.value)) < 200


def test_the_old_decoder_fails_these_with_other_errors() -> None:
    """Why the module exists: json.loads lets RecursionError and plain ValueError escape."""
    with pytest.raises(RecursionError):
        json.loads(HOSTILE["deep list"])
    with pytest.raises(ValueError) as info:
        json.loads(HOSTILE["5000-digit int"])
    assert not isinstance(info.value, json.JSONDecodeError)


def test_ordinary_json_round_trips() -> None:
    doc = {
        "model": "m",
        "messages": [{"role": "user", "content": 'a [ { " ] } b'}],
        "max_tokens": 10,
        "temperature": 0.5,
        "n": -3,
        "stop": None,
        "stream": True,
        "big": 10 ** (MAX_INT_DIGITS - 1),  # the longest integer accepted
    }
    assert loads_bounded(json.dumps(doc)) == doc
    assert loads_bounded(json.dumps(doc).encode()) == doc


def test_depth_limit_is_exact_and_brackets_inside_strings_do_not_count() -> None:
    nested: list[object] = []
    for _ in range(63):
        nested = [nested]
    assert loads_bounded("[" * 64 + "]" * 64, max_depth=64) == nested
    with pytest.raises(JSONError, match="nesting"):
        loads_bounded("[" * 65 + "]" * 65, max_depth=64)
    assert loads_bounded(json.dumps(["[" * 1000]), max_depth=2) == ["[" * 1000]
    assert loads_bounded(json.dumps(['\\"[[[']), max_depth=1) == ['\\"[[[']


def test_without_the_depth_walk_a_pathological_depth_is_too_deep_not_deeper_than_0() -> None:
    with pytest.raises(JSONError, match=r"^nesting too deep to decode$"):
        loads_bounded("[" * 100_000 + "]" * 100_000, max_depth=0)
    with pytest.raises(JSONError, match=r"^nesting deeper than 32$"):
        loads_bounded("[" * 100_000 + "]" * 100_000)


def test_max_bytes() -> None:
    assert loads_bounded(b"[1]", max_bytes=3) == [1]
    with pytest.raises(JSONError, match="over the limit"):
        loads_bounded(b"[1] ", max_bytes=3)


def test_bad_json_is_a_value_error() -> None:
    """Callers that already catch ValueError keep working."""
    assert issubclass(JSONError, ValueError)


def reference_depth(value: object) -> int:
    """The nesting depth by its definition (recursive, for small test values)."""
    if isinstance(value, dict):
        return 1 + max(map(reference_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(reference_depth, value), default=0)
    return 0


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**60), 10**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=40,
)


@given(JSON_VALUES, st.integers(min_value=0, max_value=6))
def test_the_level_by_level_walk_is_the_depth(value: object, limit: int) -> None:
    """``depth`` walks level by level (the fast walk): the same depth as the definition, and
    with a limit, the depth or ``limit + 1`` when deeper."""
    deep = reference_depth(value)
    assert depth(value) == deep
    assert depth(value, limit) == min(deep, limit + 1)
    text = json.dumps(value)
    if deep > limit and limit:
        with pytest.raises(JSONError, match=f"^nesting deeper than {limit}$"):
            loads_bounded(text, max_depth=limit)
    else:
        assert loads_bounded(text, max_depth=limit) == json.loads(text)
