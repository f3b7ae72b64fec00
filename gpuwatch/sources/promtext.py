"""The Prometheus text format read into prometheus_client's families, fast for plain lines.

prometheus_client's parser reads a sample line in about 20 µs, three quarters of it walking the
label set a character at a time; a 5 MB page of a big node is a second of it. Nearly every line
a serving stack writes is plain: ``name{label="value",...} number``, no escapes, no timestamp.
``parse_text`` reads such lines with one regular expression each and builds the same
``Metric`` and ``Sample`` objects the parser builds, in the same order; a block holding any other
line (an escape, a quoted name, a timestamp, an odd number, a comment other than HELP/TYPE) is
given to ``text_string_to_metric_families`` whole, so its families and its errors are the
parser's own. The result equals ``list(text_string_to_metric_families(text))``, errors included
(tests/unit/test_promtext.py checks it on random, hostile and real pages); ``parse_samples``
gives the same samples without making the families, for a one-shot read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

T = TypeVar("T")
_WS = " \t\n\r\x0b\x0c"  # string.whitespace: what prometheus_client splits comment lines on
# A stripped HELP or TYPE line with a plain metric name: for these lines, and only these, the
# parser's family name is the name matched. Quoted (UTF-8) names are left to the parser.
_HEADER = re.compile(rf"#[{_WS}]+(?:HELP|TYPE)[{_WS}]+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:[{_WS}]|$)")
# A value read here: a plain ASCII number, Inf or NaN, group 1 set for an integer (which
# prometheus_client keeps an ``int``). Timestamps, exemplars and the rest go to the parser.
_NUMBER = r"[-+]?(?:([0-9]+)|(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?|Inf|NaN)"
_VALUE = re.compile(_NUMBER)
_MAX_VALUE_CHARS = 40  # int() refuses more than 4300 digits, where the parser falls back to float

# A plain sample line (stripped): a legacy metric name, optionally a label set of legacy,
# unreserved (no ``__``) label names with values free of quotes and backslashes (so nothing to
# unescape, and the first unquoted ``}`` is the set's end), one space, a plain number. For such
# a line the parser's name, labels and value are exactly these groups.
_LABEL = r'(?!__)[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_SAMPLE = re.compile(
    rf"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{{((?:{_LABEL}(?:,{_LABEL})*,?)?)\}})? ({_NUMBER})"
)
_LABELS = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
# A plain HELP or TYPE line: a legacy name, then text with no quote or backslash (which the
# parser would read as quoting or unescape) starting with a character it does not skip.
_COMMENT = re.compile(
    r'#[ \t]+(HELP|TYPE)[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:[ \t]+([^\s"\\][^"\\]*))?'
)
# The sample names a family of each type takes in (the parser's ``allowed_names``).
_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
    "untyped": ("",),
}


def number(text: str) -> float | None:
    """``text`` as prometheus_client reads a value, or None if it is not a plain number."""
    if len(text) > _MAX_VALUE_CHARS:
        return None
    match = _VALUE.fullmatch(text)
    if match is None:
        return None
    return int(text) if match.group(1) is not None else float(text)


def split_blocks(text: str) -> list[list[str]]:
    """The stripped non-blank lines of ``text`` (all the parser reads), cut before each HELP or
    TYPE line that names another family than the last HELP/TYPE line did. There the parser
    starts a new family whatever came before (its current family is the one that line named, or
    none after a stray sample), so parsing each block apart gives the families of the whole.
    After a comment line this cannot read, the next HELP/TYPE line is not a cut."""
    blocks: list[list[str]] = []
    block: list[str] = []
    last: str | None = ""  # the family name of the last HELP/TYPE line; None when unknown
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            header = _HEADER.match(line)
            if header is None:
                last = None
            else:
                name = header.group(1)
                if last is not None and name != last and block:
                    blocks.append(block)
                    block = []
                last = name
        block.append(line)
    if block:
        blocks.append(block)
    return blocks


def _munged(name: str, typ: str, samples: list[Sample]) -> tuple[str, list[Sample]]:
    """The parser's rule for counters (its ``build_metric``): the family name loses ``_total``,
    or the samples gain it."""
    if typ != "counter":
        return name, samples
    if name.endswith("_total"):
        return name[:-6], samples
    return name, [Sample(s.name + "_total", *s[1:]) for s in samples]


def _metric(name: str, documentation: str, typ: str, samples: list[Sample]) -> Metric:
    family, samples = _munged(name, typ, samples)
    metric = Metric(family, documentation, typ)
    metric.samples = samples
    return metric


def _samples(name: str, documentation: str, typ: str, samples: list[Sample]) -> list[Sample]:
    """A family's samples without the family: a page of one-sample families (the parser makes
    one of each series after a ``_created`` line) spends a fifth of its reading on them."""
    family, samples = _munged(name, typ, samples)
    if not family:  # "_total" less its suffix: the error the parser's ``Metric`` raises
        Metric(family, documentation, typ)
    return samples


def _plain_block(
    block: list[str],
    build: Callable[[str, str, str, list[Sample]], T],
    seen: dict[str, dict[str, str]],
) -> list[T] | None:
    """The parser's families of a block (stripped, non-blank lines) where every line is plain,
    read as ``text_fd_to_metric_families`` reads them, state for state, each made by ``build``
    (name, documentation, type, samples); None at the first line that is not plain. ``seen``
    keeps the labels read from each label set's text: the histograms of request latency share
    their label sets (bucket bounds and all), so one page has each several times. Samples with
    the same labels share one dict, as the families are read and never changed."""
    out: list[T] = []
    name, documentation, typ = "", "", "untyped"
    samples: list[Sample] = []
    allowed: tuple[str, ...] = ()
    match_sample = _SAMPLE.fullmatch
    find_labels = _LABELS.findall
    for line in block:
        if line[0] != "#":
            found = match_sample(line)
            if found is None:
                return None
            sample_name, label_text, value, integer = found.groups()
            if len(value) > _MAX_VALUE_CHARS:
                return None
            if label_text:
                labels = seen.get(label_text)
                if labels is None:
                    pairs = find_labels(label_text)
                    labels = dict(pairs)
                    if len(labels) != len(pairs):  # a label named twice: the parser's error
                        return None
                    seen[label_text] = labels
            else:
                labels = {}
            sample = Sample(sample_name, labels, int(value) if integer else float(value), None)
            if sample_name in allowed:
                samples.append(sample)
                continue
            if name:
                out.append(build(name, documentation, typ, samples))
            name, documentation, typ, samples, allowed = "", "", "untyped", [], ()
            out.append(build(sample_name, "", "untyped", [sample]))
            continue
        comment = _COMMENT.fullmatch(line)
        if comment is None:
            return None
        kind, candidate, rest = comment.groups()
        if kind == "HELP":
            if candidate != name:
                if name:
                    out.append(build(name, documentation, typ, samples))
                name, typ, samples, allowed = candidate, "untyped", [], (candidate,)
            documentation = rest or ""
        else:
            if rest not in _SUFFIXES:  # no type, or one the parser may refuse: its own words
                return None
            if candidate != name:
                if name:
                    out.append(build(name, documentation, typ, samples))
                name, documentation, samples = candidate, "", []
            typ = rest
            allowed = tuple(name + suffix for suffix in _SUFFIXES[rest])
    if name:
        out.append(build(name, documentation, typ, samples))
    return out


def _parsed(block: list[str]) -> list[Metric]:
    return list(text_string_to_metric_families("\n".join(block) + "\n"))


def parse_block(block: list[str]) -> list[Metric]:
    """The families of one block of ``split_blocks``; raises as the parser does."""
    families = _plain_block(block, _metric, {})
    return _parsed(block) if families is None else families


def parse_text(text: str) -> list[Metric]:
    """``list(text_string_to_metric_families(text))``, in a fraction of the time for plain
    pages; raises what the parser raises (ValueError and the like) for a malformed one."""
    out: list[Metric] = []
    seen: dict[str, dict[str, str]] = {}
    for block in split_blocks(text):
        families = _plain_block(block, _metric, seen)
        out += _parsed(block) if families is None else families
    return out


def parse_samples(text: str) -> list[Sample]:
    """The samples of ``parse_text``'s families, in order, without making the families where
    the lines are plain; raises as the parser does."""
    out: list[Sample] = []
    seen: dict[str, dict[str, str]] = {}
    for block in split_blocks(text):
        built = _plain_block(block, _samples, seen)
        if built is None:
            for family in _parsed(block):
                out += family.samples
        else:
            for samples in built:
                out += samples
    return out
