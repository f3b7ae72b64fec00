"""A plan for people: the probes as a table, the knee chart in the terminal (plotext), and a
self-contained SVG or HTML report to paste into a ticket."""

from __future__ import annotations

import html
from typing import IO

from gpuwatch.plan.planner import Check, Plan
from gpuwatch.plan.probe import ProbeResult


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _verdict(p: ProbeResult) -> str:
    word = {True: "pass", False: "FAIL", None: "?"}[p.passed]
    # ~: not decided by the interval (judged by the estimate, or failed as not shown to hold)
    return word + ("~" if p.decided_by in ("estimate", "bound") else "")


def probe_rows(probes: list[ProbeResult]) -> list[list[str]]:
    return [
        [
            f"{p.rate:.2f}",
            f"{p.duration_s:.0f}",
            str(p.sequences),
            str(p.arrived),
            _pct(p.attainment),
            f"{p.low:.3f}-{p.high:.3f}",
            _pct(p.worst),
            _verdict(p),
            _ms(p.ttft_p50_s),
            _ms(p.ttft_p99_s),
            _ms(p.itl_p50_s),
            _ms(p.itl_p99_s),
            _pct(p.kv_peak),
            "-" if p.preemptions is None else str(p.preemptions),
            "-" if p.queue_peak is None else str(p.queue_peak),
            "-" if p.batch_p99 is None else str(p.batch_p99),
        ]
        for p in probes
    ]


# Durations in simulated (or real) seconds, of one sequence; latencies in milliseconds (with
# several sequences, the median of each sequence's percentile); "seq" arrival sequences, "n"
# requests in all of them, "goodput" the mean of theirs, "worst" the worst sequence's.
HEADERS = ["req/s", "s", "seq", "n", "goodput", "95% CI", "worst", "", "TTFT p50", "p99",
           "ITL p50", "p99", "KV peak", "preempt", "queue", "batch"]  # fmt: skip


def spread_text(p: ProbeResult) -> str:
    """How the knee was judged, and how its goodput varied."""
    if p.sequences > 1:
        return (
            f"the highest rate whose 95% lower bound across {p.sequences} arrival sequences "
            f"meets the SLO: goodput {_pct(p.attainment)} [{_pct(p.low)}, {_pct(p.high)}], "
            f"sequences {_pct(p.worst)} to {_pct(max(p.seq_goodput))}, "
            f"sd {100 * (p.sd or 0.0):.1f} points"
        )
    return (
        f"the highest rate shown to meet the SLO over one arrival sequence's requests: "
        f"goodput {_pct(p.attainment)} [{_pct(p.low)}, {_pct(p.high)}]"
    )


def knee_text(plan: Plan) -> str:
    """The knee, how it was judged and how its sequences varied; the boring zone."""
    p = plan.at_knee
    if plan.knee is None or plan.boring is None or p is None:
        return "knee: none found"
    return (
        f"knee: {plan.knee:.2f} req/s ({spread_text(p)}); "
        f"boring zone: <= {plan.boring:.2f} req/s (x{plan.headroom:g} headroom)"
    )


def check_text(c: Check, goodput: float) -> str:
    """A check's rate, where its sequences came from, what they read, and whether it held."""
    p = c.probe
    if p.passed:
        verdict = "holds the SLO"
    elif p.decided_by == "bound":
        verdict = "not shown to hold the SLO (its interval straddles the target)"
    else:
        verdict = "misses the SLO"
    fresh = (
        f" on {p.sequences} fresh arrival sequences ({p.met(goodput)} of them >= "
        f"{goodput:.1%} on their own, the worst {_pct(p.worst)})"
        if p.sequences > 1
        else ""
    )
    return (
        f"check: {c.label} at {p.rate:.2f} req/s{fresh}: goodput {_pct(p.attainment)} "
        f"[{p.low:.3f}, {p.high:.3f}], TTFT p99 {_ms(p.ttft_p99_s)} ms, refused {p.refused}: "
        f"{verdict}"
    )


