"""The node as an alerter: ``gpuwatch record`` with ``[alerts]`` sends the SLO's burn-rate
alert to a real Alertmanager when the simulator is overloaded, and its resolution after; the
rules ``gpuwatch rules`` writes fire in a real Prometheus on the same overload, at the same
time as the node's own evaluation.

The budget period is half a day, so the workbook's windows are 60 times shorter: the fast page
reads 1 minute and 5 seconds.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.functional.alertmanagerkit import alertmanager
from tests.functional.fleetkit import child
from tests.helpers import eventually_sync

PERIOD_DAYS = 0.5  # windows: 1m & 5s, 6m & 30s, 72m & 6m
FAST = {"alertname": "LLMTTFTErrorBudgetBurn", "long": "1m", "short": "5s"}


@pytest.fixture
def sim() -> Iterator[str]:
    proc, url = child("sim", "--time-scale", "10", "--seed", "5")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def overload(url: str, seconds: int) -> subprocess.Popen[str]:
    """Long prompts at 40 a second: far past what the simulated GPU prefills, so the queue
    grows and most first tokens come after the 1 s bucket (the bound under the 2 s target)."""
    return subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "load", "--url", url, "--rate", "40",
         "--duration", str(seconds), "--prompt-tokens", "2000", "--output-tokens", "200",
         "--api", "completions", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip


def light_load(url: str) -> subprocess.Popen[str]:
    """Short prompts at 4 a second: every first token well inside the bound."""
    return subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "load", "--url", url, "--rate", "4",
         "--duration", "120", "--prompt-tokens", "64", "--output-tokens", "16",
         "--api", "completions", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip


def test_the_node_alerts_a_real_alertmanager_firing_then_resolved(tmp_path: Path, sim: str) -> None:
    with alertmanager(tmp_path) as am:
        config = tmp_path / "gpuwatch.toml"
        config.write_text(
            f"[alerts]\nslo_period_days = {PERIOD_DAYS}\n"
            f'webhooks = ["{am.url}/api/v2/alerts"]\nrunbook_url = "https://runbooks.example/llm"\n'
        )
        recording = tmp_path / "node.db"
        record = subprocess.Popen(
            [sys.executable, "-m", "gpuwatch", "record", "--config", str(config), "--metrics",
             f"{sim}/metrics", "--no-gpu", "--out", str(recording)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        load = overload(sim, 30)
        light = None
        try:
            (alert,) = eventually_sync(
                lambda: am.alerts(**FAST), 60, message="the fast page never reached Alertmanager"
            )
            assert alert["labels"]["severity"] == "critical"
            assert alert["annotations"]["runbook_url"].endswith("#llmttfterrorbudgetburn")
            assert alert["annotations"]["recording"].startswith(f"gpuwatch replay {recording}")
            # The overload ends; light traffic is served in time: the 5 s window clears, and
            # the node sends the resolution.
            load.kill()
            light = light_load(sim)
            eventually_sync(lambda: not am.alerts(**FAST), 60, message="it never resolved")
        finally:
            for proc in (load, light):
                if proc is not None:
                    proc.kill()
                    proc.wait(10)
            record.send_signal(signal.SIGINT)
            _, err = record.communicate(timeout=20)
        assert "failed" not in err, err
