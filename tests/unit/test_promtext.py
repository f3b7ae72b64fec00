"""The fast reader of the text format gives what prometheus_client's parser gives, errors
included: on random pages, on lines built to sit at the edge of what it reads itself, and on
every real page in tests/fixtures, where it must read (nearly) everything itself."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gpuwatch.sources import promtext
from gpuwatch.sources.promtext import parse_samples, parse_text, split_blocks
from tests.conftest import FIXTURES, fixture_text
from tests.unit.test_parse_cache import Page, outcome

# Pieces of sample lines, each either plain or one step off plain (an escape, a reserved or
# repeated label, a timestamp, an odd number, a missing quote or brace...).
NAMES = ["a", "vllm:b_total", "c_bucket", "c_count", "__d", "e:f", "1x", "g-h", "a_total", ""]
LABEL_KEYS = ["m", "model_name", "le", "__name__", "__r", "x:y", "1k", "m ", ""]
LABEL_VALUES = ["v", "", "a b", "}", ",", "=", '\\"', "\\\\", "\\n", "é", "#", 'x"', "{"]
SEPARATORS = [",", ", ", ",,", ""]
VALUES = ["1", "1.5", "-0", "+Inf", "NaN", "nan", "1e3", "1_0", "0x1", "9" * 50, "1 2", "", "1\t"]
COMMENTS = [
    "# HELP a doc",
    "# HELP a",
    "# HELP a  two  spaces",
    '# HELP a "quoted"',
    "# HELP a esc\\\\aped",
    "# TYPE a gauge",
    "# TYPE a counter",
    "# TYPE a_total counter",
    "# TYPE c histogram",
    "# TYPE a summary",
    "# TYPE a info",
    "# TYPE a bogus",
    "# TYPE a",
    "# TYPE a gauge extra",
    "#\tTYPE\ta\tgauge",
    "# HELP",
    "#",
    "# just a comment",
    '# HELP "a" quoted name',
]


def described(s: Sample) -> tuple[object, ...]:
    return (s.name, s.labels, type(s.value), repr(s.value), s.timestamp, s.exemplar)


def same_reading(text: str) -> None:
    """``parse_text`` gives the parser's families, ``parse_samples`` their samples (or both the
    parser's error, message and all)."""
    reference = outcome(text_string_to_metric_families, text)
    assert outcome(parse_text, text) == reference, text
    if reference and reference[0] == "error":
        with pytest.raises(Exception) as info:  # the parser raises several types
            parse_samples(text)
        assert ("error", type(info.value).__name__, str(info.value)) == reference, text
        return
    flat = [described(s) for f in text_string_to_metric_families(text) for s in f.samples]
    assert [described(s) for s in parse_samples(text)] == flat, text


@st.composite
def sample_lines(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(NAMES))
    pairs = draw(
        st.lists(st.tuples(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES)), max_size=3)
    )
    sep = draw(st.sampled_from(SEPARATORS))
    body = sep.join(f'{k}="{v}"' for k, v in pairs)
    if draw(st.booleans()):
        body += draw(st.sampled_from(["", ",", " "]))
    labels = draw(st.sampled_from([f"{{{body}}}", f"{{{body}}}", f"{{{body}", ""]))
    gap = draw(st.sampled_from([" ", " ", "  ", "\t", ""]))
    return f"{name}{labels}{gap}{draw(st.sampled_from(VALUES))}"


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.one_of(sample_lines(), st.sampled_from(COMMENTS)), min_size=1, max_size=12))
def test_edge_lines_read_as_the_parser_reads_them(lines: list[str]) -> None:
    same_reading("\n".join(lines) + "\n")


@settings(max_examples=400, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 4))
def test_random_pages_read_as_the_parser_reads_them(rng: random.Random, pages: int) -> None:
    page = Page(rng)
    for _ in range(pages):
        same_reading(page.text())
        page.change()


@pytest.mark.parametrize("line", ['a{x="1",x="2"} 1', 'a{__name__="b"} 1', "a 1 2", "a{} 1x"])
def test_a_line_the_parser_refuses_or_reads_its_own_way_goes_to_it(line: str) -> None:
    """Repeated labels, the name as a label, a timestamp, a bad number: the parser's answer,
    its error message included."""
    text = f"# TYPE a gauge\n{line}\n"
    assert promtext._plain_block(split_blocks(text)[0], promtext._metric, {}) is None
    same_reading(text)


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.prom")))
def test_real_pages_are_read_here_and_read_the_same(name: str) -> None:
    text = fixture_text(name)
    same_reading(text)
    blocks = split_blocks(text)
    plain = [b for b in blocks if promtext._plain_block(b, promtext._metric, {}) is not None]
    # What the exporters write is plain; only an escaped HELP text or label sends a block on.
    assert len(plain) >= 0.9 * len(blocks), [b[0] for b in blocks if b not in plain]
