"""Containers named through real HTTP on unix sockets: a Docker-compatible API server (the
subset gpuwatch asks, ``GET /containers/<id>/json``) stands in for dockerd and Podman, whose
daemons cannot run here; the processes' ``/proc/PID/cgroup`` are the runtime fixtures in a
proc tree of the test's own. ``tests/functional/test_real_container.py`` asks a real daemon
where one runs."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from gpuwatch.model import ContainerInfo
from gpuwatch.sources.containers import ContainerNames
from gpuwatch.sources.host import ProcessTable
from gpuwatch.sources.nvml import FakeNvml, NvmlReader
from tests.functional.servers import ThreadedServer
from tests.unit.test_cgroups import BARE, CONTAINERD, DOCKER, FIXTURES, POD, PODMAN

HIDDEN_PID = 2**22 + 4711  # over Linux's largest pid_max: never a process here


class Runtime:
    """A Docker-compatible API on a unix socket answering ``containers`` by ID; counts asks."""

    def __init__(self, path: str, containers: dict[str, dict[str, object]]) -> None:
        self.asked: Counter[str] = Counter()
        self.containers = containers
        self.server = ThreadedServer({"/containers/{id}/json": self._inspect}, unix_path=path)

    async def _inspect(self, request: web.Request) -> web.Response:
        cid = request.match_info["id"]
        self.asked[cid] += 1
        if cid not in self.containers:
            return web.json_response({"message": f"No such container: {cid}"}, status=404)
        answer = self.containers[cid]
        if isinstance(answer.get("raw"), bytes):
            return web.Response(body=answer["raw"], content_type="application/json")
        return web.json_response(answer)


@pytest.fixture
def root() -> Iterator[Path]:
    # A short path: a unix socket's path is limited to about 100 bytes.
    path = Path(tempfile.mkdtemp(prefix="gw-ctr-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def proc(root: Path, pid: int, fixture: str, environ: bytes | None = None) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text((FIXTURES / f"{fixture}.cgroup").read_text())
    if environ is not None:
        (d / "environ").write_bytes(environ)


def test_names_from_docker_podman_and_the_kubelet(root: Path) -> None:
    proc(root, 101, "docker-systemd-v2")
    proc(root, 102, "podman-rootless-v2")
    proc(root, 103, "containerd-kubepods-systemd-v2")
    proc(root, 104, "kubepods-cgroupfs-v1", environ=b"PATH=/bin\0HOSTNAME=embed-7f9c\0")
    proc(root, 105, "host-session-v2")
    pods = root / "pods" / POD
    pods.mkdir(parents=True)
    # The kubelet's hosts file for the pod: its last entry is the pod's IP and hostname.
    (pods / "etc-hosts").write_text(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n10.1.2.3\tllm-server-0\n"
    )
    docker = Runtime(str(root / "docker.sock"), {DOCKER: {"Id": DOCKER, "Name": "/vllm"}})
    podman = Runtime(str(root / "podman.sock"), {PODMAN: {"Id": PODMAN, "Name": "notebook"}})
    with docker.server, podman.server:
        names = ContainerNames(
            proc_root=str(root / "proc"),
            kubelet_pods=str(root / "pods"),
            sockets={"docker": [docker.server.unix_path or ""],
                     "podman": [str(root / "absent.sock"), podman.server.unix_path or ""]},
        )  # fmt: skip
        for _ in range(3):  # asked once per container, then from the cache
            assert names.of(101) == ContainerInfo(DOCKER, "docker", name="vllm")
            assert names.of(102) == ContainerInfo(PODMAN, "podman", name="notebook")
            assert names.of(103) == ContainerInfo(
                CONTAINERD, "containerd", pod_uid=POD, pod_name="llm-server-0"
            )
            assert names.of(105) is None
            assert names.of(999) is None  # no such process
        assert docker.asked == {DOCKER: 1} and podman.asked == {PODMAN: 1}
        # containerd has no API to ask without credentials: neither socket was asked for it.
        assert CONTAINERD not in docker.asked + podman.asked
        # A bare ID in a pod could be any runtime's: both were asked, neither knew it. Its pod
        # (the same UID as 103's) is named already, from the kubelet's file.
        found = names.of(104)
        assert found is not None and (found.id, found.runtime) == (BARE, None)
        assert found.pod_name == "llm-server-0" and found.label == f"llm-server-0/{BARE[:12]}"
        assert docker.asked[BARE] == 1 and podman.asked[BARE] == 1


def test_a_pod_named_by_its_environment_when_the_kubelet_has_no_directory(root: Path) -> None:
    proc(root, 104, "kubepods-cgroupfs-v1", environ=b"PATH=/bin\0HOSTNAME=embed-7f9c\0")
    names = ContainerNames(proc_root=str(root / "proc"), kubelet_pods=str(root / "no"), sockets={})
    found = names.of(104)
    assert found is not None and found.pod_name == "embed-7f9c"
    assert found.label == f"embed-7f9c/{BARE[:12]}"


def test_kubernetes_labels_of_a_docker_container(root: Path) -> None:
    proc(root, 106, "docker-kubepods-systemd-v2")
    labels = {"io.kubernetes.container.name": "server", "io.kubernetes.pod.name": "llm-1"}
    docker = Runtime(
        str(root / "d.sock"),
        {DOCKER: {"Name": "/k8s_server_llm-1_default_x_0", "Config": {"Labels": labels}}},
    )
    with docker.server:
        names = ContainerNames(
            proc_root=str(root / "proc"), sockets={"docker": [str(root / "d.sock")]}
        )
        found = names.of(106)
    assert found is not None and found.label == "llm-1/server" and found.pod_uid == POD


@pytest.mark.parametrize(
    "answer",
    [
        {"raw": b"<html>not json"},
        {"raw": b"[1, 2]"},
        {"raw": b'{"Name": ' + b'"' + b"x" * (2 * 1024 * 1024) + b'"}'},
        {"Name": 5, "Config": {"Labels": ["not", "a", "map"]}},
        {"Name": "/\x1b[2Jevil"},
    ],
    ids=["html", "list", "2 MB", "wrong types", "escape"],
)
def test_a_bad_answer_names_nothing_and_logs_once(
    root: Path, answer: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    proc(root, 101, "docker-systemd-v2")
    docker = Runtime(str(root / "d.sock"), {DOCKER: answer})
    caplog.set_level(logging.WARNING, "gpuwatch.containers")
    with docker.server:
        names = ContainerNames(
            proc_root=str(root / "proc"), sockets={"docker": [str(root / "d.sock")]}
        )
        found = names.of(101)
    assert found is not None and found.id == DOCKER
    if answer.get("Name") == "/\x1b[2Jevil":
        # A name is the runtime's to give: kept (the screen shows it as plain text).
        assert found.name == "\x1b[2Jevil"
        return
    assert found.name is None and found.label == DOCKER[:12]
    warnings = [r for r in caplog.records if r.name == "gpuwatch.containers"]
    assert len(warnings) == (0 if "Name" in answer else 1)


def test_a_dead_socket_is_one_log_line(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    proc(root, 101, "docker-systemd-v2")
    dead = root / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(dead))  # bound, never listening: connections are refused
    caplog.set_level(logging.WARNING, "gpuwatch.containers")
    clock = [0.0]
    names = ContainerNames(
        proc_root=str(root / "proc"), sockets={"docker": [str(dead)]}, clock=lambda: clock[0]
    )
    try:
        for _ in range(3):
            found = names.of(101)
            assert found is not None and found.name is None
            clock[0] += 61.0  # past the retry interval: asked again, not logged again
    finally:
        s.close()
    assert len([r for r in caplog.records if r.name == "gpuwatch.containers"]) == 1


def test_gpu_processes_carry_their_container_and_a_hidden_pid_is_kept(root: Path) -> None:
    """Through NvmlReader: a real child process whose cgroup reads as a Docker container's,
    and a pid NVML lists that has no /proc entry here."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc(root, child.pid, "docker-systemd-v2")
        docker = Runtime(str(root / "d.sock"), {DOCKER: {"Name": "/vllm"}})
        with docker.server:
            table = ProcessTable(
                ContainerNames(
                    proc_root=str(root / "proc"), sockets={"docker": [str(root / "d.sock")]}
                )
            )
            state = {
                "gpus": [
                    {
                        "memory_total": 80 * 2**30,
                        "memory_used": 60 * 2**30,
                        "processes": [
                            {"pid": child.pid, "used_memory": 40 * 2**30},
                            {"pid": HIDDEN_PID, "used_memory": 20 * 2**30},
                        ],
                    }
                ]
            }
            [gpu] = NvmlReader(FakeNvml(state), processes=table).read().gpus
    finally:
        child.kill()
        child.wait()
    mine, hidden = gpu.processes
    assert mine.container == ContainerInfo(DOCKER, "docker", name="vllm") and mine.visible
    assert mine.name and "python" in mine.name.lower()
    assert (hidden.pid, hidden.visible, hidden.used_memory_bytes) == (HIDDEN_PID, False, 20 * 2**30)
    assert hidden.container is None and hidden.name is None
