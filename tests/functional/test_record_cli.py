"""``gpuwatch record`` and ``gpuwatch replay`` as real processes against a real simulator:
kill -9 leaves a readable file; a full disk stops recording cleanly; bad files get one line
and exit 2; a range exports to a small file and a report a person can open."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from gpuwatch.record import codec, store
from gpuwatch.record.player import Player
from tests.functional.servers import ThreadedServer
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


def test_a_second_recorder_on_a_file_is_refused_and_the_first_loses_no_row(
    sim_url: str, tmp_path: Path
) -> None:
    """Regression: two recorders on one file chose compression dictionaries each in memory and
    stored them with INSERT OR IGNORE: 1-7 of ~206 rows could not be decoded (or the second was
    refused as "not a gpuwatch recording"). One writer per file, the second told why."""
    path = tmp_path / "one.db"
    proc = subprocess.Popen(record_args(sim_url, path), stderr=subprocess.PIPE, text=True)
    try:
        eventually_sync(lambda: committed_rows(path) >= 20, 60, message="rows never committed")
        second = gw(*record_args(sim_url, path, "--duration", "2")[3:])
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
    assert "another gpuwatch is recording into it" in second.stderr and str(path) in second.stderr
    assert proc.returncode == 0 and err == ""
    player = Player(path)
    player.seek(player.end)
    assert player.bad_rows == 0
    player.close()
    # Once the first has stopped, the file is free: the next recorder appends to it.
    again = gw(*record_args(sim_url, path, "--duration", "1")[3:])
    assert again.returncode == 0, again.stderr


def test_snapshot_to_copies_a_live_recording_whole_into_one_file(
    sim_url: str, tmp_path: Path
) -> None:
    """Regression: the README said to cp a live recording; its rows were still in the -wal
    file, so the copy held none. --snapshot-to copies through SQLite's backup API."""
    live, copy = tmp_path / "live.db", tmp_path / "copy.db"
    proc = subprocess.Popen(record_args(sim_url, live), stderr=subprocess.PIPE, text=True)
    try:
        eventually_sync(lambda: committed_rows(live) >= 40, 60, message="rows never committed")
        out = gw("record", "--out", str(live), "--snapshot-to", str(copy))
        refused = gw("record", "--out", str(live), "--snapshot-to", str(copy))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{copy}: ") and "a consistent copy of" in out.stdout
    assert not copy.with_name("copy.db-wal").exists()  # one file, to attach or move
    player = Player(copy)
    player.seek(player.end)
    assert len(player.ids) >= 40 and player.bad_rows == 0 and player.monitor.serving_engines()
    player.close()
    assert refused.returncode == 2 and "exists" in refused.stderr


