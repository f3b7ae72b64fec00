"""The parse cache for live polling gives what a full parse gives, scrape after scrape."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.sources.promtext import split_blocks
from gpuwatch.sources.scrape import ParseCache, map_page
from tests.conftest import FIXTURES, fixture_text

NAMES = ["a", "b", "vllm:c", "d_total", "e_bucket", "f_created", "a_total", "g_count"]
TYPES = ["counter", "gauge", "histogram", "summary", "untyped", "info", None]
LABEL_NAMES = ["model_name", "engine", "x", "le", "quantile"]
LABEL_VALUES = ["m", "0", "1", "", "a b", 'q\\"q', "b\\\\s", "n\\nl", "}", ",", "=x", "# y", "1 2"]
VALUES = [
    "0",
    "1",
    "-1",
    "17",
    "3.0",
    "0.5",
    "1e3",
    "-2.5E-7",
    ".5",
    "5.",
    "+3",
    "-0",
    "NaN",
    "+Inf",
    "-Inf",
    "1768264339.8898673",
    "1e999",
    "12345678901234567890",
]
ODD_VALUES = ["1 1700000000000", '2 # {a="b"} 1', "0x10", "1_000", "\t4", "Infinity", "nan"]
HELPS = ["", "x", "doc with  spaces", "esc \\n aped", "t\tab"]


class Page:
    """A random page as a list of families, each a list of lines with a slot for the value."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.families = [self.family() for _ in range(rng.randint(0, 8))]

    def labels(self, typ: str | None) -> str:
        rng = self.rng
        names = LABEL_NAMES if typ not in ("histogram", "summary") else LABEL_NAMES[:3]
        keys = rng.sample(names, rng.randint(0, 3))
        return ",".join(f'{k}="{rng.choice(LABEL_VALUES)}"' for k in keys)

    def value(self) -> str:
        rng = self.rng
        return rng.choice(ODD_VALUES) if rng.random() < 0.01 else rng.choice(VALUES)

    def family(self) -> list[list[str]]:
        """Lines as [text before the value, value] pairs; a comment has no value."""
        rng = self.rng
        name, typ = rng.choice(NAMES), rng.choice(TYPES)
        lines: list[list[str]] = []
        if rng.random() < 0.7:
            lines.append([f"# HELP {name} {rng.choice(HELPS)}"])
        if typ is not None:
            lines.append([f"# TYPE {name} {typ}"])
        if rng.random() < 0.05:
            lines.append([rng.choice(["# a comment", "#", "# HELP", '# HELP "q" x', "# TYPE"])])
        for _ in range(rng.randint(0, 4)):
            lines += self.series(name, typ)
        if rng.random() < 0.2 and lines:  # a family's HELP after its samples, as some write it
            lines.append([f"# HELP {name} {rng.choice(HELPS)}"])
        return lines

    def series(self, name: str, typ: str | None) -> list[list[str]]:
        rng = self.rng
        labels = self.labels(typ)
        if typ == "histogram":
            suffixes = [
                f'_bucket{{{labels}{"," if labels else ""}le="{le}"}}'
                for le in ("0.1", "1", "+Inf")
            ] + [f"_count{{{labels}}}", f"_sum{{{labels}}}"]
        elif typ == "summary":
            suffixes = [f'{{{labels}{"," if labels else ""}quantile="0.5"}}', f"_count{{{labels}}}"]
        elif typ == "counter":
            suffixes = [f"_total{{{labels}}}" if not name.endswith("_total") else f"{{{labels}}}"]
        else:
            suffixes = [f"{{{labels}}}" if labels or rng.random() < 0.5 else ""]
        if rng.random() < 0.2:
            suffixes.append(f"_created{{{labels}}}")
        sep = rng.choice([" ", " ", " ", "  ", "\t"])
        return [[f"{name}{s}{sep}", self.value()] for s in suffixes]

    def change(self) -> None:
        """What a scrape later looks like: values move, series and families come and go."""
        rng = self.rng
        share = rng.choice([0.0, 0.1, 0.5, 1.0])
        for family in self.families:
            for line in family:
                if len(line) == 2 and rng.random() < share:
                    line[1] = self.value()
        roll = rng.random()
        if roll < 0.15 and self.families:
            del self.families[rng.randrange(len(self.families))]
        elif roll < 0.3:
            self.families.insert(rng.randint(0, len(self.families)), self.family())
        elif roll < 0.4:
            rng.shuffle(self.families)
        elif roll < 0.55 and self.families:
            family = rng.choice(self.families)
            samples = [i for i, line in enumerate(family) if len(line) == 2]
            if samples and rng.random() < 0.5:
                del family[rng.choice(samples)]
            else:
                header = family[0][0] if family and len(family[0]) == 1 else ""
                words = [*header.split(), "", "", "", ""]
                name, typ = words[2] or "a", words[3] if words[1] == "TYPE" else None
                family[rng.randint(0, len(family)) : 0] = self.series(name, typ or None)
        elif roll < 0.6:  # blank lines and indentation, which the parser ignores
            for family in self.families:
                if family and rng.random() < 0.3:
                    family[0][0] = rng.choice(["\n", "  ", "\n  \t"]) + family[0][0]

    def text(self) -> str:
        return "".join("".join(line) + "\n" for family in self.families for line in family)


