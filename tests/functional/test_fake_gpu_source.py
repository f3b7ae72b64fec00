"""``--fake-gpu-from URL`` against answers that are not a simulator's /sim/gpu (real HTTP):
one bounded error line in the reading, never an exception out of NvmlReader.read()."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from gpuwatch.fmt import LINE_LIMIT
from gpuwatch.sources.nvml import FakeNvml, NvmlReader, SimGpuSource
from tests.functional.servers import ThreadedServer

GOOD_GPU = {"name": "g", "memory_total": 100, "memory_used": 10, "processes": []}
MIG_DEVICE = {"gpu_instance_id": 1, "compute_instance_id": 0, "memory_total": 50, "memory_used": 5}
BODIES = {
    "list": (b"[1, 2]", 'not a /sim/gpu answer (want {"gpus": [...]})'),
    "gpus not a list": (b'{"gpus": 5}', "not a /sim/gpu answer"),
    "gpu not an object": (b'{"gpus": ["x"]}', "gpus[0] is not an object"),
    "no memory": (b'{"gpus": [{"name": "g"}]}', "gpus[0] has no memory_total"),
    "memory a string": (
        json.dumps({"gpus": [{**GOOD_GPU, "memory_used": "10"}]}).encode(),
        "gpus[0].memory_used is not a number",
    ),
    "power overflows": (
        json.dumps({"gpus": [{**GOOD_GPU, "power_w": 1e306}]}).encode(),
        "gpus[0].power_w is not a number",
    ),
    "unknown error": (
        json.dumps({"gpus": [{**GOOD_GPU, "error": "melted"}]}).encode(),
        "gpus[0].error is not a known NVML error",
    ),
    "bad process": (
        json.dumps({"gpus": [{**GOOD_GPU, "processes": [{"pid": "1"}]}]}).encode(),
        "gpus[0].processes is not a list",
    ),
    "mig not a list": (
        json.dumps({"gpus": [{**GOOD_GPU, "mig": 5}]}).encode(),
        "gpus[0].mig is not a list",
    ),
    "mig device without memory": (
        json.dumps({"gpus": [{**GOOD_GPU, "mig": [{"gpu_instance_id": 1}]}]}).encode(),
        "gpus[0].mig[0].memory_total is not a number",
    ),
    "mig instance id negative": (
        json.dumps(
            {"gpus": [{**GOOD_GPU, "mig": [{**MIG_DEVICE, "gpu_instance_id": -1}]}]}
        ).encode(),
        "gpus[0].mig[0].gpu_instance_id is not an instance id",
    ),
    "mig bad process": (
        json.dumps(
            {"gpus": [{**GOOD_GPU, "mig": [None, {**MIG_DEVICE, "processes": [{"pid": True}]}]}]}
        ).encode(),
        "gpus[0].mig[1].processes is not a list",
    ),
    "deep nesting": (b"[" * 100_000 + b"]" * 100_000, "JSONError: nesting deeper than"),
    "NaN": (b'{"gpus": [{"memory_total": NaN, "memory_used": 1}]}', "JSONError: NaN is not JSON"),
    "HTML": (b"<html>" + b"x" * 100_000, "JSONError: invalid JSON"),
}


def _body(data: bytes):
    async def handler(_: web.Request) -> web.Response:
        return web.Response(body=data, content_type="application/json")

    return handler


@pytest.fixture(scope="module")
def server():
    routes = {f"/{i}": _body(data) for i, (data, _) in enumerate(BODIES.values())}
    routes["/good"] = _body(json.dumps({"gpus": [GOOD_GPU]}).encode())
    with ThreadedServer(routes) as srv:
        yield srv


@pytest.mark.parametrize("case", BODIES)
def test_a_bad_answer_is_one_bounded_error_line(server, case: str) -> None:
    index = list(BODIES).index(case)
    reader = NvmlReader(FakeNvml(SimGpuSource(server.url(f"/{index}"))))
    reading = reader.read()
    assert reading.gpus == [] and reading.error is not None
    assert BODIES[case][1] in reading.error and len(reading.error) <= LINE_LIMIT
    reader.close()


def test_a_good_answer_is_read(server) -> None:
    reader = NvmlReader(FakeNvml(SimGpuSource(server.url("/good"))))
    [gpu] = reader.read().gpus
    assert (gpu.name, gpu.memory_total_bytes, gpu.memory_used_bytes, gpu.error) == (
        "g",
        100,
        10,
        None,
    )
    reader.close()
