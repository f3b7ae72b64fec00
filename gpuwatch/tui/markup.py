"""Panel markup read into Textual ``Content``, remembered by its shape.

A panel's lines change every second, but mostly in their numbers: ``tok/s 10s prompt 955 gen
195`` becomes ``... prompt 961 gen 201``. Textual's markup parser costs ~0.1 ms a line
(bench/tui.py), most of a changed line's cost before it is drawn. So a line is parsed once per
*shape*: each digit of its text (outside ``[...]``) stands in for a placeholder character, the
shape is parsed (and remembered), and the digits are put back into the parsed text. A digit is one
character either way, so every span of the shape falls on the same characters of the line.

What is left to the parser as it is: digits inside brackets (tags such as ``[$panel-lighten-2]``,
and anything that might be one), markup holding the placeholder, and tags with quotes (a quoted
``]`` could end a tag later than the next ``]``). tests/unit/test_markup.py checks the result
equals ``Content.from_markup`` on random markup.
"""

from __future__ import annotations

import re
from functools import lru_cache

from textual.content import Content

_PLACEHOLDER = "\ue000"  # a private-use character: no panel shows it
# A bracketed run (kept whole: it may be a tag), or one digit of text.
_TOKEN = re.compile(r"\[[^\]]*\]|[0-9]")


@lru_cache(maxsize=2048)
def _parse(markup: str) -> Content:
    return Content.from_markup(markup)


def content(markup: str) -> Content:
    """``Content.from_markup(markup)``, parsed once per shape."""
    if _PLACEHOLDER in markup:
        return Content.from_markup(markup)
    digits: list[str] = []
    quoted = False

    def stand_in(match: re.Match[str]) -> str:
        nonlocal quoted
        token = match.group()
        if token[0] == "[":
            quoted = quoted or '"' in token or "'" in token
            return token
        digits.append(token)
        return _PLACEHOLDER

    shape = _TOKEN.sub(stand_in, markup)
    if quoted:
        return Content.from_markup(markup)
    parsed = _parse(shape)
    if not digits:
        return parsed
    parts = parsed.plain.split(_PLACEHOLDER)
    if len(parts) != len(digits) + 1:  # the parser dropped or moved one: trust it alone
        return Content.from_markup(markup)
    text = parts[0] + "".join(d + p for d, p in zip(digits, parts[1:], strict=True))
    return Content(text, list(parsed.spans), strip_control_codes=False)


def escape(text: object) -> str:
    """``text`` from a source (a label, a name, an error) as Textual markup that shows it as
    it is, and nothing more: control characters (an escape sequence that retitles the window or
    clears the screen, a bidi override) written out visibly (``\\x1b``), every ``[`` escaped.

    ``rich.markup.escape`` is not enough for Textual's parser: it leaves ``[2J`` alone (not
    tag-like to Rich), and Textual's parser then reads a later ``[/]`` as closing nothing: a
    MarkupError that ended the dashboard. A backslash at the very end would escape the tag
    that follows the text, so it gets a space after it.
    """
    raw = str(text)
    if not raw.isprintable():
        raw = "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in raw)
    out = raw.replace("[", "\\[")
    return out + " " if out.endswith("\\") else out
