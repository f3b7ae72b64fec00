"""The recording's pure parts: a reading survives the codec unchanged, rotation drops what
is too old or too much, the times people type."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest

from gpuwatch.adminapi import GateStatus, LaneLimits, LaneStatus, Limits
from gpuwatch.cli.record import age, size
from gpuwatch.model import (
    ContainerInfo,
    EngineSnapshot,
    GpuReading,
    GpuSample,
    HostSample,
    MigInstance,
    ProcessInfo,
    ScrapeResult,
)
from gpuwatch.monitor.state import Event, Monitor
from gpuwatch.record import codec, store
from gpuwatch.record.player import Player, parse_when
from gpuwatch.record.recorder import Recorder
from gpuwatch.sources.scrape import map_page

FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"


@pytest.mark.parametrize("page", ["vllm-1.prom", "sglang-1.prom", "llamacpp-1.prom", "tgi-1.prom"])
def test_a_scrape_survives_the_codec(page: str) -> None:
    """Kept as its prefiltered page (not the raw one) and mapped again by the same dialects:
    the same engines; compressed against a dictionary, or not."""
    text = (FIXTURES / page).read_text()
    result = map_page("http://node:8000/metrics", text)
    assert result.engines and not result.error
    raw = codec.to_json(codec.encode_payload("scrape", result))
    for zdict in (b"", raw):
        back = codec.decode_payload("scrape", codec.unpack(codec.pack(raw, zdict), zdict))
        assert isinstance(back, codec.Page) and len(back.text) < len(text)
        # every field, every bucket (+Inf included), every float exact
        assert map_page(back.source, back.text) == result
    # Without a page (an error, or made by hand): the engines themselves, exactly.
    result.page = None
    data = codec.pack(codec.encode_payload("scrape", result))
    assert codec.decode_payload("scrape", codec.unpack(data)) == result


def test_the_gate_page_is_recorded_as_the_dashboard_reads_it() -> None:
    """Issue 26, item 6: the gate's page, recorded whole, was the biggest thing in the file
    (13.9 of 30 MB/h in bench/record.py). A recording keeps what the dashboard shows of it
    (in flight, queued, TTFT and queue-wait histograms), not its request-duration histogram,
    and replays it to the same figures."""
    from prometheus_client import generate_latest

    from gpuwatch.gate.metrics import GateMetrics

    gate = GateMetrics(["chat", "embed"])
    chat = gate.lanes["chat"]
    for i in range(200):
        chat.ttft.observe(0.01 * i)
        chat.queue_wait.observe(0.005 * i)
        chat.duration.observe(0.1 * i)
    chat.inflight.set(7)
    chat.queued.set(3)
    result = map_page("http://node:9000/metrics", generate_latest(gate.registry).decode())
    assert result.page is not None and "gpuwatch_gate_request_duration_seconds" in result.page
    encoded = codec.encode_payload("scrape", result)
    assert "gpuwatch_gate_request_duration_seconds" not in encoded["page"]
    assert len(encoded["page"]) < 0.75 * len(result.page)
    back = codec.decode_payload("scrape", codec.unpack(codec.pack(codec.to_json(encoded))))
    replayed = map_page(back.source, back.text)
    (live,), (again,) = result.engines, replayed.engines
    assert (again.dialect, again.running, again.waiting) == ("gate", 7, 3)
    for kind in ("ttft", "queue"):
        assert again.histograms[kind] == live.histograms[kind]
    assert "e2e" in live.histograms and "e2e" not in again.histograms
    # an engine's page is kept as it was prefiltered, every family the dialects read
    vllm = map_page("http://node:8000/metrics", (FIXTURES / "vllm-1.prom").read_text())
    assert codec.encode_payload("scrape", vllm)["page"] == vllm.page


def test_gpus_host_gate_and_events_survive_the_codec() -> None:
    gpus = GpuReading([GpuSample(0, "H100", memory_used_bytes=5, throttle_reasons=["power"],
                                 processes=[ProcessInfo(42, "vllm", cmdline="vllm serve m")])])  # fmt: skip
    host = HostSample(12.5, [10.0, 15.0], 1.0, 0.5, 0.25, 100, 50, 0, 0)
    gate = (Limits(3, False), GateStatus(0, False, {"chat": LaneStatus(queued=1)}), None, True)
    event = Event(1e9, "warn", "SLO TIGHT: TTFT")
    # A MIG GPU with a process in a pod's container, and one not visible from here.
    in_pod = ContainerInfo("ab" * 32, "containerd", "server", "1-2-3", "llm-0")
    mig = GpuReading([GpuSample(1, "H100", mig_mode=True, mig=[MigInstance(1, 0, "3g.40gb")],
                                processes=[ProcessInfo(7, container=in_pod, gpu_instance_id=1),
                                           ProcessInfo(8, visible=False)])])  # fmt: skip
    data = codec.pack(codec.encode_payload("gpus", mig))
    assert codec.decode_payload("gpus", codec.unpack(data)) == mig
    for kind, value in (("gpus", gpus), ("host", host), ("gate", gate), ("event", event)):
        data = codec.pack(codec.encode_payload(kind, value))
        assert codec.decode_payload(kind, codec.unpack(data)) == value, kind


def test_rows_that_are_not_ours_are_refused_not_crashed_on() -> None:
    with pytest.raises(codec.CodecError):
        codec.unpack(b"not zlib")
    with pytest.raises(codec.CodecError):
        codec.decode_payload("scrape", {"engines": "x"})
    with pytest.raises(codec.CodecError):
        codec.decode_payload("teleport", {})
    import zlib

    with pytest.raises(codec.CodecError):  # a decompression bomb stops at the bound
        codec.unpack(zlib.compress(b"[" + b" " * (codec.MAX_ROW_BYTES + 10) + b"]"))


def recording(path: Path, rows: int, start: float) -> Monitor:
    m = Monitor([], wall=lambda: start)
    recorder = Recorder(path).attach(m)
    for i in range(rows):
        recorder.reading("event", float(i), start + i, Event(start + i, "info", "x" * 200 + str(i)))
    recorder.close()
    return m


def test_rotation_by_age_and_by_size(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    now = time.time()
    recording(path, 2000, now - 2000)
    db = store.open_recording(path, writable=True)
    assert store.prune(db, now, keep_s=1000.0, max_bytes=None) == 1000
    assert db.execute("SELECT MIN(wall) FROM rows").fetchone()[0] >= now - 1000
    before = path.stat().st_size
    dropped = store.prune(db, now, keep_s=None, max_bytes=60_000)
    assert dropped > 0 and store.used_bytes(db) <= 60_000
    # The newest rows stay; the freed pages go back to the file system.
    assert db.execute("SELECT MAX(wall) FROM rows").fetchone()[0] == now - 1
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    assert path.stat().st_size < before


def test_a_player_moves_back_through_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    recording(path, 300, 1_000_000.0)
    p = Player(path)
    p.seek(p.end)
    assert len(p.monitor.events) == 300 and p.checkpoints  # one a minute of recorded time
    p.seek(p.start + 150)
    assert [e.text[-3:] for e in p.monitor.events][-1] == "150"
    assert len(p.monitor.events) == 151
    assert p.next_mark(p.now) is not None and p.previous_mark(p.now) is not None
    p.close()


def test_times_people_type() -> None:
    start = time.mktime((2026, 11, 30, 3, 0, 0, 0, 0, -1))
    end = start + 3600
    assert parse_when("03:12", start, end) == start + 12 * 60
    assert parse_when("03:12:40", start, end) == start + 12 * 60 + 40
    assert parse_when("2026-11-30 03:05", start, end) == start + 5 * 60
    assert parse_when("+90s", start, end) == start + 90
    assert parse_when("+5m", start, end) == start + 300
    assert parse_when("02:30", start, end) > end  # a time of day before the start: the next day
    with pytest.raises(ValueError):
        parse_when("tea time", start, end)
    assert age("7d") == 7 * 86400 and age("90") == 90 and age("12h") == 43200
    assert size("500M") == 500 * 1024**2 and size("2G") == 2 * 1024**3 and size("100") == 100
    for bad in ("0", "-1d", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            age(bad)


def test_appending_after_a_reboot_keeps_the_clock_running_forward(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    recording(path, 10, 1_000_000.0)  # monitor clock 0..9
    clock = [2.0]  # a new boot: the monotonic clock starts again below the file's
    m = Monitor([], clock=lambda: clock[0], wall=lambda: 1_000_100.0)
    recorder = Recorder(path).attach(m)
    m.event("info", "after the reboot")
    recorder.close()
    p = Player(path)
    assert list(p.monos) == sorted(p.monos) and p.monos[-1] >= 9 + 100 - 10  # the wall gap kept
    p.seek(p.end)
    assert p.monitor.events[-1].text == "after the reboot"
    p.close()


def test_a_row_with_the_wrong_insides_is_skipped_and_a_bad_meta_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    recording(path, 5, 1_000_000.0)
    db = store.open_recording(path, writable=True)
    # A gate row that decodes but is not a gate's answer (no lanes in its status).
    bad = codec.pack({"limits": None, "status": {"no": "lanes"}, "error": None, "current": False})
    store.insert_rows(db, [(5.0, 1_000_005.0, "gate", None, bad)])
    store.set_meta(db, {"admin_url": "http://127.0.0.1:9000"})  # so the gate row is applied
    db.close()
    p = Player(path)
    p.seek(p.end)
    assert p.bad_rows == 1 and len(p.monitor.events) == 5
    p.close()
    db = store.open_recording(path, writable=True)
    store.set_meta(db, {"urls": "http://not-a-list"})
    db.close()
    with pytest.raises(store.RecordingError, match="meta: urls"):
        Player(path)


def test_rows_events_and_audit_at_impossible_clocks_are_skipped_not_crashed_on(
    tmp_path: Path,
) -> None:
    """Regression: a row at wall clock 1e308 made the player's end 1e308, and every date
    written from it an OverflowError (``replay --report`` printed a traceback)."""
    path = tmp_path / "r.db"
    recording(path, 3, 1_000_000.0)
    db = store.open_recording(path, writable=True)
    event = codec.pack({"t": 1e308, "level": "info", "text": "from the far future"})
    store.insert_rows(db, [(3.0, 1e308, "evaluate", None, None), (1e300, 1_000_004.0, "stale",
                           None, None), (4.0, 1_000_004.0, "event", None, event)])  # fmt: skip
    entry = {"version": 9, "time": 1e308, "actor": "x", "change": {}}
    db.execute("INSERT INTO audit VALUES (9, 1000000.5, ?)", (codec.to_json(entry).decode(),))
    db.close()
    p = Player(path)
    assert p.end == 1_000_004.0 and p.bad_rows == 2
    p.seek(p.end)
    assert p.bad_rows == 3 and [e.text[-1] for e in p.monitor.events] == ["0", "1", "2"]
    assert all(mk.wall < 2e6 for mk in p.marks)
    assert store.audit_entries(p.db) == []
    p.close()


def test_a_one_row_recording_plays_and_seeks_again(tmp_path: Path) -> None:
    """The checkpoint after the last row is at the row count: seeking again read past the end
    (IndexError) once a skipped row left a recording of one."""
    path = tmp_path / "r.db"
    recording(path, 1, 1_000_000.0)
    p = Player(path)
    p.seek(p.end)
    p.seek(p.start)
    assert len(p.monitor.events) == 1
    p.close()


def test_one_recorder_per_file_and_the_file_is_free_again_once_it_closes(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    first = Recorder(path).attach(Monitor([], wall=lambda: 1_000_000.0))
    with pytest.raises(store.RecordingError, match="another gpuwatch is recording into it"):
        Recorder(path).attach(Monitor([], wall=lambda: 1_000_000.0))
    first.close()
    Recorder(path).attach(Monitor([], wall=lambda: 1_000_000.0)).close()


def test_a_snapshot_is_one_file_with_every_committed_row(tmp_path: Path) -> None:
    path, copy = tmp_path / "live.db", tmp_path / "copy.db"
    m = Monitor([], wall=lambda: 1_000_000.0)
    recorder = Recorder(path).attach(m)  # still open: its rows sit in the -wal file
    for i in range(50):
        recorder.reading("event", float(i), 1_000_000.0 + i, Event(1e6 + i, "info", f"e{i}"))
    assert recorder.flush() and path.with_name("live.db-wal").stat().st_size > 0
    assert store.snapshot(path, copy) == 50
    recorder.close()
    assert not copy.with_name("copy.db-wal").exists()
    p = Player(copy)
    p.seek(p.end)
    assert len(p.ids) == 50 and p.bad_rows == 0 and p.monitor.events[-1].text == "e49"
    p.close()
    with pytest.raises(store.RecordingError, match="exists"):
        store.snapshot(path, copy)


def test_a_cold_jump_knows_the_limits_and_events_recorded_long_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gate rows carry the limits only when they change, and events are rare: a jump that
    starts replaying after both still shows them."""
    from gpuwatch.record import player as player_module

    path = tmp_path / "r.db"
    clock = [0.0]
    m = Monitor([], clock=lambda: clock[0], wall=lambda: 1e6 + clock[0], admin_url="http://g")
    recorder = Recorder(path).attach(m)
    limits = Limits(7, False, {"chat": LaneLimits(max_inflight=8)})
    for i in range(100):
        clock[0] = float(i)
        m.apply_gate(limits, GateStatus(7, False))
        if i == 10:
            m.event("info", "long before the jump")
    recorder.close()
    monkeypatch.setattr(player_module, "LEAD_S", 5.0)
    monkeypatch.setattr(player_module, "CHECKPOINT_EVERY_S", 1e9)
    p = Player(path)
    p.seek(p.end)
    p.seek(p.end - 10)  # back, with no checkpoint: a cold start 5 s earlier
    assert p.pos > 50 and p.monitor.gate is not None
    assert p.monitor.gate.limits == limits
    # The events list as live showed it: the old event is still there.
    assert [e.text for e in p.monitor.events][-1] == "long before the jump"
    p.close()


