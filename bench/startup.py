"""How long `gpuwatch --help` and `gpuwatch snapshot` take, start to exit, as a shell sees them.

Each command runs N times in a fresh interpreter; the median wall time is printed, with the
median CPU time (user + system) of the process, beside the bare interpreter's (`python -c pass`)
measured the same way at the same moment: on a loaded machine the wall time grows with the
load, the CPU time much less. `gpuwatch snapshot` on a saved page is timed too (it loads httpx,
prometheus_client and rich, never Textual or aiohttp: tests/unit/test_import_hygiene.py).

`--big-page` times the held-out check instead: a 5 MB vLLM V1 page (64 models, 2 engines each,
every V1 histogram: bench/parse.py's page, grown) served on 127.0.0.1, read by `gpuwatch snapshot
--metrics URL` as a whole process, against a bare prometheus_client parse of the same page
(`text_string_to_metric_families` consumed fully) in a process of its own. The ratio of the
medians is the goal's number (0.5 or less); the spread (min-max) says how noisy the machine was.

`--tree DIR` times another checkout the same way; `--before REV` times REV's code beside this
checkout's, interleaved run by run (a detached worktree, removed afterwards). Each tree's
package is compiled to bytecode first, as an installed one is: otherwise every run would
compile gpuwatch's modules again (PYTHONDONTWRITEBYTECODE), 100 ms and more of what is timed.

Run: python bench/startup.py [--runs 21] [--big-page] [--tree DIR | --before REV]
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import parse
from baseline import REPO, checkout

PAGE = REPO / "tests" / "fixtures" / "metrics" / "vllm-1.prom"
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "gpuwatch --version": ["-m", "gpuwatch", "--version"],
    "gpuwatch --help": ["-m", "gpuwatch", "--help"],
    "gpuwatch snapshot": ["-m", "gpuwatch", "snapshot", "--no-gpu", "--metrics-file", str(PAGE)],
}
# The held-out check's page: 64 models x 2 engines of bench/parse.py's V1 page, 5.2 MB.
BIG_MODELS = [f"{model}-{i}" for i in range(16) for model in parse.MODELS]
BARE_PARSE = """
import sys
from prometheus_client.parser import text_string_to_metric_families
with open(sys.argv[1], encoding="utf-8") as fh:
    text = fh.read()
for family in text_string_to_metric_families(text):
    for sample in family.samples:
        pass
"""


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


def big_page() -> str:
    return parse.page([(engine, model) for model in BIG_MODELS for engine in range(2)])


@contextlib.contextmanager
def serve(body: bytes) -> Iterator[str]:
    """``body`` as a /metrics page on 127.0.0.1 (a thread of this process); yields its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def timed(
    commands: dict[str, tuple[list[str], Path]], runs: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Each command's wall and CPU ms over ``runs`` rounds, interleaved, so that a burst of load
    elsewhere falls on every command alike."""
    out: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in commands}
    for _ in range(runs):
        for name, (args, tree) in commands.items():
            wall, cpu = once(args, tree)
            out[name][0].append(wall * 1000)
            out[name][1].append(cpu * 1000)
    return out


def report(results: dict[str, tuple[list[float], list[float]]], runs: int) -> None:
    load = os.getloadavg()[0]
    print(f"median of {runs} runs each ({os.cpu_count()} CPUs, load {load:.2f} at the end)")
    print(f"  {'':<34} {'wall ms':>8} {'CPU ms':>8}   wall min-max")
    for name, (walls, cpus) in results.items():
        print(
            f"  {name:<34} {statistics.median(walls):8.1f} {statistics.median(cpus):8.1f}"
            f"   {min(walls):.0f}-{max(walls):.0f}"
        )


def held_out(trees: dict[str, Path], runs: int) -> None:
    text = big_page()
    body = text.encode()
    with tempfile.TemporaryDirectory() as tmp, serve(body) as url:
        saved = Path(tmp) / "page.prom"
        saved.write_bytes(body)
        print(
            f"page: {len(body) / 1e6:.1f} MB, {text.count(chr(10))} lines, "
            f"{len(BIG_MODELS)} models x 2 engines, served at {url}"
        )
        commands = {"bare prometheus_client parse": (["-c", BARE_PARSE, str(saved)], REPO)}
        for label, tree in trees.items():
            commands[f"gpuwatch snapshot{label}"] = (
                ["-m", "gpuwatch", "snapshot", "--no-gpu", "--metrics", url],
                tree,
            )
        results = timed(commands, runs)
    report(results, runs)
    bare_wall, bare_cpu = (statistics.median(x) for x in results["bare prometheus_client parse"])
    for label in trees:
        walls, cpus = results[f"gpuwatch snapshot{label}"]
        print(
            f"  snapshot{label} / bare parse: wall {statistics.median(walls) / bare_wall:.2f}, "
            f"CPU {statistics.median(cpus) / bare_cpu:.2f} (goal: 0.5 or less)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="runs per command (21)")
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout to time (this one)")
    parser.add_argument("--before", metavar="REV", help="also time REV's code, interleaved")
    parser.add_argument("--big-page", action="store_true", help="the 5 MB held-out check")
    opts = parser.parse_args()
    with contextlib.ExitStack() as stack:
        trees = {"": opts.tree}
        if opts.before:
            trees = {" (before)": stack.enter_context(checkout(opts.before)), " (after)": opts.tree}
        for tree in trees.values():
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", str(tree / "gpuwatch")], check=True
            )
        if opts.big_page:
            held_out(trees, opts.runs)
            return
        commands = {
            f"{name}{label}": (args, tree)
            for label, tree in trees.items()
            for name, args in COMMANDS.items()
        }
        print(", ".join(f"{label or 'tree'}: {tree}" for label, tree in trees.items()))
        report(timed(commands, opts.runs), opts.runs)


if __name__ == "__main__":
    main()