def render(plan: Plan, out: IO[str], chart: bool = True) -> None:
    from rich.console import Console
    from rich.table import Table

    # Lines of text are not wrapped by rich (the terminal does it); the table fits 110 columns.
    console = Console(file=out, highlight=False, width=110, soft_wrap=True)
    unit = "simulated s" if plan.mode == "sim" else "s"
    console.print(f"plan sweep: {plan.subject} ({plan.mode}); {plan.traffic}")
    slo = f"TTFT <= {plan.target.ttft_s:g} s" + (
        f", every gap <= {plan.target.itl_s:g} s" if plan.target.itl_s else ""
    )
    console.print(
        f"SLO: {slo} for >= {plan.target.goodput:.1%} of arrived requests (refused = miss)"
    )
    title = f"rates in search order (durations in {unit}; latencies in ms)"
    table = Table(*HEADERS, box=None, padding=(0, 1, 0, 0), pad_edge=False, title=title)
    for row in probe_rows(plan.probes):
        table.add_row(*row)
    console.print(table)
    if chart and len(plan.probes) >= 2:
        out.write(knee_chart(plan))
    if plan.knee is None:
        console.print("knee: none found; " + "; ".join(plan.notes))
        return
    console.print(knee_text(plan))
    rec = plan.recommended
    if rec is not None:
        console.print(f"recommended limits for lane {rec.lane}:")
        for key, value in rec.limits().items():
            console.print(f"  {key:<18} {'null' if value is None else value:<6} {rec.reasons[key]}")
    for c in plan.checks:
        console.print(check_text(c, plan.target.goodput))
    for note in plan.notes:
        console.print(f"note: {note}")
    console.print(
        f"{len(plan.probes)} rates, {plan.sequences_run} arrival sequences, "
        f"{plan.simulated_s:.0f} {unit}, {plan.wall_s:.1f} s wall"
    )


def knee_chart(plan: Plan, width: int = 100, height: int = 18) -> str:
    """Rate against p99 TTFT (left, s) and goodput (right, %), the SLO as a line, the knee and
    the boring zone as vertical lines. Plain text."""
    import plotext as plt

    probes = sorted(plan.probes, key=lambda p: p.rate)
    xs = [p.rate for p in probes]
    cap = plan.target.ttft_s * 4  # keep the SLO line readable when a failed probe explodes
    ttft = [min(p.ttft_p99_s if p.ttft_p99_s is not None else cap, cap) for p in probes]
    goodput = [100 * (p.attainment or 0.0) for p in probes]
    plt.clf()
    plt.plotsize(width, height)
    plt.theme("clear")
    plt.plot(xs, ttft, marker="braille", label="TTFT p99 (s, left)")
    plt.plot(xs, goodput, marker="dot", yside="right", label="goodput % (right)")
    plt.hline(plan.target.ttft_s)
    if plan.knee is not None and plan.boring is not None:
        plt.vline(plan.knee)
        plt.vline(plan.boring)
        plt.text("knee", plan.knee, cap * 0.95)
        plt.text("boring", plan.boring, cap * 0.85)
    plt.ylim(0, cap)
    plt.ylim(0, 100, yside="right")
    plt.title(f"rate vs TTFT p99 and goodput; SLO {plan.target.ttft_s:g} s (horizontal line)")
    plt.xlabel("requests/s")
    return str(plt.uncolorize(plt.build())) + "\n"


# -- SVG / HTML -----------------------------------------------------------------------------


