"""ProcessTable: what a process is (name, user, command line) is read once; what it does (CPU,
RSS, threads) every poll; a process that ended is forgotten."""

from __future__ import annotations

import subprocess
import sys

import psutil

from gpuwatch.sources.host import ProcessTable


def test_names_once_numbers_every_poll_and_an_ended_process_forgotten(monkeypatch) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        table = ProcessTable()
        first = table.describe(child.pid)
        assert first.name and first.cmdline and "time.sleep(60)" in first.cmdline
        assert first.cpu_percent is None  # primed: a figure from the next poll on
        asked = {"cmdline": 0}
        real = psutil.Process.cmdline

        def counted(self: psutil.Process) -> list[str]:
            asked["cmdline"] += 1
            return real(self)

        monkeypatch.setattr(psutil.Process, "cmdline", counted)
        for _ in range(3):
            again = table.describe(child.pid)
            assert (again.name, again.cmdline) == (first.name, first.cmdline)
            assert again.cpu_percent is not None and again.rss_bytes
        assert asked["cmdline"] == 0
    finally:
        child.kill()
        child.wait()
    gone = table.describe(child.pid)
    assert gone.name is None and gone.cmdline is None
    assert child.pid not in table._names


def test_a_pid_taken_over_by_another_process_is_read_afresh() -> None:
    """The kernel reuses pids: a process kept from an earlier poll whose pid now belongs to
    another process (another start time) must not lend it its name and command line."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        table = ProcessTable()
        first = table.describe(child.pid)
        # As if the process kept had started at another time: the pid is someone else's now.
        kept = table._procs[child.pid]
        kept._ident = (child.pid, 1.0)
        table._names[child.pid] = ("old-server", "nobody", "old-server --port 1", None)
        again = table.describe(child.pid)
        assert (again.name, again.cmdline) == (first.name, first.cmdline)
        assert again.cpu_percent is None  # a new process: its CPU counter starts again
        assert table._procs[child.pid] is not kept
    finally:
        child.kill()
        child.wait()
