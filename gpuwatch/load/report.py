"""The end-of-run report: a table for people, JSON with ``vllm bench serve``'s field names
(summary keys, the run's ``date``/``backend``/``model_id``/``num_prompts``/``request_rate``/
``max_concurrency``, and the per-request arrays), so notebooks written for vllm bench read it.

Percentiles over raw samples come from ``series.sample_quantile`` (linear between the two
nearest ranks: numpy's default, as vllm bench reports them; the gate computes its the same way).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import IO, Any

from gpuwatch.load.runner import Result
from gpuwatch.load.spec import LoadSpec
from gpuwatch.series import sample_quantile

PERCENTILES = (90, 99)
# vllm bench serve's backend names for the two APIs gpuwatch load speaks.
BACKENDS = {"chat": "openai-chat", "completions": "openai"}
METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E"))


def percentile(values: Sequence[float], p: int) -> float:
    return sample_quantile(sorted(values), p / 100)


def _summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {
            "count": 0,
            "mean": None,
            "median": None,
            "std": None,
            **{f"p{p}": None for p in PERCENTILES},
        }
    return {
        "count": len(values),
        "mean": statistics.fmean(values),
        "median": statistics.median(values),
        "std": statistics.pstdev(values),
        **{f"p{p}": percentile(values, p) for p in PERCENTILES},
    }


def meets(r: Result, slo: dict[str, float]) -> bool:
    checks = {"ttft": r.ttft, "tpot": r.tpot, "e2e": r.e2e, "itl": max(r.itl) if r.itl else None}
    return all((v := checks[k]) is not None and v <= limit for k, limit in slo.items())


def build(
    spec: LoadSpec, results: list[Result], duration: float, send_errors: list[float] | None = None
) -> dict[str, Any]:
    done = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    samples = {
        "ttft": [r.ttft for r in done if r.ttft is not None],
        "tpot": [r.tpot for r in done if r.tpot is not None],
        "itl": [gap for r in done for gap in r.itl],
        "e2el": [r.e2e for r in done if r.e2e is not None],
    }
    duration = max(duration, 1e-9)
    out_tokens = sum(r.output_tokens for r in done)
    in_tokens = sum(r.prompt_tokens for r in done)
    report: dict[str, Any] = {
        # The run, as `vllm bench serve --save-result` names it.
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "backend": BACKENDS[spec.api],
        "endpoint_type": BACKENDS[spec.api],
        "model_id": spec.model,
        "num_prompts": len(results),
        "request_rate": spec.rate,
        "burstiness": spec.burstiness,
        "max_concurrency": spec.max_concurrency,
        "completed": len(done),
        "failed": len(failed),
        "duration": duration,
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": len(done) / duration,
        "output_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration,
        "request_goodput": (sum(meets(r, spec.slo) for r in done) / duration) if spec.slo else None,
        "failures_by_status": dict(
            sorted(Counter(str(r.status or "cancelled") for r in failed).items())
        ),
        "slo": spec.slo or None,
        # Per request, in the order sent, as vllm bench's --save-detailed arrays: seconds; a
        # failed request has ttft 0, no itls, output length 0 and its error (else "").
        "input_lens": [r.prompt_tokens for r in results],
        "output_lens": [r.output_tokens if r.ok else 0 for r in results],
        "ttfts": [r.ttft if r.ok and r.ttft is not None else 0.0 for r in results],
        "itls": [list(r.itl) if r.ok else [] for r in results],
        "errors": ["" if r.ok else error_text(r) for r in results],
        # gpuwatch's own, beside them.
        "start_times": [r.sent for r in results],
        "lanes": [r.lane for r in results],
    }
    for key, _ in METRICS:
        s = _summary(samples[key])
        report[f"count_{key}"] = s["count"]
        for stat in ("mean", "median", "std", *(f"p{p}" for p in PERCENTILES)):
            value = s[stat]
            report[f"{stat}_{key}_ms"] = value * 1000 if value is not None else None
    if send_errors:
        report["send_error_p99_ms"] = percentile(send_errors, 99) * 1000
    report["refusals"] = refusals(results)
    report["classes"] = [r.klass for r in results]
    report["tenants"] = [r.tenant for r in results]
    report["by_lane"] = split(results, lambda r: r.lane, spec.slo, duration)
    report["by_class"] = split(results, lambda r: r.klass, spec.slo, duration)
    report["by_tenant"] = split(results, lambda r: r.tenant, spec.slo, duration)
    return report


def refusals(results: list[Result]) -> dict[str, Any]:
    """How the refusals (429 / 503) came: how many, how fast (ms), and with Retry-After."""
    times = [r.refused_s for r in results if r.refused_s is not None]
    return {
        "count": len(times),
        "median_ms": statistics.median(times) * 1000 if times else None,
        "p99_ms": percentile(times, 99) * 1000 if times else None,
        "with_retry_after": sum(1 for r in results if r.retry_after is not None),
    }


SPLIT_FIGURES = ("ttft", "tpot", "e2el")


def split(
    results: list[Result],
    key: Callable[[Result], str | None],
    slo: dict[str, float],
    duration: float,
) -> dict[str, dict[str, Any]]:
    """Every figure of the summary, per group (lane, class or tenant): requests, completed,
    failed by status, throughput, goodput and the latency percentiles in ms. Requests without
    the key (no tenant given) are not split; no group at all gives {}."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        name = key(r)
        if name is not None:
            groups.setdefault(name, []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(groups):
        members = groups[name]
        done = [r for r in members if r.ok]
        failed = [r for r in members if not r.ok]
        values = {
            "ttft": [r.ttft for r in done if r.ttft is not None],
            "tpot": [r.tpot for r in done if r.tpot is not None],
            "e2el": [r.e2e for r in done if r.e2e is not None],
        }
        group: dict[str, Any] = {
            "requests": len(members),
            "completed": len(done),
            "failed": len(failed),
            "failures_by_status": dict(
                sorted(Counter(str(r.status or "cancelled") for r in failed).items())
            ),
            "request_throughput": len(done) / duration,
            "output_throughput": sum(r.output_tokens for r in done) / duration,
            "request_goodput": (sum(meets(r, slo) for r in done) / duration) if slo else None,
        }
        for figure in SPLIT_FIGURES:
            s = _summary([v for v in values[figure] if v is not None])
            group[f"count_{figure}"] = s["count"]
            for stat in ("mean", "median", *(f"p{p}" for p in PERCENTILES)):
                v = s[stat]
                group[f"{stat}_{figure}_ms"] = v * 1000 if v is not None else None
        out[name] = group
    return out


def error_text(r: Result) -> str:
    status = r.status if r.status is not None else "cancelled"
    return f"HTTP {status}" if isinstance(status, int) else str(status)


def send_errors(results: list[Result]) -> list[float]:
    return [r.sent - r.planned for r in results if r.sent]


def render(report: dict[str, Any], out: IO[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, highlight=False)
    table = Table("", "count", "mean", "median", "p90", "p99", box=None, title="latency (ms)")
    for key, label in METRICS:
        cells = [report[f"{stat}_{key}_ms"] for stat in ("mean", "median", "p90", "p99")]
        shown = ["-" if v is None else f"{v:.1f}" for v in cells]
        table.add_row(label, str(report[f"count_{key}"]), *shown)
    console.print(table)
    console.print(
        f"completed {report['completed']}  failed {report['failed']}  "
        f"in {report['duration']:.1f} s: {report['request_throughput']:.2f} req/s, "
        f"{report['output_throughput']:.0f} output tok/s"
    )
    if report["failures_by_status"]:
        by = ", ".join(f"{k}: {v}" for k, v in report["failures_by_status"].items())
        console.print(f"failures by status: {by}")
    refused = report["refusals"]
    if refused["count"]:
        console.print(
            f"refusals (429/503): {refused['count']}, answered in {refused['median_ms']:.1f} ms "
            f"median, {refused['p99_ms']:.1f} ms p99; {refused['with_retry_after']} with "
            "Retry-After"
        )
    chart = ttft_chart(report)
    if chart:
        out.write(chart)
    if report["request_goodput"] is not None:
        slo = ", ".join(f"{k} <= {v:g} s" for k, v in report["slo"].items())
        console.print(f"goodput: {report['request_goodput']:.2f} req/s meeting every SLO ({slo})")
    for field_name, title in (("by_lane", "lane"), ("by_class", "class"), ("by_tenant", "tenant")):
        groups = report.get(field_name) or {}
        # One lane, no class, no tenant: the table above already says it all.
        if len(groups) > 1 or (groups and field_name != "by_lane"):
            console.print(split_table(title, groups, report["slo"] is not None))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def split_table(title: str, groups: dict[str, dict[str, Any]], goodput: bool) -> Any:
    from rich.table import Table

    columns = ["ok", "failed", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99", "req/s"]
    table = Table(title, *columns, *(["goodput"] if goodput else []), box=None,
                  title=f"by {title} (ms)")  # fmt: skip
    for name, g in groups.items():
        failed = str(g["failed"])
        if g["failures_by_status"]:
            failed += (
                " (" + ", ".join(f"{k}: {v}" for k, v in g["failures_by_status"].items()) + ")"
            )
        row = [
            str(g["completed"]),
            failed,
            _ms(g["median_ttft_ms"]),
            _ms(g["p99_ttft_ms"]),
            _ms(g["median_e2el_ms"]),
            _ms(g["p99_e2el_ms"]),
            f"{g['request_throughput']:.2f}",
        ]
        if goodput:
            row.append(f"{g['request_goodput']:.2f}")
        table.add_row(name, *row)
    return table


def ttft_chart(report: dict[str, Any], width: int = 78, height: int = 12) -> str | None:
    """Each completed request's TTFT by when it was sent, with the TTFT SLO as a line: where
    the bursts broke the tail. Plain text (plotext, no colours), or None with under 2 points."""
    import plotext as plt

    points = [
        (sent, ttft)  # sent: seconds since the run started
        for sent, ttft, error in zip(
            report["start_times"], report["ttfts"], report["errors"], strict=True
        )
        if not error and sent
    ]
    if len(points) < 2:
        return None
    plt.clf()
    plt.plotsize(width, height)
    plt.theme("clear")
    plt.scatter([x for x, _ in points], [y for _, y in points], marker="braille")
    slo = (report["slo"] or {}).get("ttft")
    if slo:
        plt.hline(slo)
    plt.title("TTFT (s) of each request by send time" + (f"; SLO {slo:g} s" if slo else ""))
    plt.xlabel("seconds into the run")
    return str(plt.uncolorize(plt.build())) + "\n"
