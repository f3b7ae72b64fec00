"""Bytes per hour a recording takes: per engine for a vLLM page, for a node of 2 engines and
a gate, and as the README's service unit records (an engine, the gate's /metrics page and
--admin, a GPU, the host). The goal is <= 20 MB/h for a node.

Run: python bench/record.py [SECONDS]   (simulated seconds, 900 by default; a few seconds of CPU)

What is measured:
- the simulator's vLLM page under the demo's seeded bursty load with a spike (scripts/scenario:
  the same pipeline as live, on a simulated clock), with its GPU readings, the gate's limits and
  status, and the once-a-second badge, recorded through the real ``Recorder`` into SQLite; the
  file's size on disk (WAL folded in), per hour, and each kind's share;
- a real vLLM page from tests/fixtures/metrics (vllm-1..4) as one row, times 3600, compressed
  without a dictionary (there is one page of each): an upper bound for a real engine;
- the node: the scenario's file per hour plus one more engine (the worst of the above), the
  host sample every 2 s and the tick's stale check (as many rows as the badge's; the scenario
  has neither);
- the same scenario with the gate's own /metrics page scraped too (``gate_page``), per source.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuwatch.monitor.state import Monitor
from gpuwatch.record import codec
from gpuwatch.record.player import Player
from gpuwatch.record.recorder import Recorder
from gpuwatch.sources import host
from gpuwatch.sources.scrape import map_page
from scripts import scenario

FIXTURES = Path(__file__).parent.parent / "tests" / "fixtures" / "metrics"
MB = 1e6


def on_disk(db: sqlite3.Connection) -> dict[str, float]:
    """Bytes per kind (a scrape per source: ``scrape <url>``): the blob, plus the row's and its
    two index entries' share of the file."""
    rows = db.execute(
        "SELECT CASE kind WHEN 'scrape' THEN 'scrape ' || source ELSE kind END, COUNT(*), "
        "SUM(LENGTH(data)) FROM rows GROUP BY 1"
    ).fetchall()
    pages = (
        db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
    )
    blobs = sum(b or 0 for _, _, b in rows)
    count = sum(n for _, n, _ in rows)
    overhead = (pages - blobs) / count  # per row: ids, times, kind, source, the indexes
    return {kind: (b or 0) + n * overhead for kind, n, b in rows} | {"_overhead": overhead}


class FlushEverySecond:
    """The recorder's tap, committing once a simulated second as the live writer does."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.spent_s = 0.0  # in the recorder: encoding, compressing, committing
        self.rows = 0

    def reading(self, kind: str, mono: float, wall: float, payload: object) -> None:
        started = time.perf_counter()
        self.recorder.reading(kind, mono, wall, payload)
        if kind == "evaluate":
            self.recorder.flush()
        self.spent_s += time.perf_counter() - started
        self.rows += 1


def record(seconds: float, gate_page: bool) -> tuple[int, dict[str, float], float, Any]:
    """The scenario recorded: (file size, bytes per kind, row overhead, (tap, rows, cold, back))."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        recorder = Recorder(path, flush_s=1.0)

        taps: list[FlushEverySecond] = []

        def attach(m: Monitor) -> None:
            taps.append(FlushEverySecond(recorder.attach(m)))
            m.tap = taps[0]

        scenario.build(
            seconds=seconds, rate=1.5, spike_at=seconds * 0.7, on_monitor=attach,
            gate_page=gate_page,
        )  # fmt: skip
        recorder.close()
        db = sqlite3.connect(path)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        kinds = on_disk(db)
        overhead = kinds.pop("_overhead")
        size = path.stat().st_size
        db.close()
        started = time.perf_counter()
        player = Player(path)
        player.seek(player.end)
        cold = time.perf_counter() - started
        started = time.perf_counter()
        player.seek(player.end - 30)
        back = time.perf_counter() - started
        rows = len(player.ids)
        player.close()
    return size, kinds, overhead, (taps[0], rows, cold, back)


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 900.0
    per_h = 3600.0 / seconds
    size, kinds, overhead, (tap, rows, cold, back) = record(seconds, gate_page=False)
    print(
        f"recorder: {tap.spent_s / tap.rows * 1e6:.0f} us a row on the event loop, "
        f"{tap.spent_s * per_h:.1f} s of CPU an hour"
    )
    print(
        f"replay: open and play all {rows} rows {cold:.2f} s ({rows / cold:.0f} rows/s); "
        f"30 s back from a checkpoint {back * 1000:.0f} ms"
    )
    print(
        f"simulated {seconds:.0f} s at 1 Hz: file {size / MB:.2f} MB -> {size * per_h / MB:.2f} MB/h"
    )
    for kind, b in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<9} {b * per_h / MB:6.2f} MB/h")
    sim_engine = kinds.get(f"scrape {scenario.SIM_URL}", 0.0) * per_h

    print("a real vLLM page, one row a second:")
    real = []
    for name in ("vllm-1.prom", "vllm-2.prom", "vllm-3.prom", "vllm-4.prom"):
        result = map_page("http://node:8000/metrics", (FIXTURES / name).read_text())
        row = len(codec.pack(codec.encode_payload("scrape", result))) + overhead
        engines = max(1, len(result.engines))
        real.append(row * 3600 / engines)
        print(
            f"  {name}: {engines} engine(s), {row:.0f} B a row -> {row * 3600 / engines / MB:.2f} MB/h per engine"
        )
    engine_h = max(max(real), sim_engine)
    host_row = len(codec.pack(codec.encode_payload("host", host.read_host()))) + overhead
    host_h = host_row * 1800
    stale_h = kinds.get("evaluate", 0.0) * per_h
    node = size * per_h + engine_h + host_h + stale_h
    print(f"per engine (worst of the above): {engine_h / MB:.2f} MB/h")
    print(f"host sample every 2 s: {host_h / MB:.2f} MB/h; stale checks {stale_h / MB:.2f} MB/h")
    print(
        f"node, 2 engines + gate + GPU + host: {node / MB:.2f} MB/h (goal <= 20 MB/h): "
        f"{'OK' if node <= 20 * MB else 'OVER'}"
    )
    # What the README's service unit records: one engine, the gate's /metrics and --admin
    # (its limits, status and audit), the GPU, the host.
    size, kinds, _, _ = record(seconds, gate_page=True)
    print(
        f"as the README's unit records (engine + gate page + admin + GPU), file {size * per_h / MB:.2f} MB/h:"
    )
    for kind, b in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<40} {b * per_h / MB:6.2f} MB/h")
    unit = size * per_h + host_h + stale_h
    print(
        f"the unit's node, with the host sample and stale checks: {unit / MB:.2f} MB/h: "
        f"--max-size 500M holds {500 * MB / unit:.0f} h ({500 * MB / unit / 24:.1f} days); "
        f"7 days need {7 * 24 * unit / MB:.0f} MB"
    )
    print(f"with a second engine: {(unit + engine_h) / MB:.2f} MB/h")


if __name__ == "__main__":
    main()
