"""A reading the monitor is fed, to a compact row and back (JSON, zlib-compressed).

Only what ``Monitor.apply_*`` reads is kept: ``None`` fields are left out, a histogram is its
bounds and counts. Floats go through ``repr`` both ways, so a decoded reading is equal to the
one recorded, and the monitor fed it computes the same numbers.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import asdict, fields
from typing import Any

from gpuwatch.model import (
    EngineSnapshot,
    GpuReading,
    GpuSample,
    Histogram,
    HostSample,
    ProcessInfo,
    ScrapeResult,
)
from gpuwatch.monitor.state import Event

# A row larger than this once decompressed is not one we wrote (a 256-engine page is ~2 MB).
MAX_ROW_BYTES = 32 * 1024 * 1024


class CodecError(ValueError):
    """A row that does not decode into the reading its kind names."""


def _compact(obj: Any) -> dict[str, Any]:
    return {k: v for k, v in asdict(obj).items() if v is not None and v != [] and v != {}}


def _engine(snap: EngineSnapshot) -> dict[str, Any]:
    out = {f.name: getattr(snap, f.name) for f in fields(snap) if f.name != "histograms"}
    # The identity stays, even unknown (a model of None); unknown numbers are left out.
    out = {k: v for k, v in out.items() if v is not None or k in ("source", "dialect", "model")}
    if snap.histograms:
        out["h"] = {
            kind: [[b for b, _ in h.buckets], [c for _, c in h.buckets], h.sum, h.count]
            for kind, h in snap.histograms.items()
        }
    return out


def _engine_back(d: dict[str, Any]) -> EngineSnapshot:
    hist = d.pop("h", {})
    snap = EngineSnapshot(**d)
    snap.histograms = {
        kind: Histogram(tuple(zip(les, counts, strict=True)), total, count)
        for kind, (les, counts, total, count) in hist.items()
    }
    return snap


def _gpu_back(d: dict[str, Any]) -> GpuSample:
    procs = [ProcessInfo(**p) for p in d.pop("processes", [])]
    return GpuSample(**d, processes=procs)


def encode_payload(kind: str, payload: Any) -> Any:
    """The JSON-able form of what ``Monitor`` was fed under ``kind``."""
    if kind == "scrape":
        r: ScrapeResult = payload
        out: dict[str, Any] = {"source": r.source}
        if r.engines:
            out["engines"] = [_engine(e) for e in r.engines]
        if r.error is not None:
            out["error"] = r.error
        if r.warnings:
            out["warnings"] = r.warnings
        if r.unreachable:
            out["unreachable"] = True
        return out
    if kind == "gpus":
        g: GpuReading = payload
        return {"gpus": [_compact(s) for s in g.gpus], "error": g.error}
    if kind == "host":
        return asdict(payload)
    if kind == "gate":
        limits, status, error, current = payload
        return {"limits": limits, "status": status, "error": error, "current": current}
    if kind == "event":
        e: Event = payload
        return {"t": e.time, "level": e.level, "text": e.text}
    return None  # "stale", "evaluate": the call is all there is


def decode_payload(kind: str, data: Any) -> Any:
    """The reading back from ``encode_payload``'s form; CodecError when it is not one."""
    try:
        if kind == "scrape":
            return ScrapeResult(
                data["source"],
                [_engine_back(dict(e)) for e in data.get("engines", [])],
                data.get("error"),
                list(data.get("warnings", [])),
                bool(data.get("unreachable", False)),
            )
        if kind == "gpus":
            return GpuReading([_gpu_back(dict(s)) for s in data["gpus"]], data["error"])
        if kind == "host":
            return HostSample(**data)
        if kind == "gate":
            return (data["limits"], data["status"], data["error"], bool(data["current"]))
        if kind == "event":
            return Event(float(data["t"]), data["level"], str(data["text"]))
        if kind in ("stale", "evaluate"):
            return None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CodecError(f"a {kind} row does not decode: {type(exc).__name__}: {exc}") from exc
    raise CodecError(f"unknown row kind {kind!r}")


def pack(value: Any) -> bytes:
    # +Inf is a bucket bound: Python's JSON writes it as Infinity and reads it back.
    return zlib.compress(json.dumps(value, separators=(",", ":")).encode(), 6)


def unpack(blob: bytes | None) -> Any:
    if blob is None:
        return None
    try:
        d = zlib.decompressobj()
        raw = d.decompress(blob, MAX_ROW_BYTES)
        if d.unconsumed_tail:
            raise CodecError(f"a row over {MAX_ROW_BYTES} bytes")
        return json.loads(raw)
    except (zlib.error, ValueError, RecursionError) as exc:
        raise CodecError(f"a row does not decode: {type(exc).__name__}") from exc
