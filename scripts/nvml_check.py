"""The check to run once on a machine with a real NVIDIA GPU (issue 31, item 3): NVML read for
real, never through the fake backend.

1. A child process takes 256 MiB of GPU memory through the CUDA driver API (libcuda, ctypes:
   nothing to install) and holds it.
2. ``gpuwatch snapshot --json`` reads every GPU: the document goes to OUT/snapshot.json, and the
   child must be listed on GPU 0 with its pid, no container (it runs on the host) and its
   memory; every field NVML left null is named (NotSupported on this GPU).
3. The GPU screen (``g``) is drawn from the same real NVML: OUT/gpu-screen-160x48.svg.

Run from the repository's root: python -m scripts.nvml_check [--out DIR]. Exit 0: all held;
1: a check failed (what is printed says which); 3: no GPU here (NVML or libcuda missing).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HOLD_BYTES = 256 * 2**20
# The child: a CUDA context on device 0 and one allocation, kept until stdin closes.
HOLDER = f"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(dev), 0)),
                   ("cuCtxCreate_v2", (ctypes.byref(ctx), 0, dev)),
                   ("cuMemAlloc_v2", (ctypes.byref(ptr), {HOLD_BYTES}))):
    rc = getattr(cuda, call)(*args)
    if rc:
        sys.exit(f"{{call}} failed: CUDA error {{rc}}")
print("holding", flush=True)
sys.stdin.read()
"""


def _gpu_or_exit() -> None:
    try:
        ctypes.CDLL("libcuda.so.1")
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        print(f"no GPU here: {exc}")
        sys.exit(3)


def _nulls(prefix: str, data: dict[str, Any]) -> list[str]:
    return [f"{prefix}.{k}" for k, v in data.items() if v is None]


def check_snapshot(out: Path, holder_pid: int) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "snapshot", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    (out / "snapshot.json").write_text(proc.stdout)
    (out / "snapshot.stderr").write_text(proc.stderr)
    doc = json.loads(proc.stdout)
    problems = [] if doc["nvml_error"] is None else [f"nvml_error: {doc['nvml_error']}"]
    for g in doc["gpus"]:
        print(f"GPU {g['index']} {g['name']} {g['uuid']}: mig_mode {g['mig_mode']}, "
              f"{len(g['mig'])} MIG devices, {len(g['processes'])} processes")  # fmt: skip
        print("  null (NotSupported or NoData):", ", ".join(_nulls("", g)) or "none")
        for m in g["mig"]:
            print(f"  MIG {m}")
    mine = [p for g in doc["gpus"] for p in g["processes"] if p["pid"] == holder_pid]
    if not mine:
        pids = [p["pid"] for g in doc["gpus"] for p in g["processes"]]
        return [*problems, f"the holder (pid {holder_pid}) is not listed; NVML listed {pids}"]
    p = mine[0]
    print(f"holder: pid {p['pid']}, container {p['container']}, visible {p['visible']}, "
          f"used_memory_bytes {p['used_memory_bytes']}, name {p['name']}")  # fmt: skip
    if p["container"] is not None:
        problems.append(f"the holder runs on the host, not in {p['container']}")
    if not p["visible"]:
        problems.append("the holder is this machine's own process, yet not visible")
    if p["used_memory_bytes"] is not None and p["used_memory_bytes"] < HOLD_BYTES:
        problems.append(f"the holder holds {p['used_memory_bytes']} bytes, < {HOLD_BYTES}")
    return problems


async def shoot_gpu_screen(out: Path) -> None:
    from gpuwatch.session.node import DashboardOptions, live_session
    from gpuwatch.sources.nvml import NvmlReader
    from gpuwatch.tui.app import GpuwatchApp

    session = live_session(DashboardOptions(urls=[], nvml=NvmlReader()))
    app = GpuwatchApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        for _ in range(100):  # the first NVML poll, in its thread
            if session.monitor.gpus is not None:
                break
            await pilot.pause(0.1)
        await pilot.press("g")
        await pilot.pause(0.5)
        app.save_screenshot(filename="gpu-screen-160x48.svg", path=str(out))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("nvml-check"))
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    _gpu_or_exit()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline().strip()
        if line != "holding":
            print(f"the holder could not take GPU memory (exit {holder.wait(10)})")
            return 1
        problems = check_snapshot(out, holder.pid)
        asyncio.run(shoot_gpu_screen(out))
    finally:
        if holder.stdin:
            holder.stdin.close()
        holder.wait(10)
    for problem in problems:
        print("FAILED:", problem)
    print(f"wrote {out}/snapshot.json and {out}/gpu-screen-160x48.svg")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
