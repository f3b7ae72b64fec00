"""Markup parsed by its shape (digits stood in for) reads exactly as Textual reads it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from textual.content import Content

from gpuwatch.tui import markup
from gpuwatch.tui.markup import content

TAGS = ["[b]", "[/b]", "[/]", "[dim]", "[$ok]", "[$panel-lighten-2]", "[b reverse $warn]",
        "[#ff0000]", "[rgb(1,2,3)]", "[5]", "[", "]", "\\[", "\\", "[on $kv]", "[@click=app.x(1)]",
        '[link="http://h/1]2"]', "[italic 50%]", "$", "$5", "[/dim]"]  # fmt: skip
TEXT = st.text(alphabet="0123456789 .,:/%~-abxyz█░●·\u00e9\u4e2d", min_size=0, max_size=8)
MARKUP = st.lists(st.one_of(st.sampled_from(TAGS), TEXT), max_size=14).map("".join)


def _same(a: Content, b: Content) -> bool:
    return (a.plain, list(a.spans)) == (b.plain, list(b.spans))


def _expected(text: str) -> Content | type[Exception]:
    try:
        return Content.from_markup(text)
    except Exception as exc:
        return type(exc)


@settings(max_examples=600, deadline=None)
@given(MARKUP)
def test_content_equals_textuals_parse(text: str) -> None:
    expected = _expected(text)
    if isinstance(expected, type):
        try:
            content(text)
        except Exception as exc:
            assert isinstance(exc, expected)
        else:
            raise AssertionError(f"{text!r}: Textual refuses it ({expected.__name__})")
        return
    assert _same(content(text), expected), text


def test_lines_that_differ_in_their_numbers_share_one_parse() -> None:
    markup._parse.cache_clear()
    first = content("tok/s [dim]10s[/] prompt 955 gen [b]195[/]")
    second = content("tok/s [dim]10s[/] prompt 961 gen [b]201[/]")
    assert second.plain == "tok/s 10s prompt 961 gen 201"
    assert _same(second, Content.from_markup("tok/s [dim]10s[/] prompt 961 gen [b]201[/]"))
    assert _same(first, Content.from_markup("tok/s [dim]10s[/] prompt 955 gen [b]195[/]"))
    info = markup._parse.cache_info()
    assert (info.misses, info.hits) == (1, 1)


def test_digits_in_tags_are_never_stood_in_for() -> None:
    line = "KV [$kv]▌[/][$panel-lighten-2]░░░[/] [$ok]3%[/] 4112/125.3k tok"
    assert _same(content(line), Content.from_markup(line))
    assert _same(
        content(line.replace("4112", "4113")), Content.from_markup(line.replace("4112", "4113"))
    )


FOREIGN = st.text(alphabet=" [ ] \\ / $ @ # a b 2 J \x1b \x07 \u202e \n", max_size=16)


@settings(max_examples=400, deadline=None)
@given(FOREIGN)
def test_escaped_foreign_text_shows_as_itself_between_tags_and_drives_nothing(text: str) -> None:
    """Regression: rich's escape left ``[2J`` (part of every CSI sequence) alone, and Textual's
    parser then read the next ``[/]`` as closing nothing: a MarkupError ended the dashboard.
    Control characters went to the terminal as they were."""
    escaped = markup.escape(text)
    parsed = Content.from_markup(f"[b]x[/]{escaped}[$ok]y[/]")
    assert parsed.plain.startswith("x") and parsed.plain.endswith("y")
    shown = parsed.plain[1:-1].rstrip(" ") if text.endswith("\\") else parsed.plain[1:-1]
    visible = "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)
    assert shown == visible
    assert all(c.isprintable() or c == "\n" for c in parsed.plain)
