"""``gpuwatch record`` and ``gpuwatch replay`` as real processes against a real simulator:
kill -9 leaves a readable file; a full disk stops recording cleanly; bad files get one line
and exit 2; a range exports to a small file and a report a person can open."""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.record import store
from gpuwatch.record.player import Player
from tests.helpers import eventually_sync

GW = [sys.executable, "-m", "gpuwatch"]
LIMIT = 192 * 1024  # the "disk": room for a new recording and a few seconds of rows


def gw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GW, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    proc = subprocess.Popen([*GW, "sim", "--listen", "127.0.0.1:0", "--time-scale", "4", "--seed", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    url = proc.stdout.readline().split(" on ")[1].split(" ")[0]
    yield url
    proc.terminate()
    proc.wait(10)


def record_args(url: str, out: Path, *extra: str) -> list[str]:
    return [*GW, "record", "--metrics", f"{url}/metrics", "--fake-gpu-from", f"{url}/sim/gpu",
            "--interval", "0.2", "--out", str(out), *extra]  # fmt: skip


def committed_rows(path: Path) -> int:
    """Rows another process has committed (read as a second reader would)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return int(db.execute("SELECT COUNT(*) FROM rows").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0


@pytest.fixture(scope="module")
def killed(sim_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recording whose writer was killed with SIGKILL mid-run."""
    path = tmp_path_factory.mktemp("rec") / "killed.db"
    proc = subprocess.Popen(record_args(sim_url, path), stderr=subprocess.PIPE, text=True)
    try:
        # Scrapes, GPU readings and the ticks' badge: a few seconds' worth committed.
        eventually_sync(lambda: committed_rows(path) >= 120, 60, message="rows never committed")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    return path


def test_kill_9_leaves_a_readable_file(killed: Path) -> None:
    db = sqlite3.connect(killed)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    player = Player(killed)  # the same checks `gpuwatch replay` makes
    kinds = {k for (k,) in player.db.execute("SELECT DISTINCT kind FROM rows")}
    assert {"scrape", "gpus", "evaluate", "stale"} <= kinds
    player.seek(player.end)
    engines = player.monitor.serving_engines()
    assert engines and engines[0].snap.dialect == "vllm"
    assert player.monitor.gpus is not None and player.monitor.gpus.gpus
    assert player.bad_rows == 0
    player.close()


def test_export_and_report_of_a_range(killed: Path, tmp_path: Path) -> None:
    small, html, md = tmp_path / "incident.db", tmp_path / "incident.html", tmp_path / "i.md"
    proc = gw("replay", str(killed), "--from", "+1s", "--to", "+3s", "--export", str(small),
              "--report", str(html))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert small.stat().st_size < killed.stat().st_size + 4096
    out = Player(small)
    src = Player(killed)
    assert out.meta["view_from"] == pytest.approx(src.start + 1)
    assert src.start <= out.start and out.end <= src.start + 3.01
    assert len(out.ids) < len(src.ids)
    out.close()
    src.close()
    page = html.read_text()
    assert page.startswith("<!doctype html>") and "<h2>Timeline</h2>" in page
    assert "badge" in page and "KV cache and goodput" in page
    # The exported file is a recording like any other: it replays and reports.
    proc = gw("replay", str(small), "--report", str(md))
    assert proc.returncode == 0, proc.stderr
    text = md.read_text()
    assert "## Timeline" in text and "```" in text and "generation tokens/s" in text


def bad_files(tmp: Path, good: Path) -> dict[str, tuple[Path, str]]:
    not_sqlite = tmp / "notes.db"
    not_sqlite.write_text("these are my notes\n" * 100)
    other = tmp / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    newer = tmp / "newer.db"
    newer.write_bytes(good.read_bytes())
    db = sqlite3.connect(newer)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (json.dumps(store.SCHEMA + 1),))
    db.commit()
    db.close()
    truncated = tmp / "truncated.db"
    data = good.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    empty = tmp / "empty.db"
    empty.write_bytes(b"")
    return {
        "not sqlite": (not_sqlite, "not a gpuwatch recording"),
        "another database": (other, "not a gpuwatch recording"),
        "newer": (newer, "newer gpuwatch"),
        "truncated": (truncated, "damaged"),
        "empty": (empty, "not a gpuwatch recording"),
        "missing": (tmp / "nope.db", "no such file"),
    }


def test_bad_files_one_line_exit_2(killed: Path, tmp_path: Path) -> None:
    # A checkpointed copy: the WAL folded into the file, so halving it cuts real pages.
    good = tmp_path / "good.db"
    db = sqlite3.connect(killed)
    db.execute("VACUUM INTO ?", (str(good),))
    db.close()
    assert good.stat().st_size > 16384
    for name, (path, reason) in bad_files(tmp_path, good).items():
        proc = gw("replay", str(path))
        assert proc.returncode == 2, (name, proc.stderr)
        assert proc.stderr.count("\n") == 1 and reason in proc.stderr, (name, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stdout == ""
    # The recorder refuses to append to a file that is not a recording, the same way.
    proc = gw("record", "--metrics", "http://127.0.0.1:9/metrics", "--no-gpu",
              "--out", str(tmp_path / "notes.db"), "--duration", "1")  # fmt: skip
    assert proc.returncode == 2 and "not a gpuwatch recording" in proc.stderr
    assert proc.stderr.count("\n") == 1


def _small_disk() -> None:
    # The file-size limit stands in for a full disk: past it, write() fails (EFBIG) the way
    # it does with ENOSPC, and SQLite reports an error instead of the process dying of SIGXFSZ.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def test_full_disk_stops_cleanly_and_the_file_stays_readable(sim_url: str, tmp_path: Path) -> None:
    path = tmp_path / "full.db"
    proc = subprocess.run(record_args(sim_url, path, "--duration", "60"), capture_output=True,
                          text=True, timeout=90, preexec_fn=_small_disk)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "stopped" in lines[0] and str(path) in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert os.path.getsize(path) <= LIMIT
    player = Player(path)
    assert len(player.ids) > 0
    player.seek(player.end)
    assert player.monitor.serving_engines()
    player.close()


def test_sigterm_commits_and_closes_the_file(sim_url: str, tmp_path: Path) -> None:
    """What systemd sends on stop: the last rows committed, the WAL folded back, exit 0."""
    path = tmp_path / "service.db"
    proc = subprocess.Popen(record_args(sim_url, path), stderr=subprocess.PIPE, text=True)
    try:
        eventually_sync(lambda: committed_rows(path) >= 20, 60, message="rows never committed")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert err == ""
    assert not path.with_name(path.name + "-wal").exists()  # closed cleanly: WAL checkpointed
    player = Player(path)
    assert player.meta["host"] and len(player.ids) >= 20
    player.close()


def test_dashboard_and_demo_refuse_a_file_they_cannot_record_to(tmp_path: Path) -> None:
    """``--record`` is checked before any screen (or child process) starts."""
    notes = tmp_path / "notes.db"
    notes.write_text("mine\n" * 100)
    for args in (
        ["--metrics", "http://127.0.0.1:9/metrics", "--no-gpu", "--record", str(notes)],
        ["--metrics", "http://127.0.0.1:9/metrics", "--no-gpu",
         "--record", str(tmp_path / "no-such-dir" / "x.db")],
    ):  # fmt: skip
        proc = gw(*args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and str(tmp_path) in proc.stderr
    assert notes.read_text() == "mine\n" * 100  # untouched
