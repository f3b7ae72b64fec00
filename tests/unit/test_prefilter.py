"""The prefilter must not change what a full parse would give."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.sources.scrape import (
    MAX_LINE_CHARS,
    WANTED,
    _model_label,
    map_page,
    parse_families,
    prefilter,
)
from tests.conftest import FIXTURES, fixture_text

NAMES = sorted(p.name for p in FIXTURES.glob("*.prom"))


@pytest.mark.parametrize("name", NAMES)
def test_prefiltered_parse_equals_full_parse_of_wanted_families(name: str) -> None:
    text = fixture_text(name)
    full = [
        f
        for f in text_string_to_metric_families(text)
        if any(s.name in WANTED for s in f.samples) or f.name in WANTED
    ]
    assert parse_families(text) == full


@pytest.mark.parametrize("name", NAMES)
def test_mapping_is_identical_with_and_without_prefilter(name: str) -> None:
    text = fixture_text(name)
    filtered = map_page(name, text)
    # map_page always filters; build the unfiltered result the same way by hand.
    from gpuwatch.sources.dialects import index_samples, map_samples

    families = parse_families(text, filtered=False)
    unfiltered = map_samples(name, index_samples(s for f in families for s in f.samples))
    assert filtered.engines == unfiltered.engines


def test_prefilter_drops_unused_families() -> None:
    text = fixture_text("vllm-1.prom")
    kept = prefilter(text).text
    assert "python_gc_objects_collected_total" not in kept
    assert "vllm:request_params_best_of" not in kept
    assert "vllm:time_to_first_token_seconds_bucket" in kept
    assert len(kept) < len(text) / 2


def test_model_cap_keeps_the_first_models_in_page_order_and_counts_all() -> None:
    page = "".join(
        f'vllm:num_requests_running{{model_name="{m}"}} 1\n'
        f'vllm:num_requests_waiting{{model_name="{m}"}} 2\n'
        for m in ("c", "a", 'q\\"uote', "b", "a")
    )
    kept = prefilter(page, max_models=2)
    assert (kept.models_seen, kept.models_kept) == (4, 2)
    assert kept.text.count('model_name="c"') == 2 and kept.text.count('model_name="a"') == 4
    assert "uote" not in kept.text and 'model_name="b"' not in kept.text
    # Metadata and unlabelled series are never dropped by the cap.
    page = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n" + page
    assert prefilter(page, max_models=1).text.startswith(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
    )


def test_model_label_is_read_like_the_dialects_read_it() -> None:
    # model_name wins over model; a "model_name=" inside another label's value is not a label.
    line = 'vllm:num_requests_running{model="x",model_name="y"} 1\n'
    other = 'vllm:num_requests_running{note="model_name=\\"z\\"",model="w"} 1\n'
    kept = prefilter(line + other, max_models=1)
    assert kept.models_seen == 2 and kept.text == line
    result = map_page("page", line + other, max_engines=1)
    assert [e.model for e in result.engines] == ["y"]
    assert result.warnings == ["2 engines, showing the first 1 (raise [scrape] max_engines)"]


def test_without_a_cap_nothing_is_dropped() -> None:
    text = fixture_text("vllm-4.prom")
    assert prefilter(text).text == prefilter(text, max_models=10**6).text


def test_a_line_over_the_limit_is_dropped_and_counted_a_line_at_it_is_kept() -> None:
    head = 'vllm:num_requests_running{model_name="'
    at = head + "a" * (MAX_LINE_CHARS - len(head) - 4) + '"} 1'
    over = head + "b" * (MAX_LINE_CHARS - len(head) - 3) + '"} 2'
    help_over = "# HELP vllm:num_requests_running " + "h" * MAX_LINE_CHARS
    assert len(at) == MAX_LINE_CHARS and len(over) == MAX_LINE_CHARS + 1
    kept = prefilter("\n".join([help_over, at, over, "other_family " + "x" * MAX_LINE_CHARS]))
    assert kept.text == at + "\n" and kept.long_lines == 2  # other families are not counted
    assert prefilter(at + "\n" + over, max_models=8).models_seen == 1


def test_the_model_label_reads_escapes_and_stops_at_the_first_unescaped_quote() -> None:
    assert _model_label('x{model_name="a\\"b\\\\",c="d"} 1') == 'a\\"b\\\\'
    assert _model_label('x{model_name="unterminated} 1') is None
    assert _model_label('x{model="m" , model_name = "n"} 1') == "n"