def test_a_full_disk_stops_recording_with_an_event_and_the_file_stays_readable(
    tmp_path: Path,
) -> None:
    """SQLITE_FULL, provoked with max_page_count: the dashboard's side of a full disk."""
    path = tmp_path / "r.db"
    m = Monitor([], wall=lambda: 1e6)
    recorder = Recorder(path).attach(m)
    m.event("info", "before the disk filled")
    assert recorder.flush() and recorder.db is not None
    pages = recorder.db.execute("PRAGMA page_count").fetchone()[0]
    recorder.db.execute(f"PRAGMA max_page_count = {pages + 1}")
    for i in range(300):  # incompressible text: pages fill fast
        m.event("info", f"{i} " + "".join(chr(33 + (i * 7 + j * 13) % 90) for j in range(400)))
    assert recorder.flush() is False
    assert recorder.stopped is not None and "full" in recorder.stopped
    assert m.tap is None and recorder.db is None
    assert m.events[-1].level == "bad" and "stopped: database or disk is full" in m.events[-1].text
    m.event("info", "the dashboard goes on")  # nothing raises, nothing is written
    p = Player(path)
    assert [mk.text for mk in p.marks] == ["before the disk filled"]
    p.close()


def test_a_node_recorded_down_replays_down(tmp_path: Path) -> None:
    """A failed scrape keeps its ``unreachable`` flag through the file: a node that stopped
    answering (connection refused) replays DOWN at once, as it was shown live, not UP and then
    STALE three intervals later (which says it answers, badly)."""
    url = "http://node:8000/metrics"
    path = tmp_path / "r.db"
    clock = [1000.0]
    m = Monitor([url], interval_s=1.0, clock=lambda: clock[0], wall=lambda: 1e9 + clock[0])
    recorder = Recorder(path).attach(m)
    text = (FIXTURES / "vllm-1.prom").read_text()
    m.apply_scrape(map_page(url, text))
    clock[0] += 1.0
    refused = "connection refused (node:8000)"
    m.apply_scrape(ScrapeResult(url, error=refused, unreachable=True))
    assert m.endpoints[url].status.state == "DOWN"
    clock[0] += 0.5
    m.check_stale()
    recorder.close()
    p = Player(path)
    p.seek(p.start)
    assert p.monitor.endpoints[url].status.state == "UP"
    p.seek(p.start + 1.0)  # the failed scrape: DOWN at once, with its reason
    status = p.monitor.endpoints[url].status
    assert (status.state, status.reason) == ("DOWN", refused)
    p.seek(p.end)
    assert p.monitor.endpoints[url].status.state == "DOWN" and p.bad_rows == 0
    p.close()


