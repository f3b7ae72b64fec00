"""A reading the monitor is fed, to a compact row and back (JSON, zlib-compressed).

A scrape is kept as the prefiltered page it was mapped from (the wanted families only, not
the raw page; of the gate's own page, only the families the dashboard shows:
``RECORDED_FOR_GATE``), and mapped again on replay by the same dialects (``Page``); a scrape without
one (an error, or made by hand) as its engines. Elsewhere only what ``Monitor.apply_*`` reads
is kept: ``None`` fields are left out, a histogram is its bounds and counts. Floats go
through ``repr`` both ways, so a decoded reading equals the one recorded.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import asdict, dataclass, fields
from typing import Any

from gpuwatch.adminapi import GateStatus, Limits
from gpuwatch.errors import GpuwatchError
from gpuwatch.model import (
    ContainerInfo,
    EngineSnapshot,
    GpuReading,
    GpuSample,
    Histogram,
    HostSample,
    MigInstance,
    ProcessInfo,
    ScrapeResult,
)
from gpuwatch.monitor.state import Event
from gpuwatch.sources.scrape import RECORDED_FOR_GATE, prefilter

# A row larger than this once decompressed is not one we wrote (a 256-engine page is ~2 MB).
MAX_ROW_BYTES = 32 * 1024 * 1024
# A gate row whose limits equal the previous row's stores this instead of them.
SAME_LIMITS = "="
# The clocks a recorder can have written: a wall clock up to the end of year 9999 (what date
# functions format), a monotonic one within +-31,700 years. Anything else is a damaged row.
MAX_WALL = 253402300799
MAX_MONO = 1e12


def plausible_wall(t: object) -> bool:
    return isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t <= MAX_WALL


@dataclass(frozen=True)
class Page:
    """A recorded scrape that answered: its prefiltered page, to be mapped again."""

    source: str
    text: str
    warnings: list[str]


class CodecError(GpuwatchError, ValueError):
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


def _process_back(p: dict[str, Any]) -> ProcessInfo:
    container = p.pop("container", None)
    return ProcessInfo(**p, container=ContainerInfo(**container) if container else None)


def _gpu_back(d: dict[str, Any]) -> GpuSample:
    procs = [_process_back(dict(p)) for p in d.pop("processes", [])]
    mig = [MigInstance(**m) for m in d.pop("mig", [])]
    return GpuSample(**d, processes=procs, mig=mig)


def encode_payload(kind: str, payload: Any) -> Any:
    """The JSON-able form of what ``Monitor`` was fed under ``kind``."""
    if kind == "scrape":
        r: ScrapeResult = payload
        out: dict[str, Any] = {"source": r.source}
        if r.page is not None and r.engines and r.error is None:
            gate = all(e.dialect == "gate" for e in r.engines)
            out["page"] = prefilter(r.page, RECORDED_FOR_GATE).text if gate else r.page
            if r.warnings:
                out["warnings"] = r.warnings
            return out
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
        return {
            "limits": limits if limits in (None, SAME_LIMITS) else limits.to_json(),
            "status": None if status is None else status.to_json(),
            "error": error,
            "current": current,
        }
    if kind == "event":
        e: Event = payload
        return {"t": e.time, "level": e.level, "text": e.text}
    if kind == "slo":
        return {"budget": list(payload)}
    return None  # "stale", "evaluate": the call is all there is


def decode_payload(kind: str, data: Any) -> Any:
    """The reading back from ``encode_payload``'s form; CodecError when it is not one."""
    try:
        if kind == "scrape" and "page" in data:
            return Page(str(data["source"]), str(data["page"]), list(data.get("warnings", [])))
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
            # As the gate answered, read as the client reads it (an older gate's lacks keys).
            limits, status = data["limits"], data["status"]
            return (
                limits if limits in (None, SAME_LIMITS) else Limits.from_json(limits),
                None if status is None else GateStatus.from_json(status),
                data["error"],
                bool(data["current"]),
            )
        if kind == "event":
            if not plausible_wall(data["t"]):
                raise ValueError(f"an event at {str(data['t'])[:40]} is at no date")
            return Event(float(data["t"]), data["level"], str(data["text"]))
        if kind == "slo":
            return [str(segment) for segment in data["budget"]]
        if kind in ("stale", "evaluate"):
            return None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CodecError(f"a {kind} row does not decode: {type(exc).__name__}: {exc}") from exc
    raise CodecError(f"unknown row kind {kind!r}")


def to_json(value: Any) -> bytes:
    # +Inf is a bucket bound: Python's JSON writes it as Infinity and reads it back.
    return json.dumps(value, separators=(",", ":")).encode()


def dictionary_key(kind: str, source: str | None) -> str:
    """Rows of one kind from one source share a compression dictionary."""
    return f"{kind} {source or ''}"


def pack(value: Any, zdict: bytes = b"") -> bytes:
    """``value`` (or its JSON, already made) compressed; with ``zdict``, against that
    dictionary: the first row of the same kind and source, whose names, labels and bucket
    bounds the later rows repeat (a page's row shrinks to about a third)."""
    raw = value if isinstance(value, bytes) else to_json(value)
    packer = zlib.compressobj(6, zdict=zdict) if zdict else zlib.compressobj(6)
    return packer.compress(raw) + packer.flush()


def inflate(blob: bytes, zdict: bytes = b"") -> bytes:
    """``blob`` decompressed, refused past MAX_ROW_BYTES: a file is anyone's, and a few MB
    of zlib can inflate to gigabytes (rows and dictionaries alike)."""
    try:
        d = zlib.decompressobj(zdict=zdict) if zdict else zlib.decompressobj()
        raw = d.decompress(blob, MAX_ROW_BYTES)
    except (zlib.error, TypeError, ValueError) as exc:  # TypeError: a TEXT cell, not a BLOB
        raise CodecError(f"a blob does not decompress: {type(exc).__name__}") from exc
    if d.unconsumed_tail:
        raise CodecError(f"a blob over {MAX_ROW_BYTES} bytes once decompressed")
    return raw


def unpack(blob: bytes | None, zdict: bytes = b"") -> Any:
    if blob is None:
        return None
    # Inflated outside the try: its CodecError (a ValueError) says why, and is not re-wrapped
    # as "a row does not decode: CodecError".
    raw = inflate(blob, zdict)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CodecError(f"a row does not decode: {type(exc).__name__}") from exc