def _read_only_prefix() -> list[str]:
    """How to run a command for which a folder of mode 555 is read-only: as is, unless we are
    root, who writes anywhere; then without the capabilities that let root do so."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: no way to make a folder read-only")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


def test_a_recording_in_a_read_only_folder_is_read_and_said_read_only(
    killed: Path, tmp_path: Path
) -> None:
    """Regression: replaying (or appending to) a recording in a read-only folder said the file
    was "damaged": SQLite could not create the -shm file it reads a WAL database through."""
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "rec.db"
    db = sqlite3.connect(killed)
    db.execute("VACUUM INTO ?", (str(path),))
    db.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = WAL")  # as a recorder leaves it, closed: no -wal beside it
    db.close()
    path.chmod(0o644)
    folder.chmod(0o555)
    prefix = _read_only_prefix()
    try:
        report = tmp_path / "r.md"
        read = subprocess.run([*prefix, *GW, "replay", str(path), "--report", str(report)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        write = subprocess.run([*prefix, *record_args("http://127.0.0.1:9", path, "--no-gpu",
                                "--duration", "1")], capture_output=True, text=True, timeout=60)  # fmt: skip
    finally:
        folder.chmod(0o755)
    assert read.returncode == 0 and report.exists(), read.stderr
    assert write.returncode == 2 and write.stderr.count("\n") == 1, write.stderr
    assert "read-only" in write.stderr and "damaged" not in write.stderr
    assert sorted(f.name for f in folder.iterdir()) == ["rec.db"]  # nothing written beside it
    # A write-ahead log beside it may hold rows SQLite cannot read there: said, not guessed at.
    wal = path.with_name("rec.db-wal")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA wal_autocheckpoint = 0")
    db.execute("INSERT INTO meta VALUES ('note', '1')")
    log = wal.read_bytes()  # what a recorder still writing leaves beside the file
    db.close()  # (folds the log in and removes it)
    wal.write_bytes(log)
    folder.chmod(0o555)
    try:
        proc = subprocess.run([*prefix, *GW, "replay", str(path), "--report", str(report)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        folder.chmod(0o755)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "read-only folder, with a write-ahead log beside it" in proc.stderr


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


def _hostile_recording(path: Path, *, meta: dict[str, str] | None = None) -> sqlite3.Connection:
    """A well-formed recording of two rows, then what the caller plants in it."""
    db = store.create(path, {"urls": ["http://127.0.0.1:9/metrics"], "interval_s": 1.0,
                             "window_s": 60.0, "slo": {"ttft_s": 2.0}})  # fmt: skip
    wall = 1_700_000_000.0
    event = codec.pack({"t": 1.0, "level": "info", "text": "calm"})
    store.insert_rows(
        db, [(1.0, wall, "event", None, event), (2.0, wall + 1, "evaluate", None, None)]
    )
    for key, value in (meta or {}).items():
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
    return db


def _small_memory() -> None:
    # 1 GiB of address space: a decompression bomb's gigabyte cannot be allocated in it.
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_hostile_recordings_are_bounded_and_one_line(tmp_path: Path) -> None:
    """A dictionary that inflates to 1 GiB is left out (its rows fail one by one, in bounded
    memory); JSON nested 100,000 deep in meta or an audit entry is refused, never a traceback."""
    bomb = tmp_path / "bomb.db"
    db = _hostile_recording(bomb)
    packer = zlib.compressobj(9)
    blob = b"".join(packer.compress(bytes(1 << 24)) for _ in range(64)) + packer.flush()
    db.execute("INSERT INTO dicts (key, data) VALUES (?, ?)", ("event ", blob))
    db.close()
    proc = subprocess.run([*GW, "replay", str(bomb), "--report", str(tmp_path / "bomb.md")],
                          capture_output=True, text=True, timeout=60,
                          preexec_fn=_small_memory)  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert (tmp_path / "bomb.md").exists()

    deep = "[" * 100_000 + "]" * 100_000
    meta = tmp_path / "meta.db"
    _hostile_recording(meta, meta={"urls": deep}).close()
    proc = gw("replay", str(meta))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "damaged recording (meta: urls)" in proc.stderr

    audit = tmp_path / "audit.db"
    db = _hostile_recording(audit)
    db.execute("INSERT INTO audit (version, wall, entry) VALUES (1, 1700000000.5, ?)", (deep,))
    db.execute("INSERT INTO audit (version, wall, entry) VALUES (2, 1700000000.6, ?)",
               (json.dumps({"version": 2, "time": 1700000000.6, "actor": "alice"}),))  # fmt: skip
    assert [e.actor for e in store.audit_entries(db)] == ["alice"]
    db.close()
    out = tmp_path / "out.db"
    proc = gw("replay", str(audit), "--export", str(out))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_a_row_at_wall_clock_1e308_is_skipped_and_said_not_a_traceback(tmp_path: Path) -> None:
    """Regression: ``replay --report`` printed an OverflowError traceback (the row made the
    recording's end 1e308, and its time of day was formatted)."""
    path = tmp_path / "far.db"
    db = _hostile_recording(path)
    store.insert_rows(db, [(3.0, 1e308, "evaluate", None, None)])
    db.close()
    report = tmp_path / "far.md"
    proc = gw("replay", str(path), "--report", str(report))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout == f"{report}: incident report (1 damaged row(s) skipped)\n"
    assert "## Timeline" in report.read_text()


def test_a_forged_row_of_256_mib_is_never_read_into_memory(tmp_path: Path) -> None:
    """A row's blob larger than any row written is skipped by the query itself (counted as a
    bad row when replayed): replay's peak memory stays far below the blob's size."""
    path = tmp_path / "big.db"
    db = _hostile_recording(path)
    db.execute("INSERT INTO rows (mono, wall, kind, source, data) "
               "VALUES (3.0, 1700000002.0, 'event', NULL, zeroblob(256 * 1024 * 1024))")  # fmt: skip
    db.close()
    # The peak is read from VmHWM, this process image's own high-water mark: getrusage's
    # ru_maxrss keeps the forking parent's peak across exec (a big pytest process read as 460).
    script = (
        "import re, sys\n"
        "from pathlib import Path\n"
        "from gpuwatch.record.player import Player\n"
        "p = Player(Path(sys.argv[1])); p.seek(p.end)\n"
        "hwm = re.search(r'VmHWM:\\s+(\\d+)', Path('/proc/self/status').read_text())\n"
        "print(p.bad_rows, int(hwm[1]) // 1024)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    bad, peak_mib = map(int, proc.stdout.split())
    assert bad == 1 and peak_mib < 200, proc.stdout


def fake_admin(entries: object) -> tuple[dict, dict[str, int]]:
    """A gate's admin routes answering ``entries`` as its audit trail, and how often the
    audit was asked for."""
    asked = {"audit": 0}

    async def audit(_: web.Request) -> web.Response:
        asked["audit"] += 1
        return web.json_response({"entries": entries})

    async def limits(_: web.Request) -> web.Response:
        return web.json_response({"version": 1, "paused": False, "lanes": {}})

    return {"/admin/audit": audit, "/admin/limits": limits, "/admin/status": limits}, asked


@pytest.mark.parametrize("entries", [[{"actor": "x"}, 5, {"version": "1", "time": 1.0}], "oops"])
def test_a_gate_answering_odd_audit_entries_does_not_stop_the_recording(
    sim_url: str, tmp_path: Path, entries: object
) -> None:
    """What the admin URL answers is not ours: entries that are not audit entries are left
    out, and the recording goes on for its whole duration."""

    routes, asked = fake_admin(entries)
    path = tmp_path / "odd.db"
    with ThreadedServer(routes) as admin:
        proc = subprocess.run(record_args(sim_url, path, "--admin", admin.url(""), "--duration", "5"),
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    db = sqlite3.connect(path)
    span = db.execute("SELECT MAX(wall) - MIN(wall) FROM rows").fetchone()[0]
    audited = db.execute("SELECT COUNT(*) FROM audit").fetchone()[0]
    db.close()
    assert span >= 4.0 and audited == 0, (span, audited)
    assert asked["audit"] > 0  # the gate's answers were asked for, and left out


def test_an_unexpected_error_in_the_writer_stops_recording_with_one_line_and_exit_1(
    sim_url: str, tmp_path: Path
) -> None:
    """Review 2: an audit version past SQLite's 64-bit integers raised OverflowError (no
    sqlite3.Error) in the writer task, which ended unseen: rows stopped, exit 0."""

    routes, _ = fake_admin([{"actor": "x", "version": 2**70, "time": 1.0}])
    path = tmp_path / "overflow.db"
    with ThreadedServer(routes) as admin:
        proc = subprocess.run(record_args(sim_url, path, "--admin", admin.url(""), "--duration", "30"),
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "stopped: OverflowError" in lines[0], proc.stderr
    assert str(path) in lines[0] and "Traceback" not in proc.stderr
    player = Player(path)  # what was committed before stays readable
    assert len(player.ids) > 0
    player.close()
