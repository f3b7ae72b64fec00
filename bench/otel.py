"""What OpenTelemetry export costs the gate: the same gate with export off, on (to a live
OTLP/HTTP receiver that decodes every span, in its own process) and on to a dead collector
(nothing listens), each in front of the same fast stub upstream (bench/gate.py's).

Run: python bench/otel.py [--seconds 10] [--repeat 1] [--sample-ratio 1] [--baseline DIR]
(needs wrk). ``--baseline DIR`` adds a gate run from another checkout's code with export on,
measured in the same rounds: a change's before and after under the same load, e.g.
``git archive main | tar -x -C /tmp/before``.

- short requests: wrk, 64 connections, small JSON POSTs, for --seconds: requests/s and the
  gate's CPU per request (its process CPU time over the run / requests, the export thread's
  encoding and sending included);
- streamed requests (32 chunks each): requests/s and CPU per request, the same way;
- added latency at a fixed 200 requests/s (an aiohttp client on a schedule): p50 / p99 over
  the run, against export off, and the gate's CPU per request at that rate (the same load
  for every gate, so the receiver's share of the 2 cores does not move it);
- export's two costs apart, in-process: the request path's per request, the export thread's
  encoding per span (steadier than whole-process figures on a shared machine).
Goal (issue 30): at most 10% more CPU per request with export on. With ``--repeat N`` each
figure is the median of N rounds. The receiver's count of spans is printed beside the number
of requests the gates answered with export on, so a run that lost spans says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tests/
from tests.helpers import stop_process

sys.path.insert(0, str(Path(__file__).parent))
from gate import fixed_rate, free_port, pct, run_upstream, wait_port, wrk

REPO = Path(__file__).resolve().parent.parent
SHORT = '{"model":"m","prompt":"hi","max_tokens":8}'
STREAMED = '{"model":"m","prompt":"hi","max_tokens":32,"stream":true}'
MODES = ("off", "on", "dead")


def run_receiver(port: int) -> None:
    from tests.functional.otlpkit import OtlpReceiver

    async def serve() -> None:
        receiver = OtlpReceiver(keep=False)
        await receiver.start(port)
        await asyncio.Event().wait()  # until terminated

    asyncio.run(serve())


def parts(ratio: float, n: int = 5000) -> tuple[float, float, float]:
    """Export's costs measured apart, in this process: the request path's (a span's hooks and
    its metrics, per request, CPU time of this thread) and the export thread's (encoding a
    span as the gate's exporter does, ``encode_records``, per span; and, for comparison, the
    SDK's own OTLP encoder on the same spans as ``ReadableSpan``s, which the gate used before).
    On a busy machine the gates' CPU per request moves from round to round; these say where
    export's share of it goes."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from gpuwatch.gate.classes import Who
    from gpuwatch.gate.limits import LaneLimits
    from gpuwatch.gate.otel import GateTelemetry, RequestTrace
    from gpuwatch.gate.request import read_request
    from gpuwatch.otlp import OtlpConfig, SpanRecord, encode_records

    # Nothing listens on port 9 and nothing is sent: the spans are kept to be encoded here.
    config = OtlpConfig("http://127.0.0.1:9", metrics_interval_s=3600, sample_ratio=ratio)
    telemetry = GateTelemetry(config)
    exporting = telemetry.exporting
    spans: list[SpanRecord] = []
    exporting.emit = spans.append  # type: ignore[method-assign,assignment]
    req = read_request(SHORT.encode(), LaneLimits(), lane="chat", path="/v1/completions",
                       query="", who=Who(), inference=True)  # fmt: skip
    answer = (b'{"id":"cmpl-1","model":"m","choices":[{"text":"ok","finish_reason":"stop"}],'
              b'"usage":{"prompt_tokens":3,"completion_tokens":1}}')  # fmt: skip
    on_path = 0.0
    for _ in range(2):  # the second pass is measured
        spans.clear()
        start = time.thread_time()
        for _ in range(n):
            trace = RequestTrace(telemetry, {}, "chat", "/v1/completions", Who(), time.monotonic())
            trace.read(req)
            trace.queueing()
            trace.admitted(0.0, ())
            trace.inject({})
            trace.upstream(200)
            trace.first_token()
            trace.answer(answer)
            trace.end(200)
        on_path = (time.thread_time() - start) / n * 1e6
    batches = [spans[k : k + 512] for k in range(0, len(spans), 512)]
    start = time.thread_time()
    for batch in batches:
        encode_records(batch, exporting.resource, exporting.scope)
    encoding = (time.thread_time() - start) / max(1, len(spans)) * 1e6
    readable = [[r.readable(exporting.resource, exporting.scope) for r in b] for b in batches]
    start = time.thread_time()
    for sdk_batch in readable:
        encode_spans(sdk_batch).SerializePartialToString()
    sdk_encoding = (time.thread_time() - start) / max(1, len(spans)) * 1e6
    exporting.outage.closing = exporting.outage.down = True
    exporting.shutdown()
    return on_path, encoding, sdk_encoding


