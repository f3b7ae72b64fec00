"""An incident from a recording, for people: the timeline of events and limit changes, the
badge's history, and the window's charts (plotext), as Markdown or HTML.

Every number comes from replaying the recording through the same monitor the dashboard uses:
the report's p99 at 03:12 is the one the screen showed at 03:12.
"""

from __future__ import annotations

import html
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpuwatch.adminapi import AuditEntry
from gpuwatch.fmt import pct, seconds
from gpuwatch.monitor.figures import engine_figures
from gpuwatch.record import store
from gpuwatch.record.player import Player
from gpuwatch.series import window_label

SAMPLE_EVERY_S = 5.0


@dataclass
class Incident:
    path: Path
    start: float
    end: float
    window: str = "1m"
    # (wall, level, reason) each time the badge changed, the first one as it was at ``start``.
    badge: list[tuple[float, str, str]] = field(default_factory=list)
    events: list[tuple[float, str, str]] = field(default_factory=list)
    changes: list[AuditEntry] = field(default_factory=list)  # the gate's audit entries
    # Sampled every SAMPLE_EVERY_S: wall -> figure name -> value.
    samples: list[tuple[float, dict[str, float | None]]] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    bad_rows: int = 0  # rows skipped: impossible clocks, or contents that do not decode


def _sample(player: Player) -> dict[str, float | None]:
    m = player.monitor
    out: dict[str, float | None] = {}
    views = [(ep, v) for ep in m.endpoints.values() for v in ep.engines.values()]
    serving = [(ep, v) for ep, v in views if v.snap.dialect != "gate"]
    if serving:
        f = engine_figures(*serving[0])
        out.update(
            ttft_p99=f.ttft_p99,
            ttft_p50=f.ttft_p50,
            kv=f.kv_cache_usage,
            running=f.running,
            waiting=f.waiting,
            gen_tps=f.gen_tps,
        )
    users = m.gate.users(window_label(m.window_s)) if m.gate else None
    if users is not None:
        out["goodput"] = users.goodput
        out["user_ttft_p99"] = users.ttft_p99
    return out


def build(path: Path, start: float | None = None, end: float | None = None) -> Incident:
    player = Player(path)
    try:
        lo = player.start if start is None else max(start, player.start)
        hi = player.end if end is None else min(end, player.end)
        if hi < lo:
            raise store.RecordingError(f"{path}: nothing recorded between those times")
        inc = Incident(path, lo, hi, window_label(player.monitor.window_s))
        inc.sources = list(player.meta.get("urls") or [])
        evaluations = [
            w
            for (w,) in player.db.execute(
                "SELECT wall FROM rows WHERE kind = 'evaluate' AND wall > ? AND wall <= ? "
                "ORDER BY id",
                (lo, hi),
            )
        ]
        player.seek(lo)
        shown = player.monitor.verdict
        inc.badge.append((lo, shown.level, shown.reason))
        next_sample = lo
        for wall in [lo, *evaluations, hi]:
            player.seek(wall)
            verdict = player.monitor.verdict
            if verdict.level != inc.badge[-1][1]:
                inc.badge.append((wall, verdict.level, verdict.reason))
            if wall >= next_sample:
                inc.samples.append((wall, _sample(player)))
                next_sample = wall + SAMPLE_EVERY_S
        inc.events = [(mk.wall, mk.level, mk.text) for mk in player.marks if lo <= mk.wall <= hi]
        inc.changes = store.audit_entries(player.db, lo, hi)
        inc.bad_rows = player.bad_rows
        return inc
    finally:
        player.close()


def _hms(wall: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall))


def _change_text(entry: AuditEntry) -> str:
    text = json.dumps(entry.change.to_json(), sort_keys=True)
    return f"v{entry.version} by {entry.actor}: {text}"


def timeline(inc: Incident) -> list[tuple[float, str, str]]:
    """Events, limit changes and badge changes in time order: (wall, kind, text)."""
    rows = [(w, f"event {level}", text) for w, level, text in inc.events]
    rows += [(float(e.time), "limits", _change_text(e)) for e in inc.changes]
    rows += [(w, "badge", f"{level}: {reason}") for w, level, reason in inc.badge]
    return sorted(rows, key=lambda r: r[0])