def svg(plan: Plan, width: int = 760, height: int = 360) -> str:
    """The knee chart as a standalone SVG: p99 TTFT (left axis) and goodput (right axis) by
    rate, the SLO line, the knee and the boring zone (shaded)."""
    left, right, top, bottom = 60, 60, 40, 50
    pw, ph = width - left - right, height - top - bottom
    probes = sorted(plan.probes, key=lambda p: p.rate)
    max_rate = max([p.rate for p in probes] + [plan.knee or 0.0, 1e-9]) * 1.05
    cap = plan.target.ttft_s * 4

    def x(rate: float) -> float:
        return left + pw * rate / max_rate

    def y_ttft(v: float) -> float:
        return top + ph * (1 - min(v, cap) / cap)

    def y_good(v: float) -> float:
        return top + ph * (1 - v)

    e = html.escape
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">'
        f"{e(plan.subject)}: TTFT p99 and goodput by rate</text>",
    ]
    if plan.boring is not None and plan.knee is not None:
        parts.append(
            f'<rect x="{left}" y="{top}" width="{x(plan.boring) - left:.1f}" height="{ph}" '
            f'fill="#d9f2d9"><title>boring zone</title></rect>'
        )
        parts.append(
            f'<text x="{left + 4}" y="{top + 14}" fill="#2d6a2d">boring zone &lt;= '
            f"{plan.boring:.2f} req/s</text>"
        )
        parts.append(
            f'<line x1="{x(plan.knee):.1f}" y1="{top}" x2="{x(plan.knee):.1f}" '
            f'y2="{top + ph}" stroke="#c0392b" stroke-dasharray="4 3"/>'
        )
        parts.append(
            f'<text x="{x(plan.knee) + 4:.1f}" y="{top + 28}" fill="#c0392b">knee '
            f"{plan.knee:.2f} req/s</text>"
        )
    parts.append(
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>'
    )
    slo_y = y_ttft(plan.target.ttft_s)
    parts.append(
        f'<line x1="{left}" y1="{slo_y:.1f}" x2="{left + pw}" y2="{slo_y:.1f}" '
        f'stroke="#888" stroke-dasharray="2 2"/>'
        f'<text x="{left + pw - 4}" y="{slo_y - 4:.1f}" text-anchor="end" fill="#555">SLO '
        f"TTFT {plan.target.ttft_s:g} s</text>"
    )
    if probes:
        ttft_pts = " ".join(
            f"{x(p.rate):.1f},{y_ttft(p.ttft_p99_s if p.ttft_p99_s is not None else cap):.1f}"
            for p in probes
        )
        good_pts = " ".join(f"{x(p.rate):.1f},{y_good(p.attainment or 0):.1f}" for p in probes)
        parts.append(
            f'<polyline points="{ttft_pts}" fill="none" stroke="#1f5fa8" stroke-width="2"/>'
        )
        parts.append(
            f'<polyline points="{good_pts}" fill="none" stroke="#e67e22" stroke-width="2"/>'
        )
        for p in probes:
            colour = "#2d6a2d" if p.passed else "#c0392b"
            parts.append(
                f'<circle cx="{x(p.rate):.1f}" cy="{y_good(p.attainment or 0):.1f}" r="3" '
                f'fill="{colour}"><title>{p.rate:.2f} req/s: goodput {_pct(p.attainment)}, '
                f"TTFT p99 {_ms(p.ttft_p99_s)} ms</title></circle>"
            )
    for i in range(5):
        v = cap * i / 4
        yy = y_ttft(v)
        parts.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{v:g}</text>')
        parts.append(f'<text x="{left + pw + 6}" y="{yy + 4:.1f}">{100 * i / 4:.0f}%</text>')
    for i in range(6):
        r = max_rate * i / 5
        parts.append(
            f'<text x="{x(r):.1f}" y="{top + ph + 16}" text-anchor="middle">{r:.1f}</text>'
        )
    parts.append(
        f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">requests/s</text>'
        f'<text x="14" y="{top + ph / 2}" transform="rotate(-90 14 {top + ph / 2})" '
        f'text-anchor="middle" fill="#1f5fa8">TTFT p99 (s)</text>'
        f'<text x="{width - 10}" y="{top + ph / 2}" transform="rotate(90 {width - 10} '
        f'{top + ph / 2})" text-anchor="middle" fill="#e67e22">goodput</text>'
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def html_report(plan: Plan) -> str:
    e = html.escape
    rows = "\n".join(
        "<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>"
        for row in probe_rows(plan.probes)
    )
    head = "".join(f"<th>{e(h)}</th>" for h in HEADERS)
    rec = plan.recommended
    limits = (
        "".join(
            f"<tr><td>{e(k)}</td><td>{e('null' if v is None else str(v))}</td>"
            f"<td>{e(rec.reasons.get(k, ''))}</td></tr>"
            for k, v in rec.limits().items()
        )
        if rec
        else ""
    )
    checks = "".join(f"<li>{e(check_text(c, plan.target.goodput))}</li>" for c in plan.checks)
    knee = f"<p>{e(knee_text(plan))}</p>"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>gpuwatch plan: {e(plan.subject)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}
td,th{{padding:2px 8px;text-align:right}}</style></head><body>
<h1>gpuwatch plan sweep: {e(plan.subject)}</h1>
<p>{e(plan.traffic)}</p>
<p>SLO: TTFT &lt;= {plan.target.ttft_s:g} s for &gt;= {plan.target.goodput:.1%} of arrived
requests; seed {plan.seed}; {e(plan.created)}</p>
{knee}
{svg(plan)}
<h2>Recommended limits (lane {e(rec.lane) if rec else "-"})</h2>
<table>{limits}</table>
<ul>{checks}</ul>
<h2>Probes</h2>
<table><tr>{head}</tr>
{rows}</table>
</body></html>
"""