def spans_received(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=5) as r:
        count: int = json.load(r)["spans"]
        return count


def cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--sample-ratio", type=float, default=1.0, help="[otlp] sample_ratio of the gates"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (e.g. `git archive` of a commit): a 4th gate, export on, run "
        "from its code, beside the others: before and after a change in one run",
    )
    parser.add_argument("--role", default="bench")
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.role == "upstream":
        run_upstream(args.port)
        return
    if args.role == "receiver":
        run_receiver(args.port)
        return
    up, receiver_port, dead_port = free_port(), free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    tmp = Path(tempfile.mkdtemp(prefix="gwotel-"))
    try:
        for role, port in (("upstream", up), ("receiver", receiver_port)):
            procs.append(
                subprocess.Popen([sys.executable, __file__, "--role", role, "--port", str(port)])
            )
        config = tmp / "gate.toml"
        config.write_text(
            "[lanes.chat]\nmax_inflight = 4096\nmax_queue = 4096\n"
            f"[otlp]\nsample_ratio = {args.sample_ratio}\n"
        )
        endpoints = {"on": receiver_port, "dead": dead_port}
        modes = (*MODES, "baseline") if args.baseline else MODES
        endpoints["baseline"] = receiver_port
        ports = {mode: free_port() for mode in modes}
        gates: dict[str, psutil.Process] = {}
        for mode in modes:
            otlp = (
                ["--otlp-endpoint", f"http://127.0.0.1:{endpoints[mode]}"]
                if mode in endpoints
                else []
            )
            tree = args.baseline.resolve() if mode == "baseline" else REPO
            proc = subprocess.Popen(
                [sys.executable, "-m", "gpuwatch", "gate", "--upstream", f"http://127.0.0.1:{up}",
                 "--listen", f"127.0.0.1:{ports[mode]}", "--config", str(config),
                 "--state-file", str(tmp / f"state-{mode}.json"), *otlp],
                stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree,
            )  # fmt: skip
            procs.append(proc)
            gates[mode] = psutil.Process(proc.pid)
        for port in (up, receiver_port, *ports.values()):
            wait_port(port, timeout=60)  # a loaded machine starts them slowly
        urls = {m: f"http://127.0.0.1:{p}/v1/completions" for m, p in ports.items()}
        rounds: list[dict[str, dict[str, float]]] = []
        latencies: list[dict[str, list[float]]] = []
        answered_on = 0
        for _ in range(args.repeat):
            numbers: dict[str, dict[str, float]] = {}
            for mode, url in urls.items():
                row: dict[str, float] = {}
                for kind, body in (("short", SHORT), ("stream", STREAMED)):
                    wrk(url, 2, body)  # warm-up
                    before = cpu_s(gates[mode])
                    rate = wrk(url, args.seconds, body)
                    used = cpu_s(gates[mode]) - before
                    row[f"{kind} rps"] = rate
                    row[f"{kind} cpu"] = used / (rate * args.seconds) * 1e6
                    if mode in ("on", "baseline"):
                        answered_on += int(rate * args.seconds)
                numbers[mode] = row
            rounds.append(numbers)
            # At a fixed 200 requests/s every gate does the same work per second: its CPU per
            # request is not moved by how much of the 2 cores the receiver takes from wrk's run.
            fixed: dict[str, list[float]] = {}
            for mode, url in urls.items():
                before = cpu_s(gates[mode])
                fixed[mode] = asyncio.run(fixed_rate(url, 200, args.seconds, False))
                sent = len(fixed[mode]) + 20  # fixed_rate's warm-up requests too
                numbers[mode]["fixed cpu"] = (cpu_s(gates[mode]) - before) / sent * 1e6
            latencies.append(fixed)
        # What the receiver got once the batch processor's last batch (1 s schedule) is in.
        spans = spans_received(receiver_port)
    finally:
        # The gates first: each sends what it holds on the way out, to a receiver still up.
        for proc in reversed(procs):
            stop_process(proc)
    print(f"sample_ratio {args.sample_ratio:g}")
    report(rounds, latencies, args.seconds, spans, answered_on)
    on_path, encoding, sdk_encoding = parts(args.sample_ratio)
    print(f"export's parts, in-process: {on_path:.0f} us per request on the request path "
          f"(span hooks and metrics), {encoding:.0f} us per recorded span in the export "
          f"thread (encoding; the SDK's encoder: {sdk_encoding:.0f} us): "
          f"{on_path + args.sample_ratio * encoding:.0f} us per request against the "
          f"{med_off_cpu(rounds):.0f} us of a short request with export off")  # fmt: skip


