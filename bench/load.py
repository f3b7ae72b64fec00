"""The load generator's own limits: streamed requests/s it sustains against a fast upstream
(32 output chunks each), and its send-time error (actual - planned) p99 at 100 requests/s.

Run: python bench/load.py [--seconds 10]   Goals: >= 300 req/s; send error p99 < 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuwatch.load import LoadRun, LoadSpec, build_report
from gpuwatch.load.report import send_errors
from gpuwatch.load.spec import Dist

sys.path.insert(0, str(Path(__file__).parent))
from gate import free_port, wait_port


async def measure(url: str, rate: float, seconds: float) -> dict[str, Any]:
    spec = LoadSpec(url=url, rate=rate, duration_s=seconds, model="stub", api="completions",
                    prompt_tokens=Dist("fixed", 16), output_tokens=Dist("fixed", 32))  # fmt: skip
    run = LoadRun(spec)
    results = await run.run()
    return build_report(spec, results, run.ended - run.started, send_errors(results))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    port = free_port()
    stub = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).parent / "gate.py"),
            "--role",
            "upstream",
            "--port",
            str(port),
        ]
    )
    try:
        wait_port(port)
        url = f"http://127.0.0.1:{port}"
        asyncio.run(measure(url, 50, 1))  # warm-up
        best = None
        for rate in (300, 500, 800):
            r = asyncio.run(measure(url, rate, args.seconds))
            print(f"offered {rate:>4} req/s: completed {r['request_throughput']:7.1f} req/s, "
                  f"failed {r['failed']}, send error p99 {r['send_error_p99_ms']:.2f} ms, "
                  f"TTFT p99 {r['p99_ttft_ms']:.2f} ms")  # fmt: skip
            if r["failed"] == 0 and r["request_throughput"] >= 0.95 * rate:
                best = rate
        steady = asyncio.run(measure(url, 100, args.seconds))
    finally:
        stub.terminate()
        stub.wait(5)
    print(f"sustained streamed rate: {best or 'below 300'} req/s (goal >= 300)")
    print(f"send-time error at 100 req/s: p99 {steady['send_error_p99_ms']:.2f} ms (goal < 5 ms)")


if __name__ == "__main__":
    main()
