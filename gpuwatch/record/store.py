"""The recording file: SQLite in WAL mode, its schema and version, rotation by age and size.

One table of rows in the order the monitor was fed them (``kind``: scrape, gpus, host, gate,
event, stale, evaluate; ``mono`` the monitor's clock, ``wall`` the wall clock), one of the
gate's audit entries, one of compression dictionaries (the first row of each kind and
source, which the later ones are compressed against), and ``meta`` (what was recorded: the
sources, the SLO, the interval).
Rows are written a second's worth per transaction; WAL with ``synchronous=NORMAL`` means a
killed process loses at most the transaction it was in, and never corrupts what was committed.

One writer per file: a recorder holds an exclusive ``flock`` on the file (``lock_for_writing``)
for as long as it records; a second one is refused in one line. Two writers each chose their
compression dictionaries in memory and stored them with INSERT OR IGNORE, so one's rows could be
compressed against a dictionary the file does not hold. Readers need no lock (WAL).

Committed rows may still sit in the write-ahead log (``<file>-wal``) while a recorder runs: a
``cp`` of the file alone misses them. ``snapshot`` copies a recording, live or not, through
SQLite's backup API: one consistent instant, in a single self-contained file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwatch.adminapi import AdminApiError, AuditEntry
from gpuwatch.errors import EXIT_USAGE, GpuwatchError
from gpuwatch.record import codec
from gpuwatch.safejson import JSONError, loads_bounded

APP = "gpuwatch-recording"
SCHEMA = 1

_DDL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE rows (
    id INTEGER PRIMARY KEY,
    mono REAL NOT NULL,
    wall REAL NOT NULL,
    kind TEXT NOT NULL,
    source TEXT,
    data BLOB
);
CREATE INDEX rows_wall ON rows (wall);
CREATE INDEX rows_kind ON rows (kind, wall);
CREATE TABLE audit (version INTEGER PRIMARY KEY, wall REAL NOT NULL, entry TEXT NOT NULL);
CREATE TABLE dicts (key TEXT PRIMARY KEY, data BLOB NOT NULL);
"""


# What a query reads of a row's payload: a blob no larger than a row we write can be once
# compressed, else NULL (the row then fails to decode, one by one), so a forged row of a
# gigabyte is never fetched into memory.
DATA = f"CASE WHEN length(data) <= {codec.MAX_ROW_BYTES} THEN data END"
# Rows whose clocks no recorder can have written (a wall clock of 1e308 overflows every date
# function): left out of what a player reads, and counted as bad rows.
CLOCKS_OK = (
    f"wall BETWEEN 0 AND {codec.MAX_WALL} AND mono BETWEEN {-codec.MAX_MONO} AND {codec.MAX_MONO}"
)


class RecordingError(GpuwatchError, exit_code=EXIT_USAGE):
    """A file that cannot be read as a recording; ``str()`` is the one-line reason."""


@dataclass(frozen=True)
class Row:
    id: int
    mono: float
    wall: float
    kind: str
    source: str | None
    data: bytes | None


def create(path: Path, meta: dict[str, Any]) -> sqlite3.Connection:
    """A new recording at ``path`` (an existing one is appended to if it is ours)."""
    if path.exists() and path.stat().st_size > 0:
        db = open_recording(path, writable=True)
        set_meta(db, {k: v for k, v in meta.items() if k not in ("created",)})
        return db
    db = sqlite3.connect(path, isolation_level=None)
    # Before the first table: free pages go back to the file system on rotation.
    db.execute("PRAGMA auto_vacuum = INCREMENTAL")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.executescript(_DDL)
    set_meta(db, {"app": APP, "schema": SCHEMA, "created": time.time(), **meta})
    return db


def set_meta(db: sqlite3.Connection, meta: dict[str, Any]) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
        [(k, json.dumps(v)) for k, v in meta.items()],
    )


