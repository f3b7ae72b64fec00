"""A chart's legend (its title and each line's label and latest value) never cuts a word: it
takes shorter labels or a second line, and at the least drops whole entries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuwatch.tui.widgets.chart import SHORT_LABELS, WRAP_MIN_ROWS, Legend, Line, legend

REQUESTS = [Line("running", [], "ok"), Line("waiting", [], "queue"), Line("gate queue", [], "x")]


def text(rows: Legend) -> list[str]:
    return ["".join(part for part, _ in row) for row in rows]


def entries(rows: Legend) -> list[tuple[str, str]]:
    """(label, value) pairs as shown, in order."""
    found = []
    for row in rows:
        for i, (part, color) in enumerate(row):
            if color not in (None, ""):
                found.append((part, row[i + 1][0].strip()))
    return found


def test_the_80x24_requests_chart_takes_short_labels_on_its_one_line() -> None:
    # 37 cells inside the border; the full labels would be cut at "gat".
    rows = legend("requests", REQUESTS, ["39", "24", "120"], 37, 4)
    assert text(rows) == ["requests run 39 wait 24 at gate 120"]
    assert entries(rows) == [("run", "39"), ("wait", "24"), ("at gate", "120")]


def test_a_tall_chart_keeps_its_full_labels_on_a_second_line() -> None:
    rows = legend("requests", REQUESTS, ["39", "24", "120"], 37, 20)
    assert text(rows) == ["requests  running 39  waiting 24", "gate queue 120"]


def test_what_fits_on_one_line_stays_as_it_was() -> None:
    lines = [Line("gen", [], "ok"), Line("prompt", [], "ttft")]
    assert text(legend("tokens/s 10s", lines, ["860", "2763"], 77, 4)) == [
        "tokens/s 10s  gen 860  prompt 2763"
    ]
    # Two spaces do not fit, one does: one space apart, nothing shortened.
    assert text(legend("tokens/s 10s", lines, ["860", "2763"], 33, 4)) == [
        "tokens/s 10s gen 860 prompt 2763"
    ]


words = st.text(alphabet="abcdefgh", min_size=1, max_size=9)
labels = st.sampled_from([*SHORT_LABELS, "users", "engine", "KV", "goodput", "p99"])


@given(
    title=words,
    names=st.lists(labels, min_size=1, max_size=4, unique=True),
    values=st.lists(st.sampled_from(["0", "39", "1200", "16.79s", "100%", "-"]), min_size=4),
    width=st.integers(10, 80),
    height=st.integers(2, 30),
)
def test_no_word_is_ever_cut(
    title: str, names: list[str], values: list[str], width: int, height: int
) -> None:
    lines = [Line(name, [], "ok") for name in names]
    shown_values = values[: len(lines)]
    rows = legend(title, lines, shown_values, width, height)
    assert rows[0][0] == (title, None)  # the title first, always
    pairs = entries(rows)
    # Whole entries, in order, each a label (or its short form) with its own value.
    full = list(zip(names, shown_values, strict=True))
    assert len(pairs) <= len(full)
    for (label, value), (name, wanted) in zip(pairs, full, strict=False):
        assert label in (name, SHORT_LABELS.get(name, name)) and value == wanted
    for line in text(rows)[1:] if len(rows) > 1 else []:
        assert len(line) <= width
    if len(title) <= width:
        assert all(len(line) <= width for line in text(rows))
    # A second line only leaves the plot a row; only a tall chart keeps its full labels there.
    if len(rows) > 1:
        assert height - len(rows) >= 1
        if any(label != SHORT_LABELS.get(label, label) for label, _ in pairs):
            assert height - len(rows) >= WRAP_MIN_ROWS
