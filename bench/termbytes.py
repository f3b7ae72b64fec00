"""Bytes the dashboard writes to its terminal: what an operator's SSH link has to carry.

``gpuwatch demo`` (and ``gpuwatch demo --slow-link``) runs in a pseudo-terminal of a given size,
as ``script(1)`` runs a program; everything it writes is read and timestamped. The first
``--warmup`` seconds after its first byte (the first frames drawn whole, the first charts with
data) are left out; the bytes of the next ``--seconds`` are the steady state, printed as KB/s (1 KB =
1000 bytes) with the median and the busiest second of the window (a layout that moves, a
chart's scroll). ``--tree DIR`` runs another
checkout (e.g. ``git worktree add /tmp/base 15cf11c``) in the same run, so before and after see
the same machine; a tree without ``--slow-link`` is measured by default only.

Run: python bench/termbytes.py [--seconds 40] [--warmup 10] [--sizes 160x48,80x24]
                               [--tree DIR] [--dump FOLDER]
Goals: <= 2 KB/s by default at 160x48; < 0.5 KB/s with --slow-link.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOALS = {"default": 2.0, "--slow-link": 0.5}  # KB/s at 160x48


@dataclass
class Result:
    tree: str
    size: str
    variant: str
    kb_s: float
    median: float
    highest: float


def supports_slow_link(tree: Path) -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "demo", "--help"],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    return "--slow-link" in out.stdout


def measure(tree: Path, size: tuple[int, int], flags: list[str], warmup: float,
            seconds: float, dump: Path | None) -> tuple[float, float, float]:  # fmt: skip
    """(KB/s over the window, its median and busiest second) for one dashboard in a pty."""
    cols, rows = size
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal of this size, this tree's code
        os.chdir(tree)
        env = {**os.environ, "PYTHONPATH": str(tree), "TERM": "xterm-256color"}
        env.setdefault("COLORTERM", "truecolor")
        os.execve(sys.executable, [sys.executable, "-m", "gpuwatch", "demo", *flags], env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    os.kill(pid, signal.SIGWINCH)
    # The clock starts at the app's first byte: the simulator and the gate take seconds to
    # start before it, more on a loaded machine.
    start = time.monotonic() + 3600.0
    give_up = time.monotonic() + 60.0
    per_second: dict[int, int] = {}
    raw = bytearray()
    marks: list[str] = []  # "seconds into the window, offset in raw" per read, with --dump
    try:
        while (now := time.monotonic()) < start + warmup + seconds:
            if start > now > give_up:
                raise SystemExit(f"gpuwatch demo {' '.join(flags)} wrote nothing in 60 s")
            ready, _, _ = select.select([fd], [], [], 0.2)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break  # the child is gone
            if not chunk:
                break
            if start > now:
                start = now
            at = now - start - warmup
            if at >= 0:
                per_second[int(at)] = per_second.get(int(at), 0) + len(chunk)
                marks.append(f"{at:.3f}\t{len(raw)}")
                raw += chunk
    finally:
        os.write(fd, b"q")  # the demo stops its simulator and gate as it quits
        end = time.monotonic() + 10
        while time.monotonic() < end:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if select.select([fd], [], [], 0.2)[0]:
                with contextlib.suppress(OSError):
                    os.read(fd, 65536)
        else:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        os.close(fd)
    if dump is not None:
        dump.write_bytes(bytes(raw))
        dump.with_suffix(".tsv").write_text("\n".join(marks) + "\n")
    seconds_seen = sorted(per_second.get(s, 0) for s in range(int(seconds)))
    total = sum(per_second.values())
    return (
        total / seconds / 1000,
        seconds_seen[len(seconds_seen) // 2] / 1000,
        seconds_seen[-1] / 1000,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--warmup", type=float, default=10)
    parser.add_argument("--sizes", default="160x48,80x24")
    parser.add_argument("--variants", default="default,--slow-link")
    parser.add_argument("--tree", type=Path, help="another checkout, measured first (before)")
    parser.add_argument("--dump", type=Path, help="save each run's bytes in this folder")
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    trees = ([("before", args.tree.resolve())] if args.tree else []) + [("after", REPO)]
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    for name, tree in trees:
        slow = supports_slow_link(tree)
        variants = [v for v in args.variants.split(",") if v == "default" or slow]
        for cols, rows in sizes:
            for variant in variants:
                flags = [] if variant == "default" else [variant]
                label = f"{name}-{cols}x{rows}-{variant.strip('-')}"
                dump = args.dump / f"{label}.bin" if args.dump else None
                kb, lo, hi = measure(tree, (cols, rows), flags, args.warmup, args.seconds, dump)
                results.append(Result(name, f"{cols}x{rows}", variant, kb, lo, hi))
                print(f"  {label}: {kb:.2f} KB/s", file=sys.stderr, flush=True)
    print(f"gpuwatch demo through a pty (TERM=xterm-256color), bytes written over "
          f"{args.seconds:g} s after {args.warmup:g} s of start-up; KB = 1000 bytes")  # fmt: skip
    print(f"{'tree':8}{'size':>9}{'variant':>13}{'KB/s':>8}{'median s':>12}{'busiest s':>11}")
    for r in results:
        print(f"{r.tree:8}{r.size:>9}{r.variant:>13}{r.kb_s:>8.2f}{r.median:>12.2f}"
              f"{r.highest:>11.2f}")  # fmt: skip
    print("goals at 160x48: <= 2 KB/s by default, < 0.5 KB/s with --slow-link"
          + (f"   (before = {args.tree})" if args.tree else ""))  # fmt: skip


if __name__ == "__main__":
    main()
