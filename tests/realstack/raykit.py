"""A real Ray Serve for tests (PyPI ``ray[serve]``, on CPU): one cluster per test session.

``ray start --head`` as operators start it (its defaults, but ports picked free and a temp dir
of its own, so two test sessions on one machine do not meet), then the dashboard's
``PUT /api/serve/applications/`` of a config with TWO applications: ``llm``, a deployment that
forwards to a ``gpuwatch sim``, and ``other``, an unrelated one. ``RayServe.reset()`` puts that
config back, so each test starts from it. At the end the cluster is stopped by ending the
``ray start --block`` process and then every process left in its session (by process id, never
``ray stop``, which would end any other Ray on the machine).

Tests under tests/realstack/ get the ``ray_serve`` fixture from its conftest: a test module must
not import the fixture itself (a fixture imported into a module is that module's own, and a
session-scoped one would then start a second cluster).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.functional.fleetkit import child
from tests.helpers import eventually_sync, stop_process

ROOT = Path(__file__).resolve().parent.parent.parent
APPS = "/api/serve/applications/"
START_S = 120.0  # `ray start` alone takes ~20 s on 2 busy cores


def _ray() -> str:
    # Found, not imported: importing Ray costs seconds and warnings; its CLI runs it.
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CI"):
            pytest.fail("ray[serve] is not installed: the dev extras must bring it in CI")
        pytest.skip("ray[serve] is not installed (pip install -e '.[dev]' brings it)")
    return str(Path(sys.executable).with_name("ray"))


def _free_ports(n: int) -> list[int]:
    # Bound together so they differ; freed just before Ray binds them (a small race that only
    # another process picking the same free port in that instant could lose).
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def base_config(sim: str, serve_port: int) -> dict[str, Any]:
    """The declarative config the tests start from (Ray's ServeDeploySchema)."""
    return {
        "http_options": {"host": "127.0.0.1", "port": serve_port},
        "applications": [
            {
                "name": "llm",
                "route_prefix": "/",
                "import_path": "tests.realstack.rayapp:forward",
                "args": {"upstream": sim},
                "deployments": [{"name": "Forward", "num_replicas": 1, "max_ongoing_requests": 8}],
            },
            {
                "name": "other",
                "route_prefix": "/other",
                "import_path": "tests.realstack.rayapp:echo",
                "deployments": [
                    {"name": "Echo", "max_ongoing_requests": 3, "user_config": {"greeting": "hi"}}
                ],
            },
        ],
    }


@dataclass
class RayServe:
    dashboard: str  # the dashboard (Serve's REST API): http://127.0.0.1:PORT
    serve: str  # Serve's HTTP proxy (the applications' routes)
    metrics: str  # this node's Prometheus page (Ray's metrics export port)
    sim: str  # the simulator `llm` forwards to
    config: dict[str, Any] = field(default_factory=dict)

    def details(self) -> dict[str, Any]:
        """Ray's own answer (ServeInstanceDetails) now."""
        r = httpx.get(self.dashboard + APPS, timeout=10, trust_env=False)
        r.raise_for_status()
        answer: dict[str, Any] = r.json()
        return answer

    def metric(self, name: str, **labels: str) -> list[float]:
        """The samples of ``name`` on Ray's metrics page whose labels include ``labels``."""
        r = httpx.get(self.metrics, timeout=10, trust_env=False)
        r.raise_for_status()
        return [
            s.value
            for family in text_string_to_metric_families(r.text)
            for s in family.samples
            if s.name == name and labels.items() <= s.labels.items()
        ]

    def deployment(self, app: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.details()["applications"][app]["deployments"][name]
        return found

    def put(self, config: dict[str, Any]) -> None:
        r = httpx.put(self.dashboard + APPS, json=config, timeout=30, trust_env=False)
        assert r.status_code == 200, r.text

    def running(self) -> bool:
        """Every application of the config RUNNING, with the values the config sets."""
        try:
            apps = self.details()["applications"]
        except httpx.HTTPError:
            return False
        for app in self.config["applications"]:
            got = apps.get(app["name"])
            if got is None or got["status"] != "RUNNING":
                return False
            for d in app["deployments"]:
                in_force = got["deployments"][d["name"]]["deployment_config"]
                if any(in_force.get(k) != v for k, v in d.items() if k != "name"):
                    return False
        return True

    def reset(self) -> None:
        """The base config back in force (a test's changes undone)."""
        self.put(self.config)
        eventually_sync(self.running, 60, message=lambda: f"Ray did not settle: {self.details()}")


def _session_processes(sid: int) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (OSError, psutil.Error):
            continue
    return out


def _stop_cluster(head: subprocess.Popen[bytes]) -> None:
    """Every process of the cluster's session (``ray start`` and all it started, the workers
    too) asked to end, and killed by process id if it has not within 5 s."""
    sid = head.pid  # start_new_session: the session's id is the head's pid
    procs = _session_processes(sid)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=5)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    stop_process(head)  # reaped
    left = _session_processes(sid)
    assert not left, f"Ray left processes behind: {[p.pid for p in left]}"


@contextlib.contextmanager
def ray_serve_cluster() -> Iterator[RayServe]:
    ray = _ray()
    # Sockets live under the temp dir: a short path (the limit on a socket's path is 107).
    temp = tempfile.mkdtemp(prefix="gwray", dir="/tmp")
    gcs, dashboard, client, agent, metrics, serve = _free_ports(6)
    # Metrics reported each second (Ray's default is 10 s), so a test sees a gauge move soon.
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_metrics_report_interval_ms": "1000",
    }
    log = open(Path(temp) / "ray-start.log", "wb")  # noqa: SIM115 - closed below
    head = subprocess.Popen(
        [
            ray, "start", "--head", "--block", f"--port={gcs}",
            "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
            f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent}",
            f"--metrics-export-port={metrics}", f"--temp-dir={temp}", "--disable-usage-stats",
        ],
        env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    sim_proc = None
    try:
        # Started while Ray starts: `llm` forwards to it.
        sim_proc, sim = child("sim", "--time-scale", "1", "--served-model-name", "sim-model")
        rs = RayServe(
            f"http://127.0.0.1:{dashboard}",
            f"http://127.0.0.1:{serve}",
            f"http://127.0.0.1:{metrics}/metrics",
            sim,
            base_config(sim, serve),
        )

        def up() -> bool:
            if head.poll() is not None:
                return True
            try:
                return httpx.get(rs.dashboard + APPS, timeout=2, trust_env=False).is_success
            except httpx.HTTPError:
                return False

        eventually_sync(up, START_S, message="Ray's dashboard did not answer")
        if head.poll() is not None:
            pytest.fail(f"ray start ended: {(Path(temp) / 'ray-start.log').read_text()[-3000:]}")
        rs.reset()
        yield rs
    finally:
        stop_process(sim_proc)
        try:
            _stop_cluster(head)
        finally:
            log.close()
            shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_serve() -> Iterator[RayServe]:
    """One Ray Serve cluster for the whole test session, with the two applications."""
    with ray_serve_cluster() as rs:
        yield rs
