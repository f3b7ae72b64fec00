"""``gpuwatch snapshot`` against hostile pages (real process, real HTTP): non-finite values, a
bad bucket bound, Rich markup in label values, an 8 MB metric name, 100,000 models.

Whatever a page holds, stdout is one complete JSON document (or the table), every problem is
one bounded line, and nothing prints a traceback.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gpuwatch.fmt import LINE_LIMIT
from tests.functional.servers import Handler, ThreadedServer
from tests.functional.test_snapshot_cli import run

RUNNING = 'vllm:num_requests_running{model_name="m"} 3\n'


def _hist(name: str, buckets: dict[str, str], total: str = "1", count: str = "1") -> str:
    lines = [f"# TYPE vllm:{name} histogram"]
    lines += [f'vllm:{name}_bucket{{le="{le}",model_name="m"}} {v}' for le, v in buckets.items()]
    lines += [f'vllm:{name}_sum{{model_name="m"}} {total}']
    lines += [f'vllm:{name}_count{{model_name="m"}} {count}']
    return RUNNING + "\n".join(lines) + "\n"


TTFT = "time_to_first_token_seconds"
# One root cause per page: (page, the warning, where the null shows in the engine's JSON).
NON_FINITE = {
    "nan-sum": (
        _hist(TTFT, {"0.1": "1", "+Inf": "2"}, total="NaN", count="2"),
        f"vllm:{TTFT}_sum is nan: shown as unknown",
        ("latency", "ttft", "sum"),
    ),
    "inf-count": (
        _hist(TTFT, {"0.1": "1", "+Inf": "2"}, total="0.1", count="+Inf"),
        f"vllm:{TTFT}_count is inf: shown as unknown",
        ("latency", "ttft", "count"),
    ),
    "inf-blocks": (
        RUNNING + 'vllm:cache_config_info{block_size="16",num_gpu_blocks="inf"} 1\n',
        'vllm:cache_config_info{num_gpu_blocks="inf"}: shown as unknown',
        ("kv_tokens_total",),
    ),
    "nan-bucket": (
        _hist(TTFT, {"0.1": "NaN", "+Inf": "1"}),
        f"vllm:{TTFT}_bucket has a count of nan: quantiles unknown",
        ("latency", "ttft", "p50"),
    ),
    "le-not-a-number": (
        _hist(TTFT, {"soon": "1", "+Inf": "1"}),
        f'vllm:{TTFT} has a bucket bound le="soon" that is not a number: skipped',
        None,
    ),
    "le-nan": (
        _hist(TTFT, {"NaN": "1", "+Inf": "1"}),
        f'vllm:{TTFT} has a bucket bound le="NaN" that is not a number: skipped',
        None,
    ),
    "le-minus-inf": (
        _hist(TTFT, {"-Inf": "1", "+Inf": "1"}),
        f'vllm:{TTFT} has a bucket bound le="-Inf" that is not a number: skipped',
        None,
    ),
}

MARKUP = """\
vllm:num_requests_running{model_name="[/]"} 1
vllm:num_requests_running{model_name="[bold]x[/bold"} 2
vllm:num_requests_waiting{model_name="[/]"} NaN
"""

HUGE_NAME = "x" * (8 * 1024 * 1024)


def many_models(n: int) -> str:
    lines = ["# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{model_name="model-{i}"}} {i}' for i in range(n)]
    return "\n".join(lines) + "\n"


MANY = 5_000
PAGES = {
    **{f"/{case}": page for case, (page, _, _) in NON_FINITE.items()},
    "/markup": MARKUP,
    "/hugename": f"{HUGE_NAME} 1\n",
    "/many": many_models(MANY),
}


def _page(text: str) -> Handler:
    async def handler(_: web.Request) -> web.Response:
        return web.Response(text=text)

    return handler


WIDE = {**os.environ, "COLUMNS": "200"}  # no column of the table is cut short


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadedServer]:
    with ThreadedServer({path: _page(text) for path, text in PAGES.items()}) as srv:
        yield srv


def strict_json(raw: bytes) -> dict[str, Any]:
    """Parse as a strict JSON peer would: NaN and Infinity are not JSON."""

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON output")

    data: dict[str, Any] = json.loads(raw, parse_constant=refuse)
    return data


def snapshot_json(*args: str) -> tuple[int, dict[str, Any], str]:
    proc = run("snapshot", "--no-gpu", "--json", *args)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()[-2000:]
    return proc.returncode, strict_json(proc.stdout), proc.stderr.decode()


@pytest.mark.parametrize("case", NON_FINITE)
def test_non_finite_values_are_null_with_a_warning_and_json_stays_valid(
    server: ThreadedServer, case: str
) -> None:
    _, warning, where = NON_FINITE[case]
    code, data, _ = snapshot_json("--metrics", server.url(f"/{case}"))
    assert code == 0 and data["errors"] == []  # warnings, not failures
    [engine] = data["engines"]
    assert engine["running"] == 3  # the rest of the page still comes through
    assert [w["warning"] for w in data["warnings"]] == [warning]
    if where is None:  # a family with a bad bucket bound is skipped whole
        assert "ttft" not in engine["latency"]
        return
    value = engine
    for key in where:
        value = value[key]
    assert value is None


@pytest.mark.parametrize("case", NON_FINITE)
def test_table_output_survives_non_finite_values(server: ThreadedServer, case: str) -> None:
    proc = run("snapshot", "--no-gpu", "--metrics", server.url(f"/{case}"), env=WIDE)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err, err[-2000:]
    table, _, warnings = out.partition("\nwarning: ")
    cells = table.replace(server.url(f"/{case}"), "").lower()
    assert " m " in cells and "nan" not in cells and "inf" not in cells
    assert NON_FINITE[case][1] in warnings


def test_table_shows_markup_in_label_values_literally(server: ThreadedServer) -> None:
    proc = run("snapshot", "--no-gpu", "--metrics", server.url("/markup"), env=WIDE)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err, err[-2000:]
    table, _, warnings = out.partition("\nwarning: ")
    # Label values are shown literally, never interpreted as Rich markup.
    assert " [/] " in table and " [bold]x[/bold " in table
    assert "num_requests_waiting is nan: shown as unknown" in warnings


def test_huge_metric_name_gives_a_bounded_error_line(server: ThreadedServer) -> None:
    code, data, _ = snapshot_json("--metrics", server.url("/hugename"))
    assert code == 1
    [error] = data["errors"]
    assert error["error"].startswith("no known serving metrics (first families: xxxx")
    assert len(error["error"]) <= LINE_LIMIT and error["error"].endswith("...)")
    table = run("snapshot", "--no-gpu", "--metrics", server.url("/hugename"))
    [line] = [ln for ln in table.stdout.decode().splitlines() if ln.startswith("error:")]
    assert len(line) < LINE_LIMIT * 2


def test_engines_per_source_are_capped_with_one_warning(
    server: ThreadedServer, tmp_path: Path
) -> None:
    url = server.url("/many")
    code, data, _ = snapshot_json("--metrics", url)
    assert code == 0
    assert [e["model"] for e in data["engines"]] == [f"model-{i}" for i in range(256)]
    assert data["warnings"] == [
        {
            "source": url,
            "warning": f"{MANY} engines, showing the first 256 (raise [scrape] max_engines)",
        }
    ]
    # The flag, then the config file key, set the cap.
    _, flagged, _ = snapshot_json("--metrics", url, "--max-engines", "3")
    assert [e["running"] for e in flagged["engines"]] == [0, 1, 2]
    assert flagged["warnings"][0]["warning"].startswith(f"{MANY} engines, showing the first 3 ")
    cfg = tmp_path / "gpuwatch.toml"
    cfg.write_text("[scrape]\nmax_engines = 7\n")
    _, configured, _ = snapshot_json("--config", str(cfg), "--metrics", url)
    assert len(configured["engines"]) == 7


def test_under_the_cap_nothing_is_dropped_or_warned(server: ThreadedServer) -> None:
    _, data, _ = snapshot_json("--metrics", server.url("/many"), "--max-engines", str(MANY))
    assert len(data["engines"]) == MANY and data["warnings"] == []
    assert math.fsum(e["running"] for e in data["engines"]) == sum(range(MANY))


def test_a_saved_page_is_bounded_like_a_scraped_one(tmp_path: Path) -> None:
    page = tmp_path / "big.prom"
    page.write_text(many_models(100))
    for args, stdin in (
        (["--metrics-file", str(page)], None),
        (["--metrics-file", "-"], page.read_bytes()),
    ):
        proc = run("snapshot", "--no-gpu", "--json", "--max-bytes", "1000", *args, stdin=stdin)
        assert proc.returncode == 1
        [error] = strict_json(proc.stdout)["errors"]
        assert error["error"] == "body exceeds the 0.000953674 MiB limit"
