"""The path normal form (RFC 3986 6.2.2, plus folded slashes) and what it refuses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuwatch.gate.paths import PathError, normalise, walk


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("/v1/completions", "/v1/completions"),
        ("/v1/images/", "/v1/images/"),
        ("/v1/a/..", "/v1/"),
        ("/v1/a/./", "/v1/a/"),
        ("/v1/a%3Ab", "/v1/a%3Ab"),
        ("/v1/a%3ab%7e", "/v1/a%3Ab~"),
        ("/v1///a//b", "/v1/a/b"),
    ],
)
def test_normal_form(raw: str, normal: str) -> None:
    assert normalise(raw) == normal
    assert normalise(normal) == normal  # idempotent: normalising twice changes nothing


def test_absolute_form_is_refused() -> None:
    with pytest.raises(PathError):
        normalise("http://elsewhere/v1/completions")


@given(st.lists(st.sampled_from(["/", "a", "B9", ".", "..", "%2e", "%2F", "%41", "~", ":", "-_"]),
                max_size=12))  # fmt: skip
def test_the_shortcut_agrees_with_the_walk(parts: list[str]) -> None:
    raw = "/" + "".join(parts)
    try:
        expected = walk(raw)
    except PathError:
        with pytest.raises(PathError):
            normalise(raw)
        return
    assert normalise(raw) == expected
    assert walk(expected) == expected
