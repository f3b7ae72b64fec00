"""A plan: the sweep's probes, the knee, the boring zone, the recommended limits, and the
checks of those limits; built in simulated time, saved where the dashboard finds it.

The last plan for a gate (or a profile, or an endpoint) is saved as JSON under
``$XDG_STATE_HOME/gpuwatch/plans/`` (default ``~/.local/state/gpuwatch/plans/``), one file per
key: the gate's ``host-port``, else the endpoint's, else the profile's name.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuwatch.gate.limits import DEFAULT_LANES, MEDIA_CAPS, LaneLimits
from gpuwatch.plan.probe import ProbeResult, Target
from gpuwatch.plan.recommend import Recommendation, recommend
from gpuwatch.plan.simulate import run_probe
from gpuwatch.plan.sweep import (
    CHECK_FIRST,
    SIM_MAX_SEQUENCES,
    SIM_MIN_SEQUENCES,
    Search,
    SearchSettings,
    sequence_seed,
)
from gpuwatch.plan.traffic import Traffic
from gpuwatch.sim.profiles import Profile

PLAN_FORMAT = 1
DEFAULT_HEADROOM = 0.7
# The checks: the boring zone, and this much more traffic than it (a busy day's margin).
CHECK_SURGE = 1.3
# The gate's own defaults for the chat lane: the checks run the lane as a fresh gate holds it.
GATE_DEFAULT_CHAT = next(lane.limits for lane in DEFAULT_LANES if lane.name == "chat")


@dataclass
class Check:
    """A probe of the plan's own advice: a rate under given limits, and its verdict."""

    label: str
    limits: dict[str, Any]
    probe: ProbeResult

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "limits": self.limits, "probe": self.probe.to_json()}


@dataclass
class Plan:
    mode: str  # "sim" (in-process, simulated time) or "url" (a real endpoint, real time)
    subject: str  # the profile's name, or the endpoint's URL
    target: Target
    traffic: str
    seed: int
    headroom: float
    knee: float | None
    probes: list[ProbeResult]
    recommended: Recommendation | None
    checks: list[Check] = field(default_factory=list)
    gate: str | None = None  # the admin URL the plan is for, when one was named
    wall_s: float = 0.0
    simulated_s: float = 0.0
    created: str = field(
        default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds")
    )
    notes: list[str] = field(default_factory=list)
    # Arrival sequences per rate: the fewest and most, and the interval's half-width at which
    # a rate stops adding them (1 and 1: one sequence, judged over its requests).
    min_sequences: int = 1
    max_sequences: int = 1
    goodput_precision: float | None = None

    @property
    def boring(self) -> float | None:
        return self.knee * self.headroom if self.knee is not None else None

    def judged_as(self, search: Search) -> None:
        """Record how the search judged each rate (its sequences and precision)."""
        self.min_sequences = search.settings.min_sequences
        self.max_sequences = search.settings.max_sequences
        self.goodput_precision = search.precision if search.settings.replicated else None

    @property
    def at_knee(self) -> ProbeResult | None:
        """The probe run at the knee (the last one there, if several)."""
        if self.knee is None:
            return None
        found = [p for p in self.probes if math.isclose(p.rate, self.knee)]
        return found[-1] if found else None

    @property
    def sequences_run(self) -> int:
        return sum(p.sequences for p in self.probes) + sum(c.probe.sequences for c in self.checks)

    @property
    def key(self) -> str:
        return plan_key(self.gate or (self.subject if self.mode == "url" else None), self.subject)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "created": self.created,
            "mode": self.mode,
            "subject": self.subject,
            "gate": self.gate,
            "slo": {
                "ttft_p99_s": self.target.ttft_s,
                "itl_p99_s": self.target.itl_s,
                "goodput_min": self.target.goodput,
            },
            "traffic": self.traffic,
            "seed": self.seed,
            "headroom": self.headroom,
            "knee_rps": self.knee,
            "boring_rps": self.boring,
            "sequences": {
                "min": self.min_sequences,
                "max": self.max_sequences,
                "goodput_precision": self.goodput_precision,
                "run": self.sequences_run,
            },
            "knee_spread": _spread_json(self.at_knee),
            "recommended": self.recommended.to_json() if self.recommended else None,
            "probes": [p.to_json() for p in self.probes],
            "checks": [c.to_json() for c in self.checks],
            "wall_s": self.wall_s,
            "simulated_s": self.simulated_s,
            "notes": self.notes,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        slo = data["slo"]
        rec = data.get("recommended")
        seqs = data.get("sequences") or {}
        return cls(
            mode=data["mode"],
            subject=data["subject"],
            target=Target(slo["ttft_p99_s"], slo.get("itl_p99_s"), slo["goodput_min"]),
            traffic=data.get("traffic", ""),
            seed=data.get("seed", 0),
            headroom=data.get("headroom", DEFAULT_HEADROOM),
            knee=data.get("knee_rps"),
            probes=[ProbeResult.from_json(p) for p in data.get("probes", [])],
            recommended=Recommendation.from_json(rec) if rec else None,
            checks=[
                Check(c["label"], c["limits"], ProbeResult.from_json(c["probe"]))
                for c in data.get("checks", [])
            ],
            gate=data.get("gate"),
            wall_s=data.get("wall_s", 0.0),
            simulated_s=data.get("simulated_s", 0.0),
            created=data.get("created", ""),
            notes=list(data.get("notes", [])),
            min_sequences=seqs.get("min", 1),
            max_sequences=seqs.get("max", 1),
            goodput_precision=seqs.get("goodput_precision"),
        )