def outcome(parse: Callable[[str], Iterable[Metric]], text: str) -> Sequence[object]:
    """A full description of a parse (values by type and repr, so NaN equals NaN), or its error."""
    try:
        families = list(parse(text))
    except Exception as exc:  # the parser raises several types; the cache must raise the same
        return ("error", type(exc).__name__, str(exc))
    return [
        (
            f.name,
            f.documentation,
            f.type,
            f.unit,
            [
                (
                    s.name,
                    s.labels,
                    type(s.value).__name__,
                    repr(s.value),
                    s.timestamp,
                    s.exemplar,
                    s.native_histogram,
                )
                for s in f.samples
            ],
        )
        for f in families
    ]


@settings(max_examples=400, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 8))
def test_cached_parse_equals_full_parse_after_every_scrape(
    rng: random.Random, scrapes: int
) -> None:
    page, cache = Page(rng), ParseCache()
    for _ in range(scrapes):
        text = page.text()
        assert outcome(cache.parse, text) == outcome(text_string_to_metric_families, text), text
        page.change()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "# HELP a x",
                "# TYPE a gauge",
                "# HELP b y",
                "# TYPE b counter",
                "a 1",
                "a 2",
                "b_total 1",
                "c 3",
                "# HELP",
                "#",
                '# HELP "a" z',
                "# TYPE a_total counter",
                "a_total 1",
                "# TYPE h histogram",
                'h_bucket{le="+Inf"} 1',
                "h_count 1",
                "h_sum 2",
                "",
                "  # TYPE b gauge",
                'a{x="}"} 5',
            ]
        ),
        max_size=25,
    ),
    st.lists(st.integers(0, 9), max_size=25),
)
def test_any_line_sequence(lines: list[str], digits: list[int]) -> None:
    """Pages of lines in any order, the ones that trip a parser's state included."""
    cache = ParseCache()
    for scrape in range(2):
        text = "\n".join(
            line.replace("1", str(d)) if scrape and d % 2 else line
            for line, d in zip(lines, [*digits, *[0] * len(lines)], strict=False)
        )
        assert outcome(cache.parse, text) == outcome(text_string_to_metric_families, text)


def test_blocks_start_where_the_parser_starts_a_family() -> None:
    text = "x 1\n# HELP a d\n# TYPE a gauge\na 1\n# HELP a again\na 2\n# TYPE b gauge\nb 1\n"
    assert split_blocks(text) == [
        ["x 1"],
        ["# HELP a d", "# TYPE a gauge", "a 1", "# HELP a again", "a 2"],
        ["# TYPE b gauge", "b 1"],
    ]
    # After a line it cannot read, the next HELP/TYPE line may continue the parser's family.
    assert len(split_blocks('# HELP "a" d\n# TYPE a gauge\na 1\n')) == 1


def test_unchanged_blocks_are_reused_and_changed_values_only_read() -> None:
    page = '# TYPE a gauge\na{x="1"} 1\na{x="2"} 2\n# TYPE b gauge\nb 1\n'
    cache = ParseCache()
    first = cache.parse(page)
    assert cache.stats.blocks_parsed == 2
    again = cache.parse(page)
    assert again[0] is first[0] and cache.stats.blocks_same == 2
    moved = cache.parse(page.replace("} 2", "} 3.5"))
    assert (cache.stats.blocks_same, cache.stats.blocks_refilled, cache.stats.values_read) == (
        1,
        1,
        1,
    )
    assert moved[0].samples[0] is first[0].samples[0] and moved[0].samples[1].value == 3.5
    assert first[0].samples[1].value == 2  # what was handed out earlier never changes
    cache.parse(page.replace('a{x="2"} 2\n', ""))  # a series gone: that block is parsed
    assert cache.stats.blocks_parsed == 1 and cache.stats.lines_parsed == 2


def test_memory_holds_only_the_last_page() -> None:
    cache = ParseCache()
    for i in range(50):
        cache.parse(f"# TYPE m{i} gauge\nm{i} 1\n")
    assert len(cache._blocks) == 1 and len(cache._templates) == 1


