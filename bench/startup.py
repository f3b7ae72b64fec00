"""How long `gpuwatch --help` takes, start to exit, as a user's shell sees it (goal: under 100 ms).

Each command runs N times in a fresh interpreter; the median wall time is printed, with the
median CPU time (user + system) of the process, beside the bare interpreter's (`python -c pass`)
measured the same way at the same moment: on a loaded machine the wall time grows with the
load, the CPU time much less. `gpuwatch snapshot` on a saved page is timed too (it loads httpx,
prometheus_client and rich, never Textual or aiohttp: tests/unit/test_import_hygiene.py).
`--tree DIR` times another checkout (e.g. the code before a change) the same way.

Run: python bench/startup.py [--runs 21] [--tree DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from baseline import REPO

PAGE = REPO / "tests" / "fixtures" / "metrics" / "vllm-1.prom"
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "gpuwatch --version": ["-m", "gpuwatch", "--version"],
    "gpuwatch --help": ["-m", "gpuwatch", "--help"],
    "gpuwatch snapshot": ["-m", "gpuwatch", "snapshot", "--no-gpu", "--metrics-file", str(PAGE)],
}


def once(args: list[str], tree: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one run in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    # In the tree: `python -m` puts the working directory first on sys.path.
    subprocess.run(
        [sys.executable, *args], env=env, cwd=tree, stdout=subprocess.DEVNULL, check=True
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="runs per command (21)")
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout to time (this one)")
    opts = parser.parse_args()
    walls: dict[str, list[float]] = {name: [] for name in COMMANDS}
    cpus: dict[str, list[float]] = {name: [] for name in COMMANDS}
    # Interleaved, so that a burst of load elsewhere falls on every command alike.
    for _ in range(opts.runs):
        for name, args in COMMANDS.items():
            wall, cpu = once(args, opts.tree)
            walls[name].append(wall * 1000)
            cpus[name].append(cpu * 1000)
    load = os.getloadavg()[0]
    print(f"{opts.tree}: median of {opts.runs} runs each ({os.cpu_count()} CPUs, load {load:.2f})")
    print(f"  {'':<20} {'wall ms':>8} {'CPU ms':>8}")
    for name in COMMANDS:
        print(
            f"  {name:<20} {statistics.median(walls[name]):8.1f} {statistics.median(cpus[name]):8.1f}"
        )


if __name__ == "__main__":
    main()
