"""The container a process runs in, from the text of its ``/proc/PID/cgroup`` (pure: no I/O).

Each line of that file is ``hierarchy-id:controllers:path``; cgroup v2 has the one line
``0::path``, v1 one line per hierarchy (the paths agree for a container's process). The
runtimes put a container's processes in a cgroup whose last parts name it:

- Docker: ``/docker/<id>`` (cgroupfs driver), ``/system.slice/docker-<id>.scope`` (systemd);
- Podman: ``/machine.slice/libpod-<id>.scope`` (rootful), ``.../user@1000.service/user.slice/
  libpod-<id>.scope`` (rootless), ``/libpod_parent/libpod-<id>`` (cgroupfs), sometimes with a
  ``/container`` child under the scope; its monitor ``conmon`` sits in ``libpod-conmon-<id>``;
- containerd: ``cri-containerd-<id>.scope`` (CRI, systemd), ``nerdctl-<id>.scope``;
- CRI-O: ``crio-<id>.scope`` (systemd) or ``crio-<id>`` (cgroupfs); ``crio-conmon-<id>`` is its
  monitor;
- Kubernetes puts those under the pod's cgroup: ``/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid, "_" for "-">.slice/<scope>`` (systemd driver; guaranteed pods sit
  directly under ``kubepods.slice`` as ``kubepods-pod<uid>.slice``) or ``/kubepods/burstable/
  pod<uid>/<id>`` (cgroupfs driver: a bare ID, whatever the runtime).

Container IDs are 64 hex digits in all of them. A path that names none (a host process, or a
private cgroup namespace where a container sees only ``0::/``) is no container. A monitor
(conmon) is not the container: it holds no GPU and would wear the container's name.
"""

from __future__ import annotations

import re

from gpuwatch.model import ContainerInfo

_ID = r"(?P<id>[0-9a-f]{64})"
# A cgroup path's part that names a container, the runtime it says, or None for a bare ID.
_SCOPES: tuple[tuple[re.Pattern[str], str | None], ...] = (
    (re.compile(rf"docker-{_ID}\.scope"), "docker"),
    (re.compile(rf"libpod-{_ID}(?:\.scope)?"), "podman"),
    (re.compile(rf"cri-containerd-{_ID}\.scope"), "containerd"),
    (re.compile(rf"nerdctl-{_ID}\.scope"), "containerd"),
    (re.compile(rf"crio-{_ID}(?:\.scope)?"), "cri-o"),
    (re.compile(_ID), None),
)
# The directory a bare ID sits in names the runtime where a pod does not.
_PARENTS = {"docker": "docker", "libpod_parent": "podman"}
_POD = re.compile(
    r"(?:kubepods(?:-besteffort|-burstable)?-)?pod"
    r"(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
    r"(?:\.slice)?"
)


def container_in_path(path: str) -> ContainerInfo | None:
    """The container a cgroup path names: the innermost one (a container in a container is
    that inner one), with its pod when Kubernetes made it."""
    parts = [p for p in path.strip().split("/") if p]
    for i in range(len(parts) - 1, -1, -1):
        for pattern, runtime in _SCOPES:
            match = pattern.fullmatch(parts[i])
            if match is None:
                continue
            pod = _pod_above(parts[:i])
            if runtime is None:
                parent = parts[i - 1] if i else ""
                if pod is None and parent not in _PARENTS:
                    # A bare ID outside a pod or a runtime's own directory: some other tool's
                    # cgroup that happens to be named in hex, not a container we can name.
                    continue
                runtime = _PARENTS.get(parent)
            return ContainerInfo(id=match["id"], runtime=runtime, pod_uid=pod)
    return None


def _pod_above(parts: list[str]) -> str | None:
    for part in reversed(parts):
        match = _POD.fullmatch(part)
        if match:
            return match["uid"].replace("_", "-")
    return None


def container_of(cgroup_text: str) -> ContainerInfo | None:
    """The container that ``/proc/PID/cgroup``'s text (v1 or v2) puts the process in."""
    for line in cgroup_text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        found = container_in_path(fields[2])
        if found is not None:
            return found
    return None