def med_off_cpu(rounds: list[dict[str, dict[str, float]]]) -> float:
    return statistics.median(r["off"]["short cpu"] for r in rounds)


def report(
    rounds: list[dict[str, dict[str, float]]],
    latencies: list[dict[str, list[float]]],
    seconds: int,
    spans: int,
    answered_on: int,
) -> None:
    def med(mode: str, key: str) -> float:
        return statistics.median(r[mode][key] for r in rounds)

    modes = tuple(rounds[0])
    base = "baseline" in modes
    print(f"{len(rounds)} round(s) of {seconds} s each, medians; export off / on (a live "
          "receiver) / dead (nothing listens)"
          + (" / baseline (--baseline's code, export on)" if base else ""))  # fmt: skip
    print(f"{'':34}" + "".join(f"{m:>10}" for m in modes) + "   on/off"
          + (" base/off" if base else ""))  # fmt: skip
    for key, label in (("short rps", "short requests/s (64 conn)"),
                       ("short cpu", "gate CPU per short request (us)"),
                       ("stream rps", "streamed requests/s (32 chunks)"),
                       ("stream cpu", "gate CPU per streamed request (us)"),
                       ("fixed cpu", "gate CPU per request at 200/s (us)")):  # fmt: skip
        cells = "".join(f"{med(m, key):>10.0f}" for m in modes)
        was = f"   {med('baseline', key) / med('off', key) - 1:>+6.1%}" if base else ""
        goal = "   (goal <= +10%)" if key.endswith("cpu") else ""
        print(f"{label:34}{cells}   {med('on', key) / med('off', key) - 1:>+6.1%}{was}{goal}")
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        value = {m: statistics.median(pct(r[m], q) for r in latencies) for m in modes}
        cells = "".join(f"{value[m] * 1000:>8.2f}ms" for m in modes)
        added = (value["on"] - value["off"]) * 1000
        print(f"{'latency ' + name + ' at 200 req/s':34}{cells}   {added:>+5.2f} ms")
    print(f"spans the receiver decoded: {spans} for about {answered_on} wrk requests with "
          "export on (plus warm-ups and the fixed-rate runs)")  # fmt: skip


if __name__ == "__main__":
    main()
