"""`gpuwatch snapshot`'s plain table: whole names when piped, fitted and coloured on a terminal."""

from __future__ import annotations

import datetime as dt
import io

import pytest

from gpuwatch.model import EngineSnapshot, HostSample, ScrapeResult
from gpuwatch.snapshot import Snapshot, render_text

MODEL = "meta-llama/Llama-3.1-70B-Instruct-with-a-long-adapter-name"
SOURCE = "http://inference-node-17.example.internal:8000/metrics"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def snap() -> Snapshot:
    engine = EngineSnapshot(SOURCE, "vllm", MODEL, running=3, waiting=1)
    results = [
        ScrapeResult(SOURCE, [engine]),
        ScrapeResult("http://dead:1/metrics", error="refused"),
    ]
    host = HostSample(1.0, [1.0], 0.1, 0.1, 0.1, 1, 1, 0, 0)
    return Snapshot(dt.datetime.now(dt.timezone.utc), None, host, None, results)


def test_piped_output_keeps_every_name_whole_and_plain() -> None:
    out = io.StringIO()
    render_text(snap(), out)
    text = out.getvalue()
    header, row = text.splitlines()[1:3]
    assert header.split() == [
        *["source", "dialect", "model", "run", "wait", "KV", "prefix", "prompt", "tok"],
        *["gen", "tok", "TTFT", "p50*", "TTFT", "p99*", "ITL", "p99*"],
    ]
    assert row.split()[:5] == [SOURCE, "vllm", MODEL, "3", "1"]
    # Columns line up: each cell starts where its header does.
    assert row.index(MODEL) == header.index("model") and row.index(" 3 ") + 1 == header.index("run")
    assert "error: http://dead:1/metrics: refused" in text.splitlines()
    assert "\x1b" not in text


def test_a_terminal_gets_the_table_fitted_to_its_width_and_errors_in_red(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    out = Terminal()
    render_text(snap(), out)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 120 for line in lines[1:3]), lines
    assert MODEL not in lines[2] and MODEL[:10] in lines[2] and "..." in lines[2]
    assert "\x1b[31merror:\x1b[0m http://dead:1/metrics: refused" in lines
    monkeypatch.setenv("NO_COLOR", "1")
    plain = Terminal()
    render_text(snap(), plain)
    assert "\x1b" not in plain.getvalue()