CHARTS = (
    ("TTFT p99 / p50 (s)", ("ttft_p99", "ttft_p50", "user_ttft_p99"), 1.0),
    ("KV cache and goodput (%)", ("kv", "goodput"), 100.0),
    ("running / waiting", ("running", "waiting"), 1.0),
    ("generation tokens/s", ("gen_tps",), 1.0),
)


def charts(inc: Incident, width: int = 100, height: int = 14) -> list[tuple[str, str]]:
    """(title, plain-text chart) per chart, over the incident's window (minutes from start)."""
    import plotext as plt

    out = []
    for title, names, scale in CHARTS:
        plt.clf()
        plt.plotsize(width, height)
        plt.theme("clear")
        drawn = False
        for name in names:
            pts = [(w, s.get(name)) for w, s in inc.samples]
            xs = [(w - inc.start) / 60 for w, v in pts if v is not None]
            ys = [v * scale for _, v in pts if v is not None]
            if xs:
                plt.plot(xs, ys, marker="braille", label=name)
                drawn = True
        if not drawn:
            continue
        plt.title(f"{title}, windows {inc.window}")
        plt.xlabel(f"minutes after {_hms(inc.start)}")
        out.append((title, str(plt.uncolorize(plt.build()))))
    return out


def _summary(inc: Incident) -> list[str]:
    worst: dict[str, float] = {}
    for _, s in inc.samples:
        for key in ("ttft_p99", "user_ttft_p99", "waiting"):
            v = s.get(key)
            if v is not None:
                worst[key] = max(worst.get(key, v), v)
    lows = [v for _, s in inc.samples if (v := s.get("goodput")) is not None]
    lines = [
        f"recording: {inc.path.name}; sources: {', '.join(inc.sources) or 'none'}",
        f"window: {_hms(inc.start)} .. {_hms(inc.end)} ({(inc.end - inc.start) / 60:.1f} min)",
        f"badge: {' -> '.join(level for _, level, _ in inc.badge)}",
    ]
    if "ttft_p99" in worst:
        lines.append(f"worst engine TTFT p99 {inc.window}: {seconds(worst['ttft_p99'])}")
    if "user_ttft_p99" in worst:
        lines.append(f"worst user TTFT p99 {inc.window}: {seconds(worst['user_ttft_p99'])}")
    if lows:
        lines.append(f"lowest goodput {inc.window}: {pct(min(lows))}")
    return lines


def markdown(inc: Incident) -> str:
    out = [f"# Incident: {_hms(inc.start)} .. {_hms(inc.end)}", ""]
    out += [f"- {line}" for line in _summary(inc)]
    out += ["", "## Timeline", "", "| time | what | detail |", "|---|---|---|"]
    for w, kind, text in timeline(inc):
        out.append(f"| {_hms(w)} | {kind} | {text.replace('|', '/')} |")
    out += ["", "## Charts", ""]
    for _, chart in charts(inc):
        out += ["```", chart.rstrip(), "```", ""]
    return "\n".join(out) + "\n"


def html_report(inc: Incident) -> str:
    e = html.escape
    items = "".join(f"<li>{e(line)}</li>" for line in _summary(inc))
    rows = "".join(
        f"<tr><td>{_hms(w)}</td><td>{e(kind)}</td><td>{e(text)}</td></tr>"
        for w, kind, text in timeline(inc)
    )
    pictures = "".join(f"<h3>{e(t)}</h3><pre>{e(c)}</pre>" for t, c in charts(inc))
    title = f"gpuwatch incident {_hms(inc.start)} .. {_hms(inc.end)}"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{e(title)}</title>
<style>body{{font-family:sans-serif;max-width:70em;margin:2em auto}}
td,th{{padding:2px 8px;text-align:left;vertical-align:top}} pre{{font-size:12px}}</style>
</head><body><h1>{e(title)}</h1><ul>{items}</ul>
<h2>Timeline</h2><table><tr><th>time</th><th>what</th><th>detail</th></tr>{rows}</table>
<h2>Charts</h2>{pictures}
</body></html>
"""


def write(inc: Incident, out: Path) -> None:
    if out.suffix.lower() in (".html", ".htm"):
        out.write_text(html_report(inc))
    elif out.suffix.lower() == ".md":
        out.write_text(markdown(inc))
    else:
        raise ValueError(f"{out}: a report is .html or .md")
