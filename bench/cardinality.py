"""``gpuwatch snapshot --json`` on a page with many model label values (issue 11, item 8).

A broken exporter (or an attacker) can put 100,000 ``model_name`` values on one page. The cap
(``[scrape] max_engines``, default 256) drops the extra models in the prefilter, before the
prometheus_client parse, so time and output stay bounded whatever the page holds.

Run: python bench/cardinality.py [--models N] [--max-engines N]
Prints the page size, the wall time of the snapshot process and the size of its output.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Two families keep a 100,000-model page (13 MB) under the default 16 MiB body cap.
GAUGES = ("num_requests_running",)
COUNTERS = ("generation_tokens_total",)


def page(models: int) -> str:
    lines: list[str] = []
    for family in (*GAUGES, *COUNTERS):
        kind = "counter" if family.endswith("_total") else "gauge"
        lines.append(f"# TYPE vllm:{family} {kind}")
        lines += [f'vllm:{family}{{engine="0",model_name="model-{i}"}} {i}' for i in range(models)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=100_000)
    parser.add_argument("--max-engines", type=int, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "page.prom"
        text = page(args.models)
        path.write_text(text)
        cmd = [sys.executable, "-m", "gpuwatch", "snapshot", "--no-gpu", "--json"]
        cmd += ["--metrics-file", str(path)]
        if args.max_engines is not None:
            cmd += ["--max-engines", str(args.max_engines)]
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, check=False)
        elapsed = time.perf_counter() - started
    print(f"page: {args.models} models, {len(text)} bytes")
    print(
        f"snapshot --json: {elapsed:.2f} s, exit {proc.returncode}, stdout {len(proc.stdout)} bytes"
    )
    print(f"stderr: {proc.stderr.decode(errors='replace')[-300:].strip() or '(empty)'}")


if __name__ == "__main__":
    main()
