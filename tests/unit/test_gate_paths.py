"""The path normal form (RFC 3986 6.2.2, plus folded slashes) and what it refuses."""

from __future__ import annotations

import pytest

from gpuwatch.gate.paths import PathError, normalise


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
