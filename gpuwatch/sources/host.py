"""Host CPU, memory and the serving process, through psutil."""

from __future__ import annotations

import os

import psutil

from gpuwatch.model import ContainerInfo, HostSample, ProcessInfo
from gpuwatch.sources.containers import ContainerNames


def read_host() -> HostSample:
    """One reading; CPU percentages are since the previous call (the first primes them)."""
    per_core = psutil.cpu_percent(percpu=True)
    load: tuple[float | None, float | None, float | None]
    try:
        load = os.getloadavg()
    except OSError:
        load = (None, None, None)
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    total = sum(per_core) / len(per_core) if per_core else None
    return HostSample(
        cpu_percent=total,
        cpu_per_core=list(per_core),
        load_1m=load[0],
        load_5m=load[1],
        load_15m=load[2],
        memory_total_bytes=vm.total,
        memory_used_bytes=vm.total - vm.available,
        swap_total_bytes=swap.total,
        swap_used_bytes=swap.used,
    )


def prime_cpu() -> None:
    psutil.cpu_percent(percpu=True)


def pid_listening_on(port: int) -> int | None:
    """The process that listens on TCP ``port``, when this user may see it."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return None
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return conn.pid
    return None


class ProcessTable:
    """Describes processes by pid, keeping psutil objects so CPU % is measured between polls."""

    def __init__(self, containers: ContainerNames | None = None) -> None:
        self._procs: dict[int, psutil.Process] = {}
        self.containers = containers or ContainerNames()
        # What a process is (name, user, command line, container) does not change while it
        # lives: read once per process, not once per poll per GPU it holds.
        self._names: dict[int, _Names] = {}

    def describe(self, pid: int, used_memory_bytes: int | None = None) -> ProcessInfo:
        info = ProcessInfo(pid=pid, used_memory_bytes=used_memory_bytes)
        try:
            kept = self._procs.get(pid)
            # is_running compares a fresh read of the pid's start time with the one kept (psutil
            # caches create_time on the object, so comparing that would never see a reuse).
            fresh = kept is None or not kept.is_running()
            # new, or the pid reused by another process: start over with this one
            proc = self._procs[pid] = psutil.Process(pid) if fresh or kept is None else kept
            with proc.oneshot():
                if fresh:
                    proc.cpu_percent()  # primes the counter; the next poll gives a real figure
                cpu = None if fresh else proc.cpu_percent()
                rss, threads = proc.memory_info().rss, proc.num_threads()
                names = None if fresh else self._names.get(pid)
                if names is None:
                    cmd = _safe(proc.cmdline)
                    names = (
                        proc.name(),
                        _safe(proc.username),
                        " ".join(cmd) if cmd else None,
                        self.containers.of(pid),
                    )
                    self._names[pid] = names
                # Filled only once all was read: a process that ended meanwhile shows nothing.
                info.name, info.user, info.cmdline, info.container = names
                info.cpu_percent, info.rss_bytes, info.threads = cpu, rss, threads
        except psutil.NoSuchProcess:
            self._procs.pop(pid, None)
            self._names.pop(pid, None)
            # NVML's pid with no /proc entry here: another PID namespace's (or just ended).
            info.visible = False
        except psutil.AccessDenied:
            pass
        return info


_Names = tuple[str | None, str | None, str | None, ContainerInfo | None]


def _safe(fn):
    try:
        return fn()
    except (psutil.AccessDenied, psutil.ZombieProcess, KeyError):
        return None
