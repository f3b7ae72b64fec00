"""A small fleet for tests: a real Prometheus (1 s scrapes) over three ``gpuwatch sim`` (one with
``--engines 2``) and two ``gpuwatch gate``, each a child process, with load through both gates
and straight into the third node; node b's GPUs are a DCGM exporter's page. Targets carry a
``node`` label, as operators relabel them.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.helpers import eventually_sync, refusing_port


@dataclass
class Fleet:
    prometheus: str
    sims: dict[str, str]  # node -> base URL (a fourth node, "d", is down: nothing listens)
    gates: dict[str, str]  # node -> base URL
    config: Path  # a gpuwatch config with [prometheus] and [gates."127.0.0.1:*"]
    root: Path
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def query(self, expr: str, at: float) -> list[tuple[dict[str, str], float]]:
        r = httpx.get(
            f"{self.prometheus}/api/v1/query", params={"query": expr, "time": f"{at:.3f}"}
        )
        r.raise_for_status()
        return [(i["metric"], float(i["value"][1])) for i in r.json()["data"]["result"]]


def child(*args: str) -> tuple[subprocess.Popen[str], str]:
    """A gpuwatch child on a port it picks; its URL from the first line it prints."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", *args, "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"http://[0-9.]+:[0-9]+", line)
    assert found, (line, proc.stderr.read() if proc.stderr else "")
    return proc, found.group(0)


DCGM_PAGE = Path(__file__).parent.parent / "fixtures" / "dcgm"


def _dcgm_exporter() -> tuple[subprocess.Popen[str], str]:
    """The fixture folder served over HTTP: its file ``metrics`` is the page at /metrics."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
         "--directory", str(DCGM_PAGE)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"port ([0-9]+)", line)
    assert found, line
    return proc, f"http://127.0.0.1:{found.group(1)}"


def _prometheus(
    root: Path, targets: dict[str, dict[str, str]]
) -> tuple[subprocess.Popen[str], str]:
    jobs = []
    for job, by_node in targets.items():
        statics = "\n".join(
            f"      - targets: ['{url.split('://')[1]}']\n        labels: {{node: '{node}'}}"
            for node, url in by_node.items()
        )
        jobs.append(f"  - job_name: {job}\n    static_configs:\n{statics}")
    # An alert that always fires, so the events panel has Prometheus' own alert to show.
    (root / "rules.yml").write_text(
        "groups:\n  - name: fleet-test\n    rules:\n      - alert: FleetTestAlwaysFiring\n"
        "        expr: vector(1)\n        labels: {severity: page}\n"
    )
    config = "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
    config += f"rule_files: ['{root / 'rules.yml'}']\n"
    config += "scrape_configs:\n" + "\n".join(jobs) + "\n"
    (root / "prometheus.yml").write_text(config)
    return start_prometheus(root)


def start_prometheus(root: Path) -> tuple[subprocess.Popen[str], str]:
    """Prometheus on ``root/prometheus.yml`` and ``root/data``, and its URL."""
    return start_on_a_free_port(
        "prometheus",
        lambda port: [
            "prometheus", f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
        ],
    )  # fmt: skip


def start_on_a_free_port(
    name: str, command: Callable[[int], list[str]]
) -> tuple[subprocess.Popen[str], str]:
    """A server (Prometheus, Alertmanager) that cannot report a port it picked itself: tried
    on random ports until one is ours; ready when its ``/-/ready`` answers 200."""
    rng = random.Random()
    for _ in range(20):
        port = rng.randint(20000, 60000)
        proc = subprocess.Popen(
            command(port), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        url = f"http://127.0.0.1:{port}"

        def ready(url: str = url, proc: subprocess.Popen[str] = proc) -> bool:
            if proc.poll() is not None:
                return True
            try:
                return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        eventually_sync(ready, 60, message=f"{name} did not become ready")
        if proc.poll() is None:
            return proc, url
        err = proc.stderr.read() if proc.stderr else ""
        assert "address already in use" in err, err[-2000:]
    pytest.fail(f"no free port for {name} after 20 tries")


@contextmanager
def fleet(root: Path) -> Iterator[Fleet]:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not installed (Debian package prometheus; .ci/run installs it)")
    procs: list[subprocess.Popen[str]] = []
    stack = ExitStack()
    try:
        sims, gates = {}, {}
        for node, engines, model in (("a", 1, "m-one"), ("b", 2, "m-two"), ("c", 1, "m-one")):
            proc, sims[node] = child(
                "sim", "--time-scale", "10", "--engines", str(engines), "--seed", str(len(sims)),
                "--served-model-name", model,
            )  # fmt: skip
            procs.append(proc)
        for node in ("a", "b"):
            proc, gates[node] = child(
                "gate", "--upstream", sims[node], "--state-file", str(root / f"gate-{node}.json")
            )
            procs.append(proc)
        for url in (gates["a"], gates["b"], sims["c"]):
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "gpuwatch",
                        "load",
                        "--url",
                        url,
                        "--duration",
                        "900",
                        "--rate",
                        "6",
                        "--prompt-tokens",
                        "64:512",
                        "--output-tokens",
                        "32:128",
                        "--quiet",
                        "--api",
                        "completions",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
        # Node b's GPUs: a DCGM exporter's page (tests/fixtures/dcgm/metrics) served as it.
        dcgm, dcgm_url = _dcgm_exporter()
        procs.append(dcgm)
        # A node that is down: Prometheus scrapes it and reports its own lastError.
        dead = stack.enter_context(refusing_port())
        targets = {
            "sim": sims,
            "gate": gates,
            "dcgm": {"b": dcgm_url},
            "dead": {"d": f"http://127.0.0.1:{dead}"},
        }
        prom, prom_url = _prometheus(root, targets)
        procs.append(prom)
        config = root / "gpuwatch.toml"
        config.write_text(
            f'[prometheus]\nurl = "{prom_url}"\n\n[gates."127.0.0.1:*"]\nadmin = "http://{{instance}}"\n'
        )
        f = Fleet(prom_url, sims, gates, config, root, procs)

        def scraped() -> bool:
            # Every target up with five scrapes in, and requests served on every engine: every
            # rate and quantile has an answer a few seconds back as well as now.
            up = f.query("count_over_time(up[1m]) >= 5", _now())
            rated = f.query("rate(vllm:time_to_first_token_seconds_count[1m]) > 0", _now())
            alerts = f.query('ALERTS{alertstate="firing"}', _now())
            return len(up) == 7 and len(rated) == 4 and alerts

        eventually_sync(scraped, 60, message="prometheus never saw the whole fleet serving")
        yield f
    finally:
        stack.close()
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _now() -> float:
    import time

    return time.time()
