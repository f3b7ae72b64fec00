"""A plan: the sweep's probes, the knee, the boring zone, the recommended limits, and the
checks of those limits; built in simulated time, saved where the dashboard finds it.

The last plan for a gate (or a profile, or an endpoint) is saved as JSON under
``$XDG_STATE_HOME/gpuwatch/plans/`` (default ``~/.local/state/gpuwatch/plans/``), one file per
key: the gate's ``host-port``, else the endpoint's, else the profile's name.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuwatch.gate.limits import DEFAULT_LANES, MEDIA_CAPS, LaneLimits
from gpuwatch.plan.probe import ProbeResult, Target
from gpuwatch.plan.recommend import Recommendation, recommend
from gpuwatch.plan.simulate import run_probe
from gpuwatch.plan.sweep import Search, SearchSettings
from gpuwatch.plan.traffic import Traffic
from gpuwatch.sim.profiles import Profile

PLAN_FORMAT = 1
DEFAULT_HEADROOM = 0.7
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

    @property
    def boring(self) -> float | None:
        return self.knee * self.headroom if self.knee is not None else None

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
        )


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
    """The sweep in simulated time: search, recommend, then check the advice (the boring rate
    under the recommended limits, and 1.5x it under the gate's defaults)."""
    wall0 = time.perf_counter()
    search = Search(target, settings or SearchSettings(), on_probe=on_probe)

    def prober(rate: float, duration: float) -> ProbeResult:
        return run_probe(profile, traffic, rate, duration, target, seed=seed)

    knee = search.run(prober)
    plan = Plan("sim", profile.name, target, traffic.describe(), seed, headroom, knee,
                search.probes, None, gate=gate)  # fmt: skip
    if knee is not None:
        at_knee = search.at(knee)
        assert at_knee is not None
        plan.recommended = recommend(
            knee, at_knee, target, traffic, profile.kv_tokens, profile.max_num_seqs
        )
        if check:
            boring = knee * headroom
            rec = plan.recommended
            # The recommendation applied to a fresh gate: what --apply would leave in force.
            limits = replace(GATE_DEFAULT_CHAT, **rec.limits())
            duration = search.duration_for(boring) * 2
            for label, rate, lim in (
                ("boring zone, recommended limits", boring, limits),
                ("1.5x the boring zone, the gate's default limits", boring * 1.5,
                 GATE_DEFAULT_CHAT),
            ):  # fmt: skip
                probe = run_probe(profile, traffic, rate, duration, target, lim, seed=seed + 1)
                plan.checks.append(Check(label, _limits_json(lim), probe))
    else:
        plan.notes.append("no rate passed: even the lowest rate tried misses the SLO")
    caveats(plan)
    plan.simulated_s = sum(p.duration_s for p in search.probes) + sum(
        c.probe.duration_s for c in plan.checks
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
