"""The path normal form (RFC 3986 6.2.2, plus folded slashes) and what it refuses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuwatch.gate.paths import MAX_PATH, PathError, normalise, split_target, walk


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


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("v1/completions", "path must start with /"),
        ("/v1/a%2", "malformed percent-escape in the path"),
        ("/v1/a%zz", "malformed percent-escape in the path"),
        ("/v1/a%2Fb", "encoded %2F is not allowed in the path"),
        ("/v1/a%5cb", "encoded %5C is not allowed in the path"),
        ("/v1/a%00b", "encoded %00 is not allowed in the path"),
        ("/v1/a%1Fb", "encoded %1F is not allowed in the path"),
        ("/v1/a%7Fb", "encoded %7F is not allowed in the path"),
        ("/v1/a b", "character ' ' is not allowed in the path"),
        ("/v1/a\x00", "character '\\x00' is not allowed in the path"),
        ("/..", "'..' climbs above the root"),
        ("/v1/../../x", "'..' climbs above the root"),
    ],
)
def test_what_is_refused_says_why(raw: str, why: str) -> None:
    """The reason is what the client reads in the 400: exactly this one."""
    with pytest.raises(PathError) as refused:
        normalise(raw)
    assert str(refused.value) == why


def test_a_long_refused_character_is_told_in_bounded_words() -> None:
    with pytest.raises(PathError) as refused:
        normalise("/v1/" + "\u2028" * 3)
    assert str(refused.value) == "character '\\u2028' is not allowed in the path"
    assert len(str(refused.value)) <= 80


def test_escapes_that_stay_escaped_and_those_that_are_decoded() -> None:
    # %20 (space) and %25 (%) have meaning as escapes: kept, in upper case; %7E is "~".
    assert normalise("/v1/a%20b%25c%7e") == "/v1/a%20b%25c~"
    assert walk("/v1/%2E%2e/x") == "/x"  # encoded dots are dots: resolved, never a way around


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("/", "/"),
        ("//", "/"),
        ("/v1/x//", "/v1/x/"),
        ("/v1/x/.", "/v1/x/"),
        ("/v1/./x", "/v1/x"),
        ("/v1/x/..", "/v1/"),
        ("/v1/x/../y", "/v1/y"),
        ("/a/b/c/../../d", "/a/d"),
    ],
)
def test_the_walk_resolves_dots_and_folds_slashes(raw: str, normal: str) -> None:
    assert walk(raw) == normal
    assert normalise(raw) == normal


def test_a_path_over_the_bound_is_refused_before_it_is_read() -> None:
    at_bound = "/" + "a" * (MAX_PATH - 1)
    assert normalise(at_bound) == at_bound
    with pytest.raises(PathError) as refused:
        normalise(at_bound + "a")
    assert str(refused.value) == f"path is longer than {MAX_PATH} characters"


def test_the_target_splits_into_the_normal_path_and_the_query_as_sent() -> None:
    assert split_target("/v1/./x?a=%2F&b") == ("/v1/x", "a=%2F&b")
    assert split_target("/v1/x") == ("/v1/x", "")
    assert split_target("/v1/x?") == ("/v1/x", "")
    assert split_target("/v1/x?a=~!") == ("/v1/x", "a=~!")
    for bad in (" ", "\x7f", "\x00", "é"):
        with pytest.raises(PathError) as refused:
            split_target(f"/v1/x?a={bad}")
        assert str(refused.value) == "the query has a character that must be percent-encoded"
    with pytest.raises(PathError):
        split_target("/v1/../..?a")


def test_a_question_mark_in_the_query_is_part_of_the_query() -> None:
    assert split_target("/v1/x?next=/a?b") == ("/v1/x", "next=/a?b")
