"""A real container, where this machine can run one: its process is found in it, by ID and by
the name its runtime gives. Skipped, with the reason, where no Docker or Podman daemon answers
or no image is there to start (these machines reach no registry)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest

from gpuwatch.sources.containers import ContainerNames, default_sockets
from gpuwatch.sources.host import ProcessTable


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def _runtime() -> tuple[str, str]:
    """(client, a local image with a shell), or skip saying why not."""
    reasons = []
    for client in ("docker", "podman"):
        if shutil.which(client) is None:
            reasons.append(f"no {client} client")
            continue
        info = _run(client, "info", "--format", "{{.ServerVersion}}")
        if info.returncode != 0:
            first = (info.stderr.strip().splitlines() or ["no answer"])[0]
            reasons.append(f"{client}: no daemon answers ({first})")
            continue
        images = _run(client, "image", "ls", "--format", "{{.Repository}}:{{.Tag}}")
        local = [i for i in images.stdout.split() if not i.endswith(":<none>")]
        if not local:
            reasons.append(f"{client}: no local image to start, and no registry to pull from")
            continue
        return client, local[0]
    pytest.skip("cannot run a container here: " + "; ".join(reasons))


@pytest.fixture
def container() -> Iterator[tuple[str, int, str]]:
    client, image = _runtime()
    started = _run(client, "run", "-d", "--name", "gpuwatch-test-ctr", image, "sleep", "120")
    if started.returncode != 0:
        pytest.skip(f"{client} could not start {image}: {started.stderr.strip()[:200]}")
    cid = started.stdout.strip()
    try:
        pid = int(_run(client, "inspect", "--format", "{{.State.Pid}}", cid).stdout)
        yield client, pid, cid
    finally:
        _run(client, "rm", "-f", cid)


def test_a_real_containers_process_is_named(container: tuple[str, int, str]) -> None:
    client, pid, cid = container
    info = ProcessTable(ContainerNames(sockets=default_sockets())).describe(pid)
    assert info.container is not None and info.container.id == cid
    assert info.container.runtime == client
    # Named when this user may open the daemon's socket, as the client just did.
    assert info.container.name == "gpuwatch-test-ctr"
