"""The node as an alerter: ``gpuwatch record`` with ``[alerts]`` sends the SLO's burn-rate
alert to a real Alertmanager when the simulator is overloaded, and its resolution after; the
rules ``gpuwatch rules`` writes fire in a real Prometheus on the same overload, at the same
time as the node's own evaluation.

The budget period is half a day, so the workbook's windows are 60 times shorter: the fast page
reads 1 minute and 5 seconds.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuwatch.record.player import Player
from tests.functional.alertmanagerkit import alertmanager
from tests.functional.fleetkit import child, start_prometheus
from tests.helpers import eventually_sync, stop_process

PERIOD_DAYS = 0.5  # windows: 1m & 5s, 6m & 30s, 72m & 6m
FAST = {"alertname": "LLMTTFTErrorBudgetBurn", "long": "1m", "short": "5s"}


@pytest.fixture
def sim() -> Iterator[str]:
    proc, url = child("sim", "--time-scale", "10", "--seed", "5")
    try:
        yield url
    finally:
        stop_process(proc)


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
            stop_process(load)
            stop_process(light)
            record.send_signal(signal.SIGINT)
            _, err = record.communicate(timeout=20)
        assert "failed" not in err, err
    # The recording holds the alert's events and the budget line as shown: a replay has them.
    player = Player(recording)
    try:
        texts = [mark.text for mark in player.marks]
        assert any(t.startswith("ALERT LLMTTFTErrorBudgetBurn critical (1m & 5s)") for t in texts)
        assert any(
            t.startswith("RESOLVED LLMTTFTErrorBudgetBurn critical (1m & 5s)") for t in texts
        )
        player.seek(player.end)
        assert player.monitor.slo_budget[0].startswith("TTFT under 2s (read at 1s): ")
    finally:
        player.close()


SCRAPE_S = 1
EVALUATION_S = 2


def prometheus_with_rules(root: Path, sim: str, rules: Path) -> tuple[subprocess.Popen[str], str]:
    host = sim.split("://")[1]
    (root / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {SCRAPE_S}s\n  evaluation_interval: {EVALUATION_S}s\n"
        f"rule_files: ['{rules}']\n"
        f"scrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: ['{host}']\n"
    )
    return start_prometheus(root)


def prometheus_fast_page(url: str) -> dict[str, Any] | None:
    r = httpx.get(f"{url}/api/v1/alerts", timeout=5)
    r.raise_for_status()
    for alert in r.json()["data"]["alerts"]:
        if all(alert["labels"].get(k) == v for k, v in FAST.items()):
            return dict(alert)
    return None


class NodeWatch:
    """``gpuwatch watch --json``: each line's time and whether the fast page fires."""

    def __init__(self, config: Path, sim: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuwatch", "watch", "--json", "--config", str(config),
             "--metrics", f"{sim}/metrics", "--no-gpu", "--interval", str(SCRAPE_S)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.lines: list[tuple[float, bool]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            frame = json.loads(line)
            fast = frame["slo_alerts"]["ttft"]["tiers"][0]
            assert (fast["long"], fast["short"]) == (FAST["long"], FAST["short"])
            self.lines.append((frame["time"], fast["firing"]))

    def first_firing(self) -> float | None:
        return next((t for t, firing in self.lines if firing), None)

    def close(self) -> None:
        stop_process(self.proc)


def test_the_rules_fire_in_prometheus_when_the_node_fires_within_an_evaluation_interval(
    tmp_path: Path, sim: str
) -> None:
    """The same overload, read by a real Prometheus running ``gpuwatch rules`` and by
    ``gpuwatch watch`` on the node: the fast page fires in both, and the instants agree within
    one of Prometheus' evaluation intervals, and the one scrape interval by which the two
    readers' samples of the simulator may be apart (on the very same samples the agreement is
    within one evaluation interval: tests/unit/test_burn.py)."""
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f"[alerts]\nslo_period_days = {PERIOD_DAYS}\n")
    rules = tmp_path / "rules.yml"
    subprocess.run(
        [sys.executable, "-m", "gpuwatch", "rules", "--config", str(config), "-o", str(rules)],
        check=True,
    )
    prom, prom_url = prometheus_with_rules(tmp_path, sim, rules)
    node = NodeWatch(config, sim)
    load = None
    try:
        # Both read the idle simulator first: neither fires on no traffic.
        eventually_sync(lambda: len(node.lines) >= 3, 30, message="watch printed nothing")
        load = overload(sim, 30)
        fired = eventually_sync(
            lambda: prometheus_fast_page(prom_url) if node.first_firing() else None,
            60,
            message=lambda: (
                f"node fired at {node.first_firing()}, prometheus {prometheus_fast_page(prom_url)}"
            ),
        )
        # Prometheus says when the alert became active: its first evaluation over the bound.
        active_at = datetime.fromisoformat(fired["activeAt"].replace("Z", "+00:00")).timestamp()
        node_at = node.first_firing()
        assert node_at is not None
        assert fired["state"] == "firing"
        assert abs(node_at - active_at) <= EVALUATION_S + SCRAPE_S, (node_at, active_at)
    finally:
        stop_process(load)
        node.close()
        stop_process(prom)
