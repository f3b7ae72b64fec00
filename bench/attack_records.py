"""Files after a crash or an edit, before (a baseline commit) and after (this checkout): torn
audit lines, recordings with impossible clocks, two recorders on one file, a Prometheus that
nests deep.

Each variant runs in a fresh process on the tree under test (``python -c``, the tree first on
PYTHONPATH and as the working folder) and prints what a person would see.

- audit: the gate's audit log gets a torn tail (the variants below), the gate starts, takes a
  PATCH, and starts again: does it come up?
- clocks: a recording with one row at an impossible clock; ``replay --report``: exit status, a
  traceback or not, the line it printed.
- two recorders: two ``Recorder``s attached to one file, each writing its own rows: refused, or
  how many rows cannot be decoded after.
- deep: a Prometheus answering JSON nested 100,000 deep: the fleet reading's error line.

Run: python bench/attack_records.py [--baseline 8ebca5e] [--skip-before]
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from aiohttp import web
from appthread import serve_in_thread
from baseline import run_on, trees

TORN = {
    "mid-object": b'{"time": 17000, "actor": "b", "ver',
    "mid-UTF-8": '{"time": 1, "actor": "\u00e9'.encode()[:-1],
    "one brace": b"{",
    "whole entry, no newline": b'{"time":1.0,"actor":"b","version":3,"change":{}}',
    "100 KB of garbage": b"\xff" * 100_000,
}

AUDIT = r"""
import asyncio, sys
from pathlib import Path
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
import aiohttp
folder, torn = Path(sys.argv[1]), Path(sys.argv[2]).read_bytes()
state = folder / "state.json"
audit = folder / "state.json.audit.jsonl"
cfg = GateConfig(DEFAULT_LANES)

async def patch(paused):
    _, served = await start_gate("http://127.0.0.1:9", cfg, state_file=state)
    try:
        async with aiohttp.ClientSession() as s, s.patch(
            f"{served.url}/admin/limits", json={"paused": paused}) as r:
            return r.status
    finally:
        await served.close()

async def main():
    await patch(True)
    audit.write_bytes(audit.read_bytes() + torn)
    try:
        await patch(False)
        await patch(True)
        print("up after a PATCH and a restart")
    except Exception as exc:
        print(f"DOWN: {str(exc)[:90]}")

asyncio.run(main())
"""

CLOCKS = r"""
import subprocess, sys
from pathlib import Path
from gpuwatch.record import codec, store
path, wall, mono = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
db = store.create(path, {"urls": [], "interval_s": 1.0, "window_s": 60.0, "slo": {}})
event = codec.pack({"t": 1.0, "level": "info", "text": "calm"})
store.insert_rows(db, [(1.0, 1.7e9, "event", None, event), (2.0, 1.7e9 + 1, "evaluate", None, None)])
db.execute("INSERT INTO rows (mono, wall, kind, source, data) VALUES (?, ?, 'evaluate', NULL, NULL)",
           (float(mono) if mono != "text" else "soon", float(wall) if wall != "text" else "soon"))
db.close()
out = subprocess.run([sys.executable, "-m", "gpuwatch", "replay", str(path), "--report",
                      str(path.with_suffix(".md"))], capture_output=True, text=True)
said = (out.stdout + out.stderr).strip().splitlines()
trace = "Traceback" in out.stderr
print(f"exit {out.returncode}{' TRACEBACK' if trace else ''}: {said[-1][:90] if said else ''}")
"""

TWO = r"""
import sys
from pathlib import Path
from gpuwatch.monitor.state import Event, Monitor
from gpuwatch.record import store
from gpuwatch.record.player import Player
from gpuwatch.record.recorder import Recorder
path = Path(sys.argv[1])
a = Recorder(path).attach(Monitor([], wall=lambda: 1.7e9))
try:
    b = Recorder(path).attach(Monitor([], wall=lambda: 1.7e9))
except store.RecordingError as exc:
    print(f"second refused: {str(exc).split(': ', 1)[1][:80]}")
    sys.exit()
for i in range(100):  # each with its own dictionary for the kind, chosen in memory
    a.reading("event", float(i), 1.7e9 + i, Event(1.7e9 + i, "info", f"a{i}" * (i % 7 + 1)))
    b.reading("event", float(i) + 0.5, 1.7e9 + i + 0.5, Event(1.7e9 + i, "warn", f"b{i}"))
    if i % 10 == 9:
        a.flush(); b.flush()
a.close(); b.close()
p = Player(path)
p.seek(p.end)
print(f"both wrote: {p.bad_rows} of {len(p.ids)} rows cannot be decoded")
"""

DEEP = r"""
import asyncio, sys
from gpuwatch.sources.prometheus import PrometheusSource
async def main():
    async with PrometheusSource(sys.argv[1]) as source:
        reading = await source.read_fleet()
    print(reading.error[-70:])
asyncio.run(main())
"""


async def deep(_: web.Request) -> web.Response:
    return web.Response(text="[" * 100_000 + "]" * 100_000, content_type="application/json")


def run(tree: Path, script: str, *args: str) -> str:
    out = run_on(tree, ["-c", script, *args])
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[-1][:120] if lines else f"exit {out.returncode}, nothing said"


def main() -> None:
    with contextlib.ExitStack() as stack:
        sides = trees(stack, __doc__.split("\n\n")[0])
        app = web.Application()
        app.router.add_get("/api/v1/{tail:.*}", deep)
        url = stack.enter_context(serve_in_thread(app))
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gw-attack-")))
        # Bytes go to the child as a file (an argument is at most 128 KiB).
        cases: list[tuple[str, str, list[str | bytes]]] = []
        for name, torn in TORN.items():
            cases.append((f"audit: torn tail, {name}", AUDIT, ["{dir}", torn]))
        for wall, mono in (("1e308", "3"), ("-1e308", "3"), ("1e20", "3"), ("text", "3"),
                           ("1.7e9", "1e308")):  # fmt: skip
            cases.append((f"replay --report, wall {wall} mono {mono}", CLOCKS,
                          ["{dir}/r.db", wall, mono]))  # fmt: skip
        cases.append(("two recorders on one file", TWO, ["{dir}/two.db"]))
        cases.append(("Prometheus nested 100,000 deep", DEEP, [url]))
        for title, script, argv in cases:
            for side, tree in sides.items():
                folder = work / f"{len(os.listdir(work))}"
                folder.mkdir()
                (folder / "arg").write_bytes(next((a for a in argv if isinstance(a, bytes)), b""))
                texts = [str(folder / "arg") if isinstance(a, bytes) else a for a in argv]
                said = run(tree, script, *(a.format(dir=folder) for a in texts))
                print(f"{title:42} {side:6} {said}", flush=True)


if __name__ == "__main__":
    main()
