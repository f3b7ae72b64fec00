"""The page plan (scrape.PagePlan): a page that is the last one with other numbers is read by
the plan, and what it gives equals the prefilter and parse of that page, scrape after scrape."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwatch.httpclient import async_client
from gpuwatch.sources.scrape import INLINE_MAX_CHARS, MAX_LINE_CHARS, ParseCache, map_page, scrape
from tests.conftest import FIXTURES, fixture_text
from tests.unit.test_parse_cache import VALUES, Page

FIXTURE_NAMES = sorted(p.name for p in FIXTURES.glob("*.prom"))
NUMBERS = ["0", "1", "2.5", "17", "1e3", "-0", "NaN", "+Inf", "123456789", "0.25"]
NOT_NUMBERS = ['x"y', "1_000", "0x10", "Infinity", "", '"', "{"]


def moved(
    text: str, rng: random.Random, share: float, words: list[str], comments: bool = False
) -> str:
    """``text`` with the last word of about ``share`` of its sample lines replaced (and of
    its comments, with ``comments``)."""
    out = []
    for line in text.split("\n"):
        head, space, _ = line.rpartition(" ")
        pick = space and rng.random() < share and (comments or not line.startswith("#"))
        out.append(f"{head} {rng.choice(words)}" if pick else line)
    return "\n".join(out)


def check(text: str, cache: ParseCache, max_engines: int) -> bool:
    """The cached mapping of ``text`` equals the one-shot mapping; whether the plan read it."""
    got = map_page("src", text, max_engines, cache)
    assert got == map_page("src", text, max_engines)
    return cache.stats.page_reused


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixtures_with_moving_numbers_are_read_by_the_plan(name: str) -> None:
    text, cache, rng = fixture_text(name), ParseCache(), random.Random(name)
    for n in range(6):
        reused = check(text, cache, 8)
        if n and cache.page is not None:
            assert reused  # only numbers moved: the plan read it
        text = moved(text, rng, 0.6, NUMBERS)


def test_a_live_page_is_read_by_the_plan_and_every_value_moves() -> None:
    text = fixture_text(FIXTURE_NAMES[0])
    cache = ParseCache()
    first = map_page("src", text, 8, cache)
    assert cache.page is not None and not cache.stats.page_reused
    again = map_page("src", moved(text, random.Random(1), 1.0, ["7", "8.5"]), 8, cache)
    assert cache.stats.page_reused and cache.stats.values_read > 0
    assert again.engines != first.engines


@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 8), st.sampled_from([1, 2, 256]))
def test_random_pages_equal_their_one_shot_mapping_scrape_after_scrape(
    rng: random.Random, scrapes: int, max_engines: int
) -> None:
    """Random pages (the parse cache's), whose values move, and sometimes their lines: with
    other numbers only, odd words and all, the plan's mapping is the one-shot mapping."""
    page, cache = Page(rng), ParseCache()
    for _ in range(scrapes):
        text = page.text().replace("a_total", "vllm:num_requests_running")
        check(text, cache, max_engines)
        words = VALUES + NOT_NUMBERS
        check(moved(text, rng, rng.random(), words, rng.random() < 0.2), cache, max_engines)
        page.change()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "# HELP vllm:num_requests_running Running.",
                "# TYPE vllm:num_requests_running gauge",
                'vllm:num_requests_running{model_name="a"} 1',
                'vllm:num_requests_running{model_name="b"} 2',
                'vllm:num_requests_running{model_name="c"} 3',
                'vllm:num_requests_running{model="d",model_name="e"} 4',
                "vllm:num_requests_waiting 5",
                'vllm:num_requests_waiting{model_name="a"} x"y',
                'vllm:num_requests_waiting{model_name="unterminated 6',
                "# TYPE vllm:num_requests_waiting gauge",
                "junk_metric 7",
                'junk_metric{model_name="z"} 8',
                "  vllm:num_requests_running 9",
                "vllm:num_requests_running 10 ",
                "vllm:num_requests_running",
                "",
                "# a comment",
                "# HELP vllm:num_requests_running",
            ]
        ),
        max_size=20,
    ),
    st.lists(st.sampled_from(NUMBERS + NOT_NUMBERS), min_size=20, max_size=20),
    st.sampled_from([1, 2, 256]),
)
def test_any_line_sequence_with_any_new_last_words(
    lines: list[str], words: list[str], max_engines: int
) -> None:
    """Lines that trip the prefilter (models past the cap, odd labels, blanks, comments whose
    last word is their name) with any new last word: the plan's reading, or a full one,
    always equals the one-shot mapping."""
    cache = ParseCache()
    text = "\n".join(lines) + "\n"
    check(text, cache, max_engines)
    changed = "\n".join(
        f"{line.rpartition(' ')[0]} {word}" if " " in line else line
        for line, word in zip(lines, words, strict=False)
    )
    check(changed + "\n", cache, max_engines)
    check(text, cache, max_engines)


def test_a_value_that_makes_its_line_too_long_is_a_new_page() -> None:
    text = 'vllm:num_requests_running{model_name="a"} 1\n'
    cache = ParseCache()
    check(text, cache, 8)
    long_value = "1" + "0" * MAX_LINE_CHARS  # a plain number, and too long a line
    assert not check(text.replace("} 1", f"}} {long_value}"), cache, 8)


def test_another_engine_limit_is_not_read_by_the_plan() -> None:
    text = "".join(f'vllm:num_requests_running{{model_name="m{i}"}} {i}\n' for i in range(4))
    cache = ParseCache()
    check(text, cache, 8)
    assert check(text, cache, 8)
    assert not check(text, cache, 2)


@pytest.mark.parametrize("size", ["small", "large"])
async def test_a_small_page_its_plan_read_is_mapped_on_the_loop(
    size: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread hop is skipped for a small page the plan read last time (the plan reads it
    again in a fraction of a millisecond); a page before that, or a large one, goes to a thread.
    Either way the result is the one-shot mapping."""
    page = fixture_text(FIXTURE_NAMES[0])
    if size == "large":  # past the inline limit: a family no dialect reads, padding it out
        page += "".join(f'junk_padding{{i="{i}"}} {i}\n' for i in range(INLINE_MAX_CHARS // 20))
    rng = random.Random(3)
    hops: list[str] = []
    real_to_thread = asyncio.to_thread

    async def counted(func: Callable[..., object], *args: object) -> object:
        hops.append(func.__name__)
        return await real_to_thread(func, *args)

    monkeypatch.setattr(asyncio, "to_thread", counted)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return  # the client closed its connection
            body = moved(page, rng, 0.5, NUMBERS).encode()
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n"
            writer.write(head.encode() + body)

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/metrics"
    cache = ParseCache()
    try:
        async with async_client(tls=False) as client:
            for _ in range(4):
                result = await scrape(client, url, cache=cache)
                assert result.engines and result.error is None
                assert result.page is not None
                # The kept lines are the page as the dialects read it: mapped again, the same.
                assert result == map_page(url, result.page, 8)
    finally:
        srv.close()
    # Small: the first page parsed whole, the second read by the plan (both in a thread), then
    # on the loop. Large: always in a thread.
    assert hops == ["map_page"] * (2 if size == "small" else 4)
