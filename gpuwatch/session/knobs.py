"""The node's native knobs: the serving stacks' own admin APIs its dashboard reads and steers.

Every ``[[knobs]]`` entry of the config is a source from the start; an engine whose dialect is a
stack with an admin API on its own port (``registry.discover``) becomes one once it has been
scraped. ``KnobReader.run`` (a poller of the session, so an async worker beside the scrapes,
never on the screen's paint) reads each source every ``interval_s``: a failure is one line in
the events (again only when the reason changes) and ``N/A`` on the source's row, never the end
of the loop. A source that was only guessed from a dialect and never answered (vLLM without
``VLLM_SERVER_DEV_MODE``) is dropped without a word: it has no knobs to show.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from gpuwatch.adminapi import AuditEntry
from gpuwatch.config import KnobConfig
from gpuwatch.control.knobs.apply import default_audit_path, open_audit
from gpuwatch.control.knobs.base import KnobEndpoint, KnobError
from gpuwatch.control.knobs.registry import adapter_for, discover, endpoint_of
from gpuwatch.control.knobs.steer import KnobSource
from gpuwatch.fmt import clip
from gpuwatch.gate.audit import AuditError, AuditLog
from gpuwatch.monitor.state import EventLevel, Monitor

log = logging.getLogger("gpuwatch.knobs")

# Knobs move when someone moves them: a read every few seconds shows that soon enough, and a
# change made here shows its read back at once.
KNOB_READ_S = 3.0

Say = Callable[[EventLevel, str], None]


class KnobReader:
    """The node's knob sources and the loop that keeps their knobs fresh."""

    def __init__(
        self,
        monitor: Callable[[], Monitor],
        configured: list[KnobConfig],
        say: Say,
        shown: Callable[[], None],
        interval_s: float = KNOB_READ_S,
    ) -> None:
        self._monitor = monitor
        self.configured = configured
        self._say = say
        self._shown = shown  # the rows changed: repaint
        self.interval_s = interval_s
        self.sources: list[KnobSource] = []
        self._seen: set[tuple[str, str]] = set()  # (stack, url) already tried
        self._looked: set[tuple[str, str]] = set()  # (metrics URL, dialect) already looked up
        for config in configured:
            try:
                self._add(endpoint_of(config), config.engine or None)
            except KnobError as exc:
                self._say("bad", f"knobs: {config.stack} {clip(config.url, 80)}: {exc}")

    def _add(self, endpoint: KnobEndpoint, engine: str | None, guessed: bool = False) -> None:
        key = (endpoint.stack, endpoint.base)
        if key in self._seen:
            return
        self._seen.add(key)
        self.sources.append(KnobSource(adapter_for(endpoint), engine, guessed=guessed))

    def discover(self) -> None:
        """A source for each scraped engine whose stack has its knobs on a known port."""
        for url, endpoint in self._monitor().endpoints.items():
            for view in endpoint.engines.values():
                dialect = view.snap.dialect
                if (url, dialect) in self._looked:
                    continue  # once: a credential file is not read again every few seconds
                self._looked.add((url, dialect))
                try:
                    found = discover(dialect, url, self.configured)
                    if found is not None:
                        self._add(found, url, guessed=not self._configured(found))
                except KnobError as exc:
                    log.info("knobs of %s (%s): %s", url, dialect, exc)

    def _configured(self, endpoint: KnobEndpoint) -> bool:
        return any(
            c.stack == endpoint.stack and c.url.rstrip("/") == endpoint.base
            for c in self.configured
        )

    async def read_all(self) -> None:
        """Read every source once (together: one slow stack does not hold the others)."""
        self.discover()
        before = [(s.knobs, s.error) for s in self.sources]
        await asyncio.gather(*(self._read(s) for s in list(self.sources)))
        if [(s.knobs, s.error) for s in self.sources] != before:
            self._shown()

    async def _read(self, source: KnobSource) -> None:
        try:
            knobs = await source.adapter.read()
        except KnobError as exc:
            self._failed(source, str(exc))
            return
        except Exception as exc:
            # An adapter's bug is that stack's N/A, not the end of every stack's reads.
            self._failed(source, f"{type(exc).__name__}: {exc}")
            return
        if source.error is not None:
            self._say("info", f"knobs of {source.stack} {clip(source.url, 80)} read again")
        source.shown(knobs)

    def _failed(self, source: KnobSource, reason: str) -> None:
        if source.guessed and not source.read:
            # Guessed from a dialect and never answered: that stack has no knob API here.
            log.info("no knobs at %s %s: %s", source.stack, source.url, reason)
            self.sources.remove(source)
            return
        if reason != source.error:
            self._say("warn", f"knobs of {source.stack} {clip(source.url, 80)}: N/A: {reason}")
        source.failed(reason)

    async def run(self) -> None:
        try:
            while True:
                await self.read_all()
                await asyncio.sleep(self.interval_s)
        finally:
            await self.close()

    async def close(self) -> None:
        for source in self.sources:
            try:
                await source.adapter.close()
            except KnobError as exc:
                log.info("closing knobs of %s: %s", source.url, exc)


def knob_audit(path: str, say: Say) -> AuditLog:
    """The local knob audit (``knob_audit`` in the config, else the default path); one that
    cannot be read back is said once and still appended to."""
    try:
        return open_audit(path or None)
    except AuditError as exc:
        say("bad", f"knob audit: {exc}")
        return AuditLog(Path(path) if path else default_audit_path())


def read_audit(path: Path, newest: int = 50) -> list[AuditEntry]:
    """The newest entries of the knob audit at ``path``, newest first, read from the file (it
    is appended to by ``gpuwatch limits set`` too); AuditError when it cannot be read back."""
    audit = AuditLog(path)
    audit.load()
    return list(audit.recent)[:newest]
