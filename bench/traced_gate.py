"""``gpuwatch gate`` under tracemalloc, for finding what grows (bench/soak.py --tracemalloc).

Bench-only: the gate itself has no debug hook. This wrapper starts tracing, then runs the
ordinary CLI; each SIGUSR1 writes a snapshot to ``$GPUWATCH_TRACE_DIR/snap-<n>.pickle``. Compare
two of them with ``python bench/traced_gate.py --compare A B``.

Run: python bench/traced_gate.py gate --upstream ... (the CLI's arguments)
"""

from __future__ import annotations

import os
import signal
import sys
import tracemalloc
from types import FrameType


def _compare(old_path: str, new_path: str, top: int = 25) -> None:
    old = tracemalloc.Snapshot.load(old_path)
    new = tracemalloc.Snapshot.load(new_path)
    for key in ("lineno", "traceback"):
        stats = new.compare_to(old, key)
        print(f"--- top {top} by {key}: {old_path} -> {new_path}")
        for stat in stats[:top]:
            print(f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  "
                  f"(now {stat.size / 1024:.1f} KiB)")  # fmt: skip
            lines = stat.traceback.format(limit=6 if key == "traceback" else 1)
            print("    " + "\n    ".join(lines))


def main() -> None:
    if sys.argv[1:2] == ["--compare"]:
        _compare(sys.argv[2], sys.argv[3])
        return
    out = os.environ["GPUWATCH_TRACE_DIR"]
    tracemalloc.start(int(os.environ.get("GPUWATCH_TRACE_FRAMES", "1")))
    # One frame by default: a snapshot of a few hundred thousand blocks then takes about a
    # second of the gate's event loop (eight frames took long enough for clients to time out).
    taken = [0]

    def dump(_signum: int, _frame: FrameType | None) -> None:
        taken[0] += 1
        snap = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        snap.dump(f"{out}/snap-{taken[0]}.pickle")
        traced, peak = tracemalloc.get_traced_memory()
        with open(f"{out}/traced.txt", "a") as log:
            log.write(
                f"snap-{taken[0]} traced {traced / 2**20:.1f} MiB peak {peak / 2**20:.1f} MiB\n"
            )

    signal.signal(signal.SIGUSR1, dump)
    from gpuwatch.cli import main as cli

    raise SystemExit(cli(sys.argv[1:]))


if __name__ == "__main__":
    main()
