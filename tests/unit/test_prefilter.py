"""The prefilter must not change what a full parse would give."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.sources.scrape import WANTED, map_page, parse_families, prefilter
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
