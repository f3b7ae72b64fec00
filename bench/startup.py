"""How long `gpuwatch --help` takes, start to exit, as a user's shell sees it (goal: under 100 ms).

Each command runs N times in a fresh interpreter; the median wall time is printed, beside the
bare interpreter's (`python -c pass`) on the same machine at the same moment, so that a loaded
machine is told from a slow import. `gpuwatch snapshot` on a saved page is timed too (it loads
httpx, prometheus_client and rich, never Textual or aiohttp: tests/unit/test_import_hygiene.py).

Run: python bench/startup.py [--runs 21]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from baseline import REPO

PAGE = REPO / "tests" / "fixtures" / "metrics" / "vllm-1.prom"
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "gpuwatch --version": ["-m", "gpuwatch", "--version"],
    "gpuwatch --help": ["-m", "gpuwatch", "--help"],
    "gpuwatch snapshot": ["-m", "gpuwatch", "snapshot", "--no-gpu", "--metrics-file", str(PAGE)],
}


def median_ms(args: list[str], runs: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, *args], env=env, stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="runs per command (21)")
    runs = parser.parse_args().runs
    # Interleaved rounds, so that a burst of load elsewhere falls on every command alike.
    rounds: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(3):
        for name, args in COMMANDS.items():
            rounds[name].append(median_ms(args, max(1, runs // 3)))
    bare = statistics.median(rounds["python -c pass"])
    print(
        f"median wall time of {runs} runs each ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f})"
    )
    for name, values in rounds.items():
        ms = statistics.median(values)
        extra = "" if name == "python -c pass" else f"  (+{ms - bare:.0f} ms over the interpreter)"
        print(f"  {name:<22} {ms:7.1f} ms{extra}")


if __name__ == "__main__":
    main()