def _spread_json(probe: ProbeResult | None) -> dict[str, Any] | None:
    """How the knee's goodput varied: across its sequences, or (one) over its requests."""
    if probe is None:
        return None
    return {
        "sequences": probe.sequences,
        "goodput": probe.attainment,
        "low": probe.low,
        "high": probe.high,
        "sd": probe.sd,
        "worst": probe.worst,
        "best": max(probe.seq_goodput) if probe.seq_goodput else probe.attainment,
    }


def sweep_sim(
    profile: Profile,
    traffic: Traffic,
    target: Target,
    seed: int = 0,
    headroom: float = DEFAULT_HEADROOM,
    settings: SearchSettings | None = None,
    gate: str | None = None,
    check: bool = True,
    on_probe: Any = None,
) -> Plan:
    """The sweep in simulated time: search, recommend, then check the advice on arrival
    sequences the search never saw (the boring rate under the recommended limits, and
    ``CHECK_SURGE`` x it under the same limits). Without ``settings``, each rate is judged
    over ``SIM_MIN_SEQUENCES`` to ``SIM_MAX_SEQUENCES`` sequences."""
    wall0 = time.perf_counter()
    settings = settings or SearchSettings(
        min_sequences=SIM_MIN_SEQUENCES, max_sequences=SIM_MAX_SEQUENCES
    )
    search = Search(target, settings, on_probe=on_probe)

    def prober(rate: float, duration: float, sequence: int) -> ProbeResult:
        return run_probe(
            profile, traffic, rate, duration, target, seed=sequence_seed(seed, sequence)
        )

    knee = search.run(prober)
    plan = Plan("sim", profile.name, target, traffic.describe(), seed, headroom, knee,
                search.probes, None, gate=gate)  # fmt: skip
    plan.judged_as(search)
    at_knee = plan.at_knee
    if knee is not None and at_knee is not None:
        plan.recommended = recommend(
            knee, at_knee, target, traffic, profile.kv_tokens, profile.max_num_seqs
        )
        if check:
            boring = knee * headroom
            # The recommendation applied to a fresh gate: what --apply would leave in force.
            limits = GATE_DEFAULT_CHAT.with_values(plan.recommended.limits())

            def checker(rate: float, duration: float, sequence: int) -> ProbeResult:
                fresh = sequence_seed(seed, CHECK_FIRST + sequence)
                return run_probe(profile, traffic, rate, duration, target, limits, seed=fresh)

            for label, rate in (
                ("boring zone, recommended limits", boring),
                (f"{CHECK_SURGE:g}x the boring zone, recommended limits", boring * CHECK_SURGE),
            ):
                probe = search.measure(checker, rate, search.duration_for(rate))
                plan.checks.append(Check(label, _limits_json(limits), probe))
    else:
        plan.notes.append("no rate passed: even the lowest rate tried misses the SLO")
    caveats(plan)
    plan.simulated_s = sum(p.duration_s * p.sequences for p in search.probes) + sum(
        c.probe.duration_s * c.probe.sequences for c in plan.checks
    )
    plan.wall_s = time.perf_counter() - wall0
    return plan


def caveats(plan: Plan) -> None:
    """Notes on what the search could not show (added to ``plan.notes``)."""
    if plan.knee is not None and not any(p.passed is False for p in plan.probes):
        plan.notes.append(
            f"no rate failed before the search stopped: the knee is at least {plan.knee:.2f} "
            "req/s (raise --max-probes or --start-rate)"
        )
    guessed = [p for p in plan.probes if p.decided_by == "estimate"]
    if guessed:
        plan.notes.append(
            f"{len(guessed)} probe(s) too short to be decided with 95% confidence were judged "
            "by their point estimate (~); longer probes (--max-duration) decide them"
        )
    unshown = [p for p in plan.probes if p.decided_by == "bound"]
    if unshown:
        plan.notes.append(
            f"{len(unshown)} rate(s) whose interval across sequences still straddled the "
            "target when they stopped (~) were failed: not shown to hold; more sequences "
            "(--max-sequences, a smaller --goodput-precision) may show them"
        )


def _limits_json(lim: LaneLimits) -> dict[str, Any]:
    """The lane's limits a check ran under (the image and embedding caps, which a chat
    request never meets, left out)."""
    return {k: v for k, v in asdict(lim).items() if k not in MEDIA_CAPS and k != "media_policy"}


# -- the state dir --------------------------------------------------------------------------


def plans_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpuwatch" / "plans"


def plan_key(url: str | None, fallback: str) -> str:
    """``http://127.0.0.1:9000`` -> ``127.0.0.1-9000``; a profile name as it is."""
    if url:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        host = parts.hostname or "unknown"
        port = parts.port or (443 if parts.scheme == "https" else 80)
        fallback = f"{host}-{port}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", fallback)[:120] or "plan"


def save(plan: Plan, directory: Path | None = None) -> Path:
    directory = directory or plans_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{plan.key}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(plan.to_json(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load_for(url: str | None, directory: Path | None = None) -> Plan | None:
    """The last plan saved for the gate at ``url``, or None."""
    if not url:
        return None
    path = (directory or plans_dir()) / f"{plan_key(url, '')}.json"
    try:
        return Plan.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
