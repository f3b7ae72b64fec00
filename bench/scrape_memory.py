"""Peak memory of one scrape of a hostile ``/metrics`` page, before (a baseline commit) and after
(this checkout): a page with one 4 MiB (and one 15 MiB) model label, the same label changing at
every poll (a ``watch`` with its parse cache, 3 polls), and a 1 MiB gzip bomb.

Each case runs in a fresh process (``python -c``, the tree under test first on PYTHONPATH) that
scrapes a local aiohttp server through ``gpuwatch.sources.scrape.scrape`` and prints its peak
RSS above what it held after its imports (``VmHWM``: the kernel's own high-water mark, so
nothing a C extension allocates is missed) and what the scrape said.

Run: python bench/scrape_memory.py [--baseline 8ebca5e] [--skip-before]
Goal: every case within a few times the 16 MiB page limit; the gzip bomb refused before it
inflates past the limit.
"""

from __future__ import annotations

import contextlib
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiohttp import web
from appthread import serve_in_thread
from baseline import run_on, trees

MiB = 1024 * 1024
FAMILY = "vllm:num_requests_running"


def label_page(size: int, first: str = "A") -> bytes:
    label = first + "m" * (size - 1)
    return (
        f"# TYPE {FAMILY} gauge\n"
        f'{FAMILY}{{model_name="small"}} 1\n'
        f'{FAMILY}{{model_name="{label}"}} 2\n'
    ).encode()


def gzip_bomb(compressed: int) -> bytes:
    """About ``compressed`` bytes of gzip that inflate ~1000 times (newlines: a valid page),
    built a MiB at a time so that this process never holds the inflated page."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    chunk = b"\n" * MiB
    parts = [packer.compress(chunk) for _ in range(compressed * 1030 // MiB)]
    return b"".join([*parts, packer.flush()])


class Pages:
    def __init__(self) -> None:
        self.polls = 0
        self.bomb = gzip_bomb(MiB)
        self.fixed = {"label4": label_page(4 * MiB), "label15": label_page(15 * MiB)}

    async def handle(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == "bomb":
            return web.Response(
                body=self.bomb, headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"}
            )
        if name == "changing":
            self.polls += 1
            return web.Response(body=label_page(4 * MiB, first=chr(65 + self.polls % 26)))
        return web.Response(body=self.fixed[name])


@contextlib.contextmanager
def server() -> Iterator[str]:
    app = web.Application()
    app.router.add_get("/{name}", Pages().handle)
    with serve_in_thread(app) as url:
        yield url


CHILD = r"""
import asyncio, json, sys
import psutil
from gpuwatch.httpclient import async_client
from gpuwatch.sources.scrape import ParseCache, scrape
url, polls = sys.argv[1], int(sys.argv[2])
base = psutil.Process().memory_info().rss
async def main():
    cache = ParseCache() if polls > 1 else None
    async with async_client(timeout_s=60) as client:
        for _ in range(polls):
            r = await scrape(client, url, total_timeout_s=120, cache=cache)
    return r
r = asyncio.run(main())
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork and exec.
status = open("/proc/self/status").read()
peak = int(status.split("VmHWM:")[1].split()[0]) * 1024
said = r.error or "; ".join([f"{len(r.engines)} engine(s)", *r.warnings])
print(json.dumps({"peak_mib": (peak - base) / 2**20, "said": said[:110]}))
"""

CASES = [("label4", 1), ("label15", 1), ("changing", 3), ("bomb", 1)]
TITLES = {
    "label4": "4 MiB model label",
    "label15": "15 MiB model label",
    "changing": "4 MiB label, new each poll (3 polls)",
    "bomb": "1 MiB gzip bomb (~1 GiB inflated)",
}


def run_case(tree: Path, url: str, polls: int) -> dict[str, Any]:
    out = run_on(tree, ["-c", CHILD, url, str(polls)])
    if out.returncode != 0:
        return {"peak_mib": float("nan"), "said": f"crashed: {out.stderr.strip()[-100:]}"}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])  # the child's JSON
    return result


def main() -> None:
    with contextlib.ExitStack() as stack:
        sides = trees(stack, __doc__.split("\n\n")[0])
        url = stack.enter_context(server())
        print("peak RSS above the imports, MiB (before = the baseline, after = this checkout)")
        for name, polls in CASES:
            for side, tree in sides.items():
                r = run_case(tree, f"{url}/{name}", polls)
                print(f"{TITLES[name]:40} {side:6} {r['peak_mib']:8.1f}  {r['said']}", flush=True)


if __name__ == "__main__":
    main()