def test_what_a_row_keeps_and_leaves_out() -> None:
    """None fields and empty lists are left out of a GPU's row; an engine keeps its identity
    even unknown; the JSON is compact (every row is this; spaces would be bytes on disk)."""
    gpus = GpuReading([GpuSample(0, "H100", memory_used_bytes=5)], "nvml: one GPU lost")
    encoded = codec.encode_payload("gpus", gpus)
    assert encoded == {
        "gpus": [{"index": 0, "name": "H100", "memory_used_bytes": 5}],
        "error": "nvml: one GPU lost",
    }
    back = codec.decode_payload("gpus", codec.unpack(codec.pack(encoded)))
    assert back == gpus and back.gpus[0].processes == []  # no processes: none, not an error
    assert codec.to_json({"a": [1, 2.5], "b": None}) == b'{"a":[1,2.5],"b":null}'
    unknown = ScrapeResult("http://node:8000/metrics", [EngineSnapshot("s", "vllm", None)])
    (engine,) = codec.encode_payload("scrape", unknown)["engines"]
    assert engine == {"source": "s", "dialect": "vllm", "model": None}


def test_warnings_are_kept_with_the_page_and_without_it() -> None:
    url = "http://node:8000/metrics"
    result = map_page(url, (FIXTURES / "vllm-1.prom").read_text())
    result.warnings = ["3 models past the cap of 64: not shown"]
    encoded = codec.encode_payload("scrape", result)
    assert encoded["warnings"] == result.warnings
    back = codec.decode_payload("scrape", codec.unpack(codec.pack(encoded)))
    assert isinstance(back, codec.Page) and back.warnings == result.warnings
    failed = ScrapeResult(url, error="HTTP 500", warnings=["a line too long"])
    back = codec.decode_payload(
        "scrape", codec.unpack(codec.pack(codec.encode_payload("scrape", failed)))
    )
    assert back == failed


