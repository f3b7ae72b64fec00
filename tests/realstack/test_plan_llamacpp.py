"""``gpuwatch plan sweep --url`` against a real llama-server (the tests' tiny model)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sweep_completes_against_llama_server(llama_server: str, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    # Tiny probes in real time; rates stay low enough that requests waiting for one of the two
    # slots never run out of the server's HTTP threads (see the fixture).
    proc = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "plan", "sweep", "--url", llama_server,
         "--metrics", f"{llama_server}/metrics", "--api", "completions",
         "--slo", "ttft_p99_s=5", "--start-rate", "1", "--min-duration", "3",
         "--max-duration", "3", "--max-probes", "2", "--budget", "60",
         "--prompt-tokens", "16:64", "--output-tokens", "8", "--json", str(out), "--no-save",
         "--svg", str(tmp_path / "knee.svg")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(out.read_text())
    assert plan["mode"] == "url" and plan["subject"] == llama_server
    probes = plan["probes"]
    assert [p["rate"] for p in probes] == [1.0, 2.0]
    for p in probes:
        assert p["arrived"] >= 2 and p["failed"] == 0 and p["refused"] == 0
        assert p["ttft_p50_s"] is not None and p["ttft_p50_s"] < 5
        # llama.cpp's /metrics, read through the dialects: its deferred requests (current
        # builds export no KV usage; kv_peak is then null, never a made-up 0).
        assert p["queue_peak"] is not None
    # Both passed on their estimate (too few requests to show 99% with confidence), so the
    # knee is the higher one, capped by --max-probes; the limits come with it.
    assert all(p["decided_by"] == "estimate" for p in probes)
    assert plan["knee_rps"] == 2.0 and plan["recommended"]["max_inflight"] >= 1
    assert "knee: 2.00 req/s" in proc.stdout
    assert any("no rate failed" in n for n in plan["notes"])  # said, not hidden
    assert any("point estimate" in n for n in plan["notes"])
    assert (tmp_path / "knee.svg").read_text().startswith("<svg")
