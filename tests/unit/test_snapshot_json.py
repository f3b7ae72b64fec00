"""dumps_json: the whole document or nothing, and never NaN or Infinity in it."""

from __future__ import annotations

import datetime as dt
import json
import math

from gpuwatch.model import EngineSnapshot, GpuReading, GpuSample, HostSample, ScrapeResult
from gpuwatch.snapshot import Snapshot, dumps_json


def _refuse(name: str) -> None:
    raise AssertionError(f"{name} in JSON output")


def test_non_finite_values_from_any_source_become_null_with_a_warning() -> None:
    host = HostSample(math.nan, [1.0, math.inf], 0.5, 0.5, 0.5, 1, 1, 0, 0)
    gpus = GpuReading([GpuSample(0, name="g", power_w=math.inf)])
    engine = EngineSnapshot("http://x/metrics", "vllm", "m", running=-math.inf, waiting=2)
    results = [ScrapeResult("http://x/metrics", [engine])]
    snap = Snapshot(dt.datetime.now(dt.timezone.utc), gpus, host, None, results)
    data = json.loads(dumps_json(snap), parse_constant=_refuse)
    assert data["host"]["cpu_percent"] is None and data["host"]["cpu_per_core"] == [1.0, None]
    assert data["gpus"][0]["power_w"] is None and data["gpus"][0]["name"] == "g"
    assert data["engines"][0]["running"] is None and data["engines"][0]["waiting"] == 2
    assert data["warnings"] == [
        {"source": "nvml", "warning": "gpus[0].power_w is inf: shown as null"},
        {"source": "host", "warning": "host.cpu_percent is nan: shown as null"},
        {"source": "host", "warning": "host.cpu_per_core[1] is inf: shown as null"},
        {"source": "http://x/metrics", "warning": "engines[0].running is -inf: shown as null"},
    ]