def test_a_page_with_an_engine_and_the_gate_is_kept_whole() -> None:
    """Only a page that is the gate's alone loses the gate's request-duration family."""
    from prometheus_client import generate_latest

    from gpuwatch.gate.metrics import GateMetrics

    gate = GateMetrics(["chat"])
    gate.lanes["chat"].duration.observe(0.5)
    text = (FIXTURES / "vllm-1.prom").read_text() + generate_latest(gate.registry).decode()
    result = map_page("http://node:8000/metrics", text)
    assert {e.dialect for e in result.engines} == {"vllm", "gate"}
    assert codec.encode_payload("scrape", result)["page"] == result.page


def test_a_histogram_row_whose_bounds_and_counts_disagree_is_refused() -> None:
    row = {"source": "s", "engines": [{"source": "s", "dialect": "vllm", "model": "m",
                                       "h": {"ttft": [[0.1, 1.0], [3], 4.0, 3]}}]}  # fmt: skip
    with pytest.raises(codec.CodecError, match=r"^a scrape row does not decode: ValueError: "):
        codec.decode_payload("scrape", row)


def test_rows_that_carry_nothing_and_refusals_that_say_why() -> None:
    assert codec.decode_payload("stale", None) is None
    assert codec.decode_payload("evaluate", None) is None
    assert codec.encode_payload("evaluate", None) is None
    with pytest.raises(codec.CodecError) as refused:
        codec.decode_payload("teleport", {})
    assert str(refused.value) == "unknown row kind 'teleport'"
    with pytest.raises(codec.CodecError) as refused:
        codec.decode_payload("gpus", {})
    assert str(refused.value) == "a gpus row does not decode: KeyError: 'gpus'"
    with pytest.raises(codec.CodecError) as refused:
        codec.decode_payload("event", {"t": 10**50, "level": "info", "text": "x"})
    assert str(refused.value) == (
        f"a event row does not decode: ValueError: an event at {str(10**50)[:40]} is at no date"
    )
    with pytest.raises(codec.CodecError) as refused:
        codec.unpack(b"not zlib")
    assert str(refused.value) == "a blob does not decompress: error"
    with pytest.raises(codec.CodecError) as refused:
        codec.unpack(codec.pack(b"{not json"))
    assert str(refused.value) == "a row does not decode: JSONDecodeError"
    with pytest.raises(codec.CodecError) as refused:
        codec.unpack(codec.pack(b" " * (codec.MAX_ROW_BYTES + 1)))
    assert str(refused.value) == f"a blob over {codec.MAX_ROW_BYTES} bytes once decompressed"


def test_event_times_from_the_epoch_to_the_end_of_year_9999() -> None:
    for t in (0, 0.0, 1e9, codec.MAX_WALL):
        assert codec.plausible_wall(t), t
    bad: tuple[object, ...] = (-1, -0.001, codec.MAX_WALL + 1, True, "1e9", None, float("nan"))
    for b in bad:
        assert not codec.plausible_wall(b), b
    event = Event(0.0, "info", "at the epoch")
    assert codec.decode_payload("event", codec.encode_payload("event", event)) == event


def test_a_dictionary_serves_one_kind_from_one_source_and_shrinks_its_rows() -> None:
    # The keys are written into the file: a recording made before must still find its own.
    assert codec.dictionary_key("scrape", "http://a:8000/metrics") == "scrape http://a:8000/metrics"
    assert codec.dictionary_key("gate", None) == "gate "
    text = (FIXTURES / "vllm-1.prom").read_text()
    raw = codec.to_json(codec.encode_payload("scrape", map_page("http://a/metrics", text)))
    assert len(codec.pack(raw, raw)) < len(codec.pack(raw)) / 4
    assert codec.unpack(codec.pack(raw, raw), raw) == codec.unpack(codec.pack(raw))