NAMES_ = sorted(p.name for p in FIXTURES.glob("*.prom"))


@pytest.mark.parametrize("name", NAMES_)
def test_map_page_with_a_cache_equals_without_on_fixtures(name: str) -> None:
    text = fixture_text(name)
    cache = ParseCache()
    rng = random.Random(name)
    for _ in range(4):
        assert map_page(name, text, cache=cache) == map_page(name, text)
        # Move every number a little, as a live page does.
        text = "\n".join(
            line
            if line.startswith("#") or " " not in line
            else f"{line.rsplit(' ', 1)[0]} {rng.choice(['0', '1.5', '7', '2e3'])}"
            for line in text.split("\n")
        )


def test_a_line_that_loses_its_value_fails_as_the_parser_does() -> None:
    cache = ParseCache()
    cache.parse('a{x="1"} 5\n')
    text = 'a{x="1"}\n'
    assert outcome(cache.parse, text) == outcome(text_string_to_metric_families, text)
    assert outcome(cache.parse, text)[0] == "error"


def reference_prefilter(text: str, max_models: int | None) -> tuple[str, int, int]:
    """The prefilter as it was before the cache (one ``_line_name`` and model regex a line)."""
    from gpuwatch.sources.scrape import WANTED, _line_name, _model_label

    keep: list[str] = []
    models: dict[str, int] = {}
    for line in text.split("\n"):
        if _line_name(line) not in WANTED:
            continue
        if max_models is not None and line[0] != "#":
            model = _model_label(line)
            if model is not None and models.setdefault(model, len(models)) >= max_models:
                continue
        keep.append(line)
    keep.append("")
    return "\n".join(keep), len(models), min(len(models), max_models or 0)


PREFILTER_NAMES = ["vllm:num_requests_running", "vllm:e2e_request_latency_seconds_bucket", "junk"]
PREFILTER_LABELS = [
    'model_name="a"',
    'model="b"',
    'model_name="c d"',
    'x="model_name=\\"z\\""',
    'e="1"',
    'model_name = "sp"',
    'q="a\\"b"',
    'model_name="unterminated',
]


@st.composite
def prefilter_lines(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(PREFILTER_NAMES))
    if draw(st.booleans()) and draw(st.booleans()):
        return f"# {draw(st.sampled_from(['HELP', 'TYPE', 'x']))} {name} gauge"
    labels = ",".join(draw(st.lists(st.sampled_from(PREFILTER_LABELS), max_size=3)))
    body = f"{{{labels}}}" if labels or draw(st.booleans()) else ""
    sep = draw(st.sampled_from([" ", "\t", "  ", ""]))
    value = draw(st.sampled_from(["1", "2.5", 'x"y', "NaN", "3 4", ""]))
    return f"{draw(st.sampled_from(['', ' ']))}{name}{body}{sep}{value}"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(prefilter_lines(), max_size=12), min_size=1, max_size=4),
    st.sampled_from([None, 1, 2, 256]),
)
def test_prefilter_with_and_without_a_cache_equals_the_reference(
    pages: list[list[str]], max_models: int | None
) -> None:
    from gpuwatch.sources.scrape import prefilter

    cache = ParseCache()
    for lines in pages:
        text = "\n".join(lines) + "\n"
        expected = reference_prefilter(text, max_models)
        for result in (
            prefilter(text, max_models=max_models),
            prefilter(text, max_models=max_models, cache=cache),
        ):
            assert (result.text, result.models_seen, result.models_kept) == expected


async def test_each_polled_endpoint_keeps_its_own_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from gpuwatch import polling
    from gpuwatch.model import ScrapeResult
    from gpuwatch.monitor.state import Monitor

    caches: dict[str, list[object]] = {}

    async def fake_scrape(client: object, url: str, *args: object) -> ScrapeResult:
        caches.setdefault(url, []).append(args[-1])
        if len(caches[url]) == 3:
            raise asyncio.CancelledError
        return ScrapeResult(url, error="HTTP 500")

    monkeypatch.setattr(polling, "scrape", fake_scrape)
    urls = ["http://a/metrics", "http://b/metrics"]
    monitor = Monitor(urls, interval_s=0.01)
    for url in urls:
        with pytest.raises(asyncio.CancelledError):
            await polling.poll_endpoint(monitor, url, 0.01)
    a, b = caches[urls[0]], caches[urls[1]]
    assert isinstance(a[0], ParseCache) and a[0] is a[1] is a[2]
    assert isinstance(b[0], ParseCache) and b[0] is not a[0]
