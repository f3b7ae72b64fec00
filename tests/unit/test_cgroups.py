"""The container (and pod) in ``/proc/PID/cgroup`` for each runtime's layout, v1 and v2."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.model import ContainerInfo
from gpuwatch.sources.cgroups import container_in_path, container_of

FIXTURES = Path(__file__).parent.parent / "fixtures" / "cgroup"
DOCKER = "4a1fd0c39e2b7786c5a1e0d93f6b2c4178e5d0a9b3c6f1e2d8a7b4c5e6f70812"
PODMAN = "9e3c77b1d04a5f26e8b1c3d5a7f90e12b4c6d8e0f1a3b5c7d9e1f3a5b7c9d0e2"
CONTAINERD = "c0ffee5a1d2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5"
CRIO = "7b2e6f01a9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2"
BARE = "5d4c3b2a19f8e7d6c5b4a3928170f6e5d4c3b2a19f8e7d6c5b4a3928170f6e5d"
POD = "1f6a8e2c-3b4d-4e5f-8a9b-0c1d2e3f4a5b"

EXPECTED: dict[str, ContainerInfo | None] = {
    "docker-cgroupfs-v1": ContainerInfo(DOCKER, "docker"),
    "docker-systemd-v2": ContainerInfo(DOCKER, "docker"),
    "docker-hybrid": ContainerInfo(DOCKER, "docker"),
    "docker-in-docker-v2": ContainerInfo(DOCKER, "docker"),  # the inner one
    "docker-kubepods-systemd-v2": ContainerInfo(DOCKER, "docker", pod_uid=POD),
    "podman-rootful-v2": ContainerInfo(PODMAN, "podman"),
    "podman-rootless-v2": ContainerInfo(PODMAN, "podman"),
    "podman-cgroupfs-v1": ContainerInfo(PODMAN, "podman"),
    "podman-conmon-v2": None,
    "containerd-kubepods-systemd-v2": ContainerInfo(CONTAINERD, "containerd", pod_uid=POD),
    "containerd-kubepods-guaranteed-v2": ContainerInfo(CONTAINERD, "containerd", pod_uid=POD),
    "containerd-nerdctl-v2": ContainerInfo(CONTAINERD, "containerd"),
    "crio-kubepods-systemd-v1": ContainerInfo(CRIO, "cri-o", pod_uid=POD),
    "crio-conmon-v2": None,
    "kubepods-cgroupfs-v1": ContainerInfo(BARE, None, pod_uid=POD),
    "host-session-v1": None,
    "host-session-v2": None,
    "private-namespace-v2": None,
}


def test_every_fixture_has_an_expectation() -> None:
    assert {p.stem for p in FIXTURES.glob("*.cgroup")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_runtimes_layout(name: str) -> None:
    assert container_of((FIXTURES / f"{name}.cgroup").read_text()) == EXPECTED[name]


def test_labels_name_then_pod_then_short_id() -> None:
    assert ContainerInfo(DOCKER, "docker").label == DOCKER[:12]
    assert ContainerInfo(DOCKER, "docker", name="vllm").label == "vllm"
    assert ContainerInfo(BARE, None, pod_uid=POD).label == f"pod 1f6a8e2c/{BARE[:12]}"
    named = ContainerInfo(BARE, None, name="server", pod_uid=POD, pod_name="llm-0")
    assert named.label == "llm-0/server"


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/",
        f"/{BARE}",  # hex, but in no runtime's directory and no pod
        f"/system.slice/docker-{DOCKER[:63]}.scope",  # one digit short
        f"/system.slice/docker-{DOCKER.upper()}.scope",  # IDs are lower-case hex
        "/kubepods/burstable/podnot-a-uid/" + BARE,
        "/../" * 1000,
    ],
)
def test_paths_that_name_no_container(path: str) -> None:
    assert container_in_path(path) is None


def test_garbage_lines_are_skipped() -> None:
    text = "no colons here\n\x00\x01:\n" + (FIXTURES / "docker-systemd-v2.cgroup").read_text()
    assert container_of(text) == ContainerInfo(DOCKER, "docker")