def lock_for_writing(path: Path) -> int:
    """An exclusive lock on the recording at ``path`` (created empty if missing), held while
    the returned descriptor is open; RecordingError when another process holds it. A ``flock``,
    not SQLite's own (``fcntl``) locks: those are per process and dropped when any descriptor of
    the file closes, and SQLite opens and closes its files as it likes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise RecordingError(f"{path}: cannot record: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RecordingError(
            f"{path}: another gpuwatch is recording into it (one recorder per file): stop "
            "that one, or record into another file"
        ) from None
    except OSError as exc:  # a file system without flock: say so rather than risk two writers
        os.close(fd)
        raise RecordingError(f"{path}: cannot lock it: {exc.strerror or exc}") from exc
    return fd


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection. In a folder this user cannot write to, SQLite cannot create the
    ``-shm`` file a WAL database is read through; with no ``-wal`` beside it every committed row
    is in the file and no recorder can be running there, so it is read as immutable."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return db
    except sqlite3.Error as exc:
        wal = path.with_name(path.name + "-wal").exists()
        # With a -wal file beside it SQLite says "unable to open" rather than "read-only".
        cantopen = getattr(exc, "sqlite_errorname", "") == "SQLITE_CANTOPEN"
        if not (_read_only(exc) or (cantopen and wal and not os.access(path.parent, os.W_OK))):
            return db  # the checks that follow say what is wrong with it
        db.close()
        if wal:
            raise RecordingError(
                f"{path}: in a read-only folder, with a write-ahead log beside it that SQLite "
                "cannot read there: copy the recording and its -wal file to a writable folder"
            ) from None
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, isolation_level=None)


def _read_only(exc: sqlite3.Error) -> bool:
    return str(getattr(exc, "sqlite_errorname", "")).startswith("SQLITE_READONLY")


def _read_only_reason(path: Path, exc: sqlite3.Error, writable: bool) -> str:
    folder = getattr(exc, "sqlite_errorname", "") == "SQLITE_READONLY_DIRECTORY"
    what = "its folder" if folder else "the file"
    doing = "cannot record into it" if writable else "cannot read it"
    return f"{path}: read-only ({what} cannot be written to), {doing}"


def open_recording(path: Path, writable: bool = False) -> sqlite3.Connection:
    """Open and check a recording: ours, not newer than this gpuwatch, and intact."""
    if not path.is_file():
        raise RecordingError(f"{path}: no such file")
    try:
        db = (
            _connect_read_only(path)
            if not writable
            else sqlite3.connect(path, isolation_level=None)
        )
    except sqlite3.Error as exc:
        raise RecordingError(f"{path}: cannot open: {exc}") from exc
    try:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"meta", "rows", "audit", "dicts"} <= names:
            raise RecordingError(f"{path}: not a gpuwatch recording (no recording tables)")
        meta = read_meta(db)
        if meta.get("app") != APP:
            raise RecordingError(f"{path}: not a gpuwatch recording")
        schema = meta.get("schema")
        if not isinstance(schema, int):
            raise RecordingError(f"{path}: not a gpuwatch recording (no schema version)")
        if schema > SCHEMA:
            raise RecordingError(
                f"{path}: recorded by a newer gpuwatch (schema {schema}, this one reads "
                f"{SCHEMA}): upgrade gpuwatch to replay it"
            )
        problem = db.execute("PRAGMA quick_check").fetchone()[0]
        if problem != "ok":
            raise RecordingError(f"{path}: damaged recording (truncated?): {problem}")
        if writable:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.DatabaseError as exc:
        db.close()
        if _read_only(exc):  # not damaged: a file or a folder this user cannot write to
            raise RecordingError(_read_only_reason(path, exc, writable)) from exc
        reason = "not a gpuwatch recording" if "not a database" in str(exc) else "damaged"
        raise RecordingError(f"{path}: {reason} ({exc})") from exc
    except RecordingError:
        db.close()
        raise
    return db


def read_meta(db: sqlite3.Connection) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in db.execute("SELECT key, value FROM meta"):
        try:
            out[key] = loads_bounded(value)  # bounded: a file's JSON can nest 100,000 deep
        except (TypeError, JSONError):
            out[key] = None
    return out


def insert_rows(
    db: sqlite3.Connection,
    rows: Iterable[tuple[Any, ...]],
    dictionaries: Iterable[tuple[str, bytes]] = (),
) -> None:
    """``(mono, wall, kind, source, data)`` tuples and the new compression dictionaries
    they use, in one transaction."""
    db.execute("BEGIN")
    try:
        db.executemany(
            "INSERT OR IGNORE INTO dicts (key, data) VALUES (?, ?)",
            [(key, zlib.compress(data)) for key, data in dictionaries],
        )
        db.executemany(
            "INSERT INTO rows (mono, wall, kind, source, data) VALUES (?, ?, ?, ?, ?)", rows
        )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def dictionaries(db: sqlite3.Connection) -> dict[str, bytes]:
    """The compression dictionaries, by ``codec.dictionary_key``; a damaged one is left out
    (its rows then fail to decode, one by one)."""
    out = {}
    for key, data in db.execute(f"SELECT key, {DATA} FROM dicts"):
        try:
            out[str(key)] = codec.inflate(data)
        except codec.CodecError:
            continue
    return out


def insert_audit(db: sqlite3.Connection, entries: Iterable[AuditEntry]) -> int:
    """The changes of the limits among ``entries``, once each (keyed by their version).

    An adaptive controller's lines are left out: they carry the version in force, not a new
    one, so the first of them would take the person's change's key (and the rest be dropped).
    Its moves are recorded anyway, in the gate's status rows (``last_decision``), which replay
    shows as events the way the live dashboard does."""
    before = db.total_changes
    db.executemany(
        "INSERT OR IGNORE INTO audit (version, wall, entry) VALUES (?, ?, ?)",
        [
            (e.version, float(e.time), json.dumps(e.to_json()))
            for e in entries
            if e.controller is None
        ],
    )
    return db.total_changes - before


def rows_between(
    db: sqlite3.Connection, start: float | None = None, end: float | None = None
) -> Iterator[Row]:
    """Rows with ``start <= wall <= end`` (either open), in the order they were fed."""
    query = f"SELECT id, mono, wall, kind, source, {DATA} FROM rows WHERE wall >= ? AND wall <= ?"
    lo = -1e300 if start is None else start
    hi = 1e300 if end is None else end
    for r in db.execute(query + " ORDER BY id", (lo, hi)):
        yield Row(*r)


def audit_entries(
    db: sqlite3.Connection, start: float | None = None, end: float | None = None
) -> list[AuditEntry]:
    lo = -1e300 if start is None else start
    hi = 1e300 if end is None else end
    out = []
    for (text,) in db.execute(
        "SELECT entry FROM audit WHERE wall >= ? AND wall <= ? ORDER BY version", (lo, hi)
    ):
        try:
            entry = AuditEntry.from_json(loads_bounded(text))
        except (TypeError, JSONError, AdminApiError):
            continue
        if codec.plausible_wall(entry.time):
            out.append(entry)
    return out


def used_bytes(db: sqlite3.Connection) -> int:
    """The bytes the data takes (the file less its free pages)."""
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    free = db.execute("PRAGMA freelist_count").fetchone()[0]
    size: int = db.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def prune(db: sqlite3.Connection, now: float, keep_s: float | None, max_bytes: int | None) -> int:
    """Drop rows older than ``keep_s`` and, past ``max_bytes``, the oldest tenth at a time;
    give the freed pages back to the file system. The number of rows dropped."""
    dropped = 0
    if keep_s is not None:
        dropped += db.execute("DELETE FROM rows WHERE wall < ?", (now - keep_s,)).rowcount
        db.execute("DELETE FROM audit WHERE wall < ?", (now - keep_s,))
    if max_bytes is not None:
        while used_bytes(db) > max_bytes:
            query = "SELECT MIN(id), MAX(id), COUNT(*) FROM rows"
            first, last, count = db.execute(query).fetchone()
            if not count or count < 10:
                break
            cut = first + (last - first) // 10 + 1
            dropped += db.execute("DELETE FROM rows WHERE id < ?", (cut,)).rowcount
    if dropped:
        db.execute("PRAGMA incremental_vacuum")
    return dropped


def snapshot(src: Path, dst: Path) -> int:
    """A consistent copy of the recording ``src`` (a recorder may be writing to it) as the new
    file ``dst``: SQLite's backup API copies every page, the write-ahead log's included, as of
    one instant, and the copy is one file (rollback journal, no ``-wal`` to carry along).
    Returns the rows copied. RecordingError for bad input."""
    if dst.exists():
        raise RecordingError(f"{dst}: exists; --snapshot-to writes a new file")
    db = open_recording(src)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        out = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.backup(out)  # all pages in one step: one read transaction, one instant
            out.execute("PRAGMA journal_mode = DELETE")
            rows = out.execute("SELECT COUNT(*) FROM rows").fetchone()[0]
        finally:
            out.close()
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        if dst.exists():
            raise RecordingError(f"{dst}: exists; --snapshot-to writes a new file")
        os.replace(tmp, dst)
    except sqlite3.Error as exc:
        raise RecordingError(f"{dst}: cannot write the copy: {exc}") from exc
    finally:
        db.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return int(rows)
