"""Random hostile pages: mapping never raises, the JSON is always strict, lines stay bounded.

The pages use the names the dialects read (so they reach the mapping code, not just the
prefilter) with values and bucket bounds drawn from what broken exporters send.
"""

from __future__ import annotations

import datetime as dt
import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwatch.fmt import LINE_LIMIT
from gpuwatch.model import HostSample
from gpuwatch.snapshot import Snapshot, dumps_json, render_text
from gpuwatch.sources.dialects import wanted_sample_names
from gpuwatch.sources.scrape import map_page

NAMES = sorted(wanted_sample_names())
VALUES = st.sampled_from(
    ["0", "1", "-1", "3.5", "NaN", "+Inf", "-Inf", "1e308", "1e-308", "-0", "17", "1e999"]
)
LE = st.sampled_from(["0.1", "1", "+Inf", "NaN", "-Inf", "x", "1e999", "", "-5", "0x10"])
LABEL_VALUES = st.sampled_from(["m", "n", "[/]", "[bold]", "a\\nb", "inf", "nan", "0", "1", ""])
LABELS = st.sampled_from(
    ["model_name", "model", "engine", "tp_rank", "dp_rank", "le", "num_gpu_blocks", "block_size"]
)


@st.composite
def lines(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(NAMES))
    labels = draw(st.dictionaries(LABELS, LABEL_VALUES, max_size=3))
    if name.endswith("_bucket"):
        labels["le"] = draw(LE)
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{body}}} {draw(VALUES)}"


def _host() -> HostSample:
    return HostSample(1.0, [1.0], 0.1, 0.1, 0.1, 1, 1, 0, 0)


@settings(max_examples=300, deadline=None)
@given(st.lists(lines(), min_size=1, max_size=30))
def test_any_page_maps_and_serializes(page_lines: list[str]) -> None:
    result = map_page("page", "\n".join(page_lines) + "\n")
    for line in [result.error or "", *result.warnings]:
        assert len(line) <= LINE_LIMIT and "\n" not in line
    snap = Snapshot(dt.datetime.now(dt.timezone.utc), None, _host(), None, [result])

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON output")

    data = json.loads(dumps_json(snap), parse_constant=refuse)
    assert len(data["engines"]) == len(result.engines)

    table = io.StringIO()
    render_text(snap, table)
    for line in table.getvalue().splitlines():
        assert line.isprintable(), line
