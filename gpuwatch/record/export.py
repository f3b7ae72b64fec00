"""A time range of a recording into a small file of its own, to attach to a ticket.

The range starts ``LEAD_S`` early, so the windowed numbers (the 1-minute percentiles, the
10-second rates, the badge's hold) at its first instant are what they were; the new file says
where the range itself begins (``view_from``) and a replay opens there.
"""

from __future__ import annotations

from pathlib import Path

from gpuwatch.record import codec, store
from gpuwatch.record.player import limits_before
from gpuwatch.record.recorder import SAME_LIMITS

LEAD_S = 120.0


def export(src: Path, dst: Path, start: float, end: float) -> int:
    """Copy rows with ``start - LEAD_S <= wall <= end`` and the audit entries of the range
    into ``dst`` (a new file); the number of rows copied. RecordingError for bad input."""
    if dst.exists():
        raise store.RecordingError(f"{dst}: exists; export writes a new file")
    db = store.open_recording(src)
    try:
        lo = start - LEAD_S
        meta = store.read_meta(db)
        first = db.execute(
            "SELECT mono FROM rows WHERE wall >= ? ORDER BY id LIMIT 1", (lo,)
        ).fetchone()
        meta.update(
            {"exported_from": str(src), "view_from": start, "view_to": end},
            started=first[0] if first else meta.get("started"),
        )
        meta.pop("created", None)
        out = store.create(dst, meta)
        try:
            dictionaries = store.dictionaries(db)
            gate_dict = dictionaries.get(codec.dictionary_key("gate", None), b"")
            first = db.execute("SELECT MIN(id) FROM rows WHERE wall >= ?", (lo,)).fetchone()[0]
            limits = limits_before(db, first, gate_dict) if first is not None else None
            rows = []
            for row in store.rows_between(db, lo, end):
                data = row.data
                if row.kind == "gate" and limits is not None:
                    # The first gate row may say "the same as before": say what that was.
                    try:
                        body = codec.unpack(data, gate_dict)
                        if body.get("limits") == SAME_LIMITS:
                            body["limits"] = limits
                            data = codec.pack(body, gate_dict)
                        limits = None
                    except (codec.CodecError, AttributeError):
                        pass
                rows.append((row.mono, row.wall, row.kind, row.source, data))
            # Every dictionary: the copied rows were compressed against them.
            store.insert_rows(out, rows, dictionaries.items())
            store.insert_audit(out, store.audit_entries(db, lo, end))
        finally:
            out.close()
    finally:
        db.close()
    return len(rows)
