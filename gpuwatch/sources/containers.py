"""Which container (and Kubernetes pod) a process runs in, named where the runtime says so
without credentials.

The container comes from ``/proc/PID/cgroup`` (gpuwatch/sources/cgroups.py). Its name from:

- Docker's and Podman's local API sockets, when this user may open them (``GET
  /containers/<id>/json``, the Docker-compatible API both serve); a container that Kubernetes
  made through Docker carries its pod and container names in its ``io.kubernetes.*`` labels;
- for a pod: the kubelet's pod directory (``/var/lib/kubelet/pods/<uid>/etc-hosts``, whose last
  line is the pod's IP and hostname, the pod's name unless its spec sets another), else the
  process's own environment (``HOSTNAME``, which Kubernetes sets to the same).

Else the table shows the short ID. A socket or file that cannot be read is skipped: no name,
one log line per socket, the reading goes on. Names are cached per container ID (a failed
lookup is tried again after a minute: a container may be asked about before its runtime
answers for it), so a poll costs one read of ``/proc/PID/cgroup`` per new process.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from gpuwatch.httpclient import unix_client
from gpuwatch.model import ContainerInfo
from gpuwatch.safejson import JSONError, loads_bounded
from gpuwatch.sources.cgroups import container_of

log = logging.getLogger("gpuwatch.containers")

RETRY_UNNAMED_S = 60.0
LOOKUP_TIMEOUT_S = 0.25
_MAX_INSPECT_BYTES = 1024 * 1024  # an inspect answer is a few KB; a runaway one is refused
_MAX_CACHED = 1024  # IDs remembered; past it the cache starts again (containers come and go)
_MAX_NAME = 253  # a DNS name's limit, which Kubernetes holds pod names to


def default_sockets() -> dict[str, list[str]]:
    """Where Docker and Podman (rootful, then this user's rootless one) listen by default."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return {
        "docker": ["/var/run/docker.sock"],
        "podman": ["/run/podman/podman.sock", f"{runtime_dir}/podman/podman.sock"],
    }


class ContainerNames:
    """``of(pid)``: the process's container with the names found for it, or None."""

    def __init__(
        self,
        proc_root: str = "/proc",
        kubelet_pods: str = "/var/lib/kubelet/pods",
        sockets: Mapping[str, Sequence[str]] | None = None,
        timeout_s: float = LOOKUP_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.proc_root = Path(proc_root)
        self.kubelet_pods = Path(kubelet_pods)
        self.sockets = default_sockets() if sockets is None else sockets
        self.timeout_s = timeout_s
        self.clock = clock
        # container ID -> (asked at, (name, pod name) from the runtime, or None)
        self._names: dict[str, tuple[float, tuple[str | None, str | None] | None]] = {}
        self._pods: dict[str, str | None] = {}  # pod UID -> name (None: nothing told it)
        self._failed_sockets: set[str] = set()

    def of(self, pid: int) -> ContainerInfo | None:
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text(errors="replace")
        except OSError:
            return None
        found = container_of(text)
        if found is None:
            return None
        name, pod_name = self._runtime_names(found) or (None, None)
        if found.pod_uid is not None and pod_name is None:
            pod_name = self._pod_name(found.pod_uid, pid)
        return replace(found, name=name, pod_name=pod_name)

    def _runtime_names(self, c: ContainerInfo) -> tuple[str | None, str | None] | None:
        cached = self._names.get(c.id)
        now = self.clock()
        if cached is not None and (cached[1] is not None or now - cached[0] < RETRY_UNNAMED_S):
            return cached[1]
        if len(self._names) >= _MAX_CACHED:
            self._names.clear()
        # A bare ID in a pod may be any runtime's: ask each socket there is. containerd and
        # CRI-O have no such API without credentials (their CRI is gRPC on a root socket).
        runtimes = list(self.sockets) if c.runtime is None else [c.runtime]
        names = None
        for runtime in runtimes:
            for path in self.sockets.get(runtime or "", ()):
                names = self._inspect(path, c.id)
                if names is not None:
                    break
            if names is not None:
                break
        self._names[c.id] = (now, names)
        return names

    def _inspect(self, path: str, container_id: str) -> tuple[str | None, str | None] | None:
        # Connecting to a unix socket needs write permission on it: no access, no attempt.
        if not os.access(path, os.R_OK | os.W_OK):
            return None
        try:
            url = f"http://localhost/containers/{container_id}/json"
            with unix_client(path, self.timeout_s) as client, client.stream("GET", url) as r:
                if r.status_code == 404:
                    return None  # not this runtime's container
                r.raise_for_status()
                body = _bounded(r.iter_raw(), _MAX_INSPECT_BYTES)
            return _names_from_inspect(loads_bounded(body, max_bytes=_MAX_INSPECT_BYTES))
        except (httpx.HTTPError, JSONError, ValueError) as exc:
            if path not in self._failed_sockets:
                self._failed_sockets.add(path)
                log.warning("container names from %s: %s: %s", path, type(exc).__name__, exc)
            return None

    def _pod_name(self, uid: str, pid: int) -> str | None:
        if uid in self._pods:
            return self._pods[uid]
        name = _hosts_name(self.kubelet_pods / uid / "etc-hosts") or _environ_hostname(
            self.proc_root / str(pid) / "environ"
        )
        if name is not None:  # unnamed: asked again with the next process of the pod
            self._pods[uid] = name
        return name


def _bounded(chunks: Any, limit: int) -> bytes:
    out = bytearray()
    for chunk in chunks:
        out += chunk
        if len(out) > limit:
            raise ValueError(f"inspect answer over {limit} bytes")
    return bytes(out)


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()[:_MAX_NAME]


def _names_from_inspect(doc: Any) -> tuple[str | None, str | None] | None:
    """(container name, pod name) from a ``/containers/<id>/json`` answer."""
    if not isinstance(doc, dict):
        raise ValueError("inspect answer is not an object")
    labels = (doc.get("Config") or {}).get("Labels") or {}
    if not isinstance(labels, dict):
        labels = {}
    # Made by Kubernetes (dockershim, cri-dockerd): the labels name the pod and container.
    k8s_name = _text(labels.get("io.kubernetes.container.name"))
    if k8s_name is not None:
        return k8s_name, _text(labels.get("io.kubernetes.pod.name"))
    name = _text(doc.get("Name"))
    return (name.lstrip("/") or None) if name else None, None


def _hosts_name(path: Path) -> str | None:
    """The hostname on the last entry of the kubelet's hosts file for a pod."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2:
            return _text(fields[1])
    return None


def _environ_hostname(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None  # another user's process: its environment is not ours to read
    for entry in data.split(b"\0"):
        if entry.startswith(b"HOSTNAME="):
            return _text(entry[len(b"HOSTNAME=") :].decode(errors="replace"))
    return None
