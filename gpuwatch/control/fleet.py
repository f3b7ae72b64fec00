"""One change for many gates: read each marked gate's limits, show every node's ``old -> new``,
then one PATCH per gate with its own ``If-Match``; each gate audits its own change.

The gates are the ones Prometheus scrapes (their ``gpuwatch_gate_*`` families); how to reach
each one's admin API comes from ``[gates."instance-glob"]`` in the config. The ``Guard`` is the
caller's one guard: read-only refuses before anything is read, and ``GateClient`` checks it
again before every PATCH. A gate that changed in between answers 409 and is reported as such,
never retried blindly.
"""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gpuwatch.adminapi import Limits, LimitsPatch
from gpuwatch.admintoken import read_token
from gpuwatch.config import GateTarget
from gpuwatch.control.gate import GateClient, GateConflict, GateError
from gpuwatch.control.guard import Guard
from gpuwatch.control.steering import Op, describe, patch_from

Result = Literal["applied", "409", "unreachable", "refused", "unchanged", "no admin"]


@dataclass(frozen=True)
class GateAddress:
    instance: str  # as Prometheus scrapes it
    node: str
    admin: str | None  # None: no [gates."glob"] matches this instance
    token_file: str = ""


def address_of(instance: str, node: str, targets: Mapping[str, GateTarget]) -> GateAddress:
    """The first ``[gates."glob"]`` whose glob matches the instance (file order)."""
    for glob, target in targets.items():
        if fnmatch.fnmatchcase(instance, glob) and target.admin:
            return GateAddress(
                instance, node, target.admin.replace("{instance}", instance), target.token_file
            )
    return GateAddress(instance, node, None)


@dataclass
class Planned:
    """One gate's part of the change, as shown for confirmation."""

    gate: GateAddress
    version: int | None = None
    before: Limits = field(default_factory=lambda: Limits(0, False))
    patch: LimitsPatch = field(default_factory=LimitsPatch)
    lines: list[str] = field(default_factory=list)
    problem: Result | None = None  # why this gate cannot take part
    detail: str = ""

    def summary(self) -> list[str]:
        head = f"{self.gate.node} ({self.gate.instance})"
        if self.problem:
            return [f"{head}: {self.problem}: {self.detail}"]
        return [f"{head} v{self.version}: {line}" for line in self.lines]


@dataclass
class Outcome:
    gate: GateAddress
    result: Result
    detail: str = ""
    version: int | None = None  # the version now in force, when the gate said


def lanes_of(planned: Sequence[Planned]) -> list[str]:
    """Every lane name any of the gates has, in first-seen order."""
    seen: dict[str, None] = {}
    for p in planned:
        for name in p.before.lanes:
            seen.setdefault(name)
    return list(seen)


class FleetChange:
    def __init__(self, guard: Guard, actor: str | None = None, timeout_s: float = 3.0) -> None:
        self.guard = guard
        self.actor = actor
        self.timeout_s = timeout_s

    def _client(self, gate: GateAddress) -> GateClient:
        assert gate.admin is not None
        token = read_token(Path(gate.token_file).expanduser()) if gate.token_file else None
        return GateClient(gate.admin, token, self.guard, self.actor, self.timeout_s)

    async def read(self, gates: Sequence[GateAddress]) -> list[Planned]:
        """Each gate's limits now (and their version): what a change will be based on."""
        self.guard.check(f"change of {len(gates)} gate(s)")
        return list(await asyncio.gather(*(self._read_one(g) for g in gates)))

    async def _read_one(self, gate: GateAddress) -> Planned:
        if gate.admin is None:
            return Planned(gate, problem="no admin", detail='no [gates."glob"] matches it')
        try:
            async with self._client(gate) as client:
                limits = await client.limits()
        except (GateError, ValueError) as exc:
            return Planned(gate, problem="unreachable", detail=str(exc))
        # Limits always have a version (an answer without one is a GateError): the If-Match.
        return Planned(gate, limits.version, limits)

    @staticmethod
    def plan(read: Sequence[Planned], ops: list[Op]) -> list[Planned]:
        """The PATCH ``ops`` amount to on each gate, against that gate's own limits."""
        for p in read:
            if p.problem:
                continue
            p.patch = patch_from(p.before, ops)
            p.lines = describe(p.before, p.patch)
            if not p.patch:
                p.problem, p.detail = "unchanged", "nothing to change on this gate"
        return list(read)

    async def apply(self, planned: Sequence[Planned]) -> list[Outcome]:
        """One PATCH per gate, each with its own If-Match; every gate answers for itself."""
        self.guard.check(f"change of {len(planned)} gate(s)")
        return list(await asyncio.gather(*(self._apply_one(p) for p in planned)))

    async def _apply_one(self, p: Planned) -> Outcome:
        if p.problem:
            return Outcome(p.gate, p.problem, p.detail)
        try:
            async with self._client(p.gate) as client:
                answer = await client.patch(p.patch, if_match=p.version)
        except GateConflict as exc:
            who = f" by {exc.actor}" if exc.actor else ""
            return Outcome(p.gate, "409", f"changed{who} since v{p.version}", exc.version)
        except GateError as exc:
            result: Result = "unreachable" if exc.status is None else "refused"
            return Outcome(p.gate, result, str(exc))
        except ValueError as exc:  # the token file, read again: gone or changed since
            return Outcome(p.gate, "refused", str(exc))
        return Outcome(p.gate, "applied", "; ".join(p.lines), answer.version)
