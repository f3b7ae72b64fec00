"""A node read through Prometheus: its samples become the scrapes Prometheus made (each stamped
with its scrape time, mapped by the dialect code a scrape uses), its GPUs come from DCGM's
series, and a backfill goes before what a chart already holds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuwatch.model import EngineSnapshot
from gpuwatch.monitor.state import Monitor
from gpuwatch.series import EngineHistory, Point, RingSeries
from gpuwatch.sources import dcgm, promql
from gpuwatch.sources.dialects import VLLM, sample_names
from gpuwatch.sources.prometheus import PrometheusSource, Series
from gpuwatch.sources.promnode import NodeSamples

URL = "http://10.0.0.5:8000/metrics"
BASE = {"instance": "10.0.0.5:8000", "job": "vllm", "node": "gpu-05", "model_name": "m"}


@pytest.fixture
def reader() -> Iterator[NodeSamples]:
    source = PrometheusSource("http://prometheus.invalid:9090")  # never asked here
    yield NodeSamples(source, URL, "10.0.0.5:8000", [VLLM])


def _series(times: list[float]) -> Series:
    """Two data-parallel engines' running gauge and TTFT histogram, scraped at ``times``."""
    out: Series = []
    for engine in ("0", "1"):
        labels = {**BASE, "engine": engine}
        out.append(
            (
                {"__name__": "vllm:num_requests_running", **labels},
                [(t, 2.0 + i) for i, t in enumerate(times)],
            )
        )
        for le, per_scrape in (("0.1", 1.0), ("1.0", 3.0), ("+Inf", 4.0)):
            out.append(
                (
                    {"__name__": "vllm:time_to_first_token_seconds_bucket", "le": le, **labels},
                    [(t, per_scrape * (i + 1)) for i, t in enumerate(times)],
                )
            )
    return out


def test_each_scrape_prometheus_holds_is_one_reading_at_its_scrape_time(
    reader: NodeSamples,
) -> None:
    results = reader.results(_series([100.0, 101.0, 102.0]))
    assert [r.at for r in results] == [100.0, 101.0, 102.0]
    assert all(r.error is None and len(r.engines) == 1 for r in results)
    # Both engines of the instance are one engine, summed, as on its scraped page.
    assert [r.engines[0].running for r in results] == [4.0, 6.0, 8.0]
    assert results[0].engines[0].model == "m" and results[0].engines[0].dialect == "vllm"
    # The next read brings only what is newer; nothing newer: up, and no reading.
    again = reader.results(_series([101.0, 102.0, 103.0]))
    assert [r.at for r in again] == [103.0]
    nothing = reader.results(_series([102.0, 103.0]))
    assert len(nothing) == 1 and nothing[0].error is None and nothing[0].engines == []


def test_a_monitor_fed_so_computes_its_windows_on_prometheus_times(reader: NodeSamples) -> None:
    monitor = Monitor([URL], clock=lambda: 1000.0)  # the poll's own time plays no part
    for result in reader.results(_series([100.0, 101.0, 102.0])):
        monitor.apply_scrape(result)
    (view,) = monitor.serving_engines()
    assert [p.t for p in view.history.series["running"].points()] == [100.0, 101.0, 102.0]
    assert view.history.latency["ttft"]._snaps[-1][0] == 102.0
    assert view.history.quantile("ttft", 0.5) is not None


def test_no_sample_and_a_page_of_nothing_known_are_errors(reader: NodeSamples) -> None:
    (empty,) = reader.results([])
    assert empty.error and "no recent sample" in empty.error
    (unknown,) = reader.results([({"__name__": "process_cpu_seconds_total"}, [(1.0, 1.0)])])
    assert unknown.error and "no known serving metrics" in unknown.error


def test_the_raw_query_asks_for_the_dialect_s_samples_of_one_instance() -> None:
    query = promql.raw_samples_query(sample_names(VLLM), "10.0.0.5:8000", 64.2)
    assert query.endswith('instance="10.0.0.5:8000"}[65s]')
    assert "vllm:time_to_first_token_seconds_bucket" in query
    assert "sglang" not in query


def test_the_node_selector_matches_the_node_label_or_the_host() -> None:
    query = promql.node_selector_query("DCGM_FI_DEV_GPU_UTIL", "10.0.0.5")
    assert 'node="10.0.0.5"}' in query
    assert 'node="",instance=~"10\\\\.0\\\\.0\\\\.5(:[0-9]+)?"}' in query


def test_dcgm_series_become_gpu_samples_in_nvml_s_units() -> None:
    gpu0 = {"gpu": "0", "UUID": "GPU-aaa", "modelName": "NVIDIA H100 80GB HBM3"}
    vector: promql.Vector = [
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", **gpu0}, 87.0),
        ({"__name__": "DCGM_FI_DEV_FB_USED", **gpu0}, 70000.0),
        ({"__name__": "DCGM_FI_DEV_FB_FREE", **gpu0}, 11000.0),
        ({"__name__": "DCGM_FI_DEV_POWER_USAGE", **gpu0}, 512.5),
        ({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "1"}, 61.0),
    ]
    reading = dcgm.reading_from(vector, "gpu-05")
    assert reading.error is None and [g.index for g in reading.gpus] == [0, 1]
    first = reading.gpus[0]
    assert first.name == "NVIDIA H100 80GB HBM3" and first.uuid == "GPU-aaa"
    assert first.utilization_gpu == pytest.approx(0.87)
    assert first.memory_used_bytes == 70000 * 1024 * 1024
    assert first.memory_total_bytes == 81000 * 1024 * 1024
    assert first.power_w == 512.5 and reading.gpus[1].temperature_c == 61.0


def test_no_dcgm_series_is_n_a_in_one_line() -> None:
    reading = dcgm.reading_from([], "gpu-05")
    assert reading.gpus == [] and reading.error and reading.error.startswith("N/A")
    assert "\n" not in reading.error


def test_a_backfill_goes_before_what_a_chart_holds() -> None:
    ring = RingSeries(capacity=5)
    ring.append(100.0, 1.0)
    ring.append(101.0, 2.0)
    ring.prepend([Point(70.0, 7.0), Point(85.0, 8.0), Point(100.0, 9.0), Point(110.0, 9.0)])
    assert [p.t for p in ring.points()] == [70.0, 85.0, 100.0, 101.0]
    ring.prepend([Point(t, 0.0) for t in (10.0, 20.0, 30.0)])  # room for one more: the newest
    assert [p.t for p in ring.points()] == [30.0, 70.0, 85.0, 100.0, 101.0]


def test_quantiles_of_less_than_a_window_are_dropped_and_gauges_kept() -> None:
    history = EngineHistory(window_s=60.0)
    snap = EngineSnapshot("s", "vllm", "m", running=1.0)
    for t in (0.0, 30.0, 61.0):
        history.series["ttft_p99"].append(t, 0.5)
        history.update(t, snap)
    history.drop_partial(0.0)
    assert [p.t for p in history.series["ttft_p99"].points()] == [61.0]
    assert [p.t for p in history.series["running"].points()] == [0.0, 30.0, 61.0]
