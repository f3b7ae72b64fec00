"""What ``gpuwatch load`` is asked to do, parsed from its arguments (pure).

Every parser raises ``SpecError`` naming the argument and what is wrong with it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

SLO_KEYS = ("ttft", "tpot", "itl", "e2e")


class SpecError(ValueError):
    """A bad argument: the CLI turns it into a usage error (exit 2)."""


def _kv(text: str, what: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, text.split(",")):
        key, sep, raw = part.partition("=")
        if not sep:
            raise SpecError(f"{what}: expected key=value, got {part!r}")
        try:
            out[key.strip()] = float(raw)
        except ValueError:
            raise SpecError(f"{what}: {key.strip()} must be a number, got {raw!r}") from None
    return out


@dataclass(frozen=True)
class Dist:
    """A token-count distribution: fixed, uniform, or lognormal (given its mean)."""

    kind: str
    a: float
    b: float = 0.0

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        # lognormal parametrized by its mean: mu = ln(mean) - sigma^2 / 2
        mu = math.log(self.a) - self.b**2 / 2
        return max(1, round(rng.lognormvariate(mu, self.b)))

    def __str__(self) -> str:
        """The spelling ``parse`` reads: ``512``, ``128:2048``, ``lognormal:mean=800,sigma=0.6``."""
        if self.kind == "fixed":
            return f"{int(self.a)}"
        if self.kind == "uniform":
            return f"{int(self.a)}:{int(self.b)}"
        return f"lognormal:mean={self.a:g},sigma={self.b:g}"

    @classmethod
    def parse(cls, text: str, what: str) -> Dist:
        try:
            if text.startswith("lognormal:"):
                params = _kv(text.split(":", 1)[1], what)
                if set(params) != {"mean", "sigma"}:
                    raise SpecError(f"{what}: lognormal needs mean= and sigma=, got {text!r}")
                if params["mean"] < 1 or params["sigma"] <= 0:
                    raise SpecError(f"{what}: lognormal needs mean >= 1 and sigma > 0")
                return cls("lognormal", params["mean"], params["sigma"])
            if ":" in text:
                lo, hi = (int(x) for x in text.split(":"))
                if not 1 <= lo <= hi:
                    raise SpecError(f"{what}: range {text!r} needs 1 <= low <= high")
                return cls("uniform", lo, hi)
            value = int(text)
            if value < 1:
                raise SpecError(f"{what}: must be at least 1, got {value}")
            return cls("fixed", value)
        except ValueError as exc:
            if isinstance(exc, SpecError):
                raise
            raise SpecError(
                f"{what}: {text!r} is not N, LOW:HIGH or lognormal:mean=M,sigma=S"
            ) from None


@dataclass(frozen=True)
class Pattern:
    """Steady, or spikes: ``factor`` x the rate for the last ``duty`` of every ``period``
    seconds (calm first, so a run starts from the boring zone)."""

    period: float = 0.0
    duty: float = 0.0
    factor: float = 1.0

    def multiplier(self, t: float) -> float:
        if self.period <= 0:
            return 1.0
        return self.factor if (t % self.period) >= (1 - self.duty) * self.period else 1.0

    @classmethod
    def parse(cls, text: str) -> Pattern:
        if text == "steady":
            return cls()
        if not text.startswith("spike"):
            raise SpecError(
                f"--pattern: expected steady or spike:period=S,duty=F,factor=X, got {text!r}"
            )
        params = {"period": 60.0, "duty": 0.2, "factor": 5.0}
        if ":" in text:
            given = _kv(text.split(":", 1)[1], "--pattern")
            unknown = set(given) - set(params)
            if unknown:
                raise SpecError(f"--pattern: unknown key {sorted(unknown)[0]!r}")
            params.update(given)
        if params["period"] <= 0 or not 0 < params["duty"] <= 1 or params["factor"] <= 0:
            raise SpecError("--pattern: needs period > 0, 0 < duty <= 1, factor > 0")
        return cls(params["period"], params["duty"], params["factor"])


def parse_slo(text: str) -> dict[str, float]:
    slo = _kv(text, "--slo")
    for key, value in slo.items():
        if key not in SLO_KEYS:
            raise SpecError(f"--slo: unknown key {key!r} (known: {', '.join(SLO_KEYS)})")
        if value <= 0:
            raise SpecError(f"--slo: {key} must be above 0, got {value:g}")
    return slo


def parse_lane_mix(text: str) -> dict[str, float]:
    mix = _kv(text, "--lane-mix")
    for key, value in mix.items():
        if key not in ("chat", "embed"):
            raise SpecError(f"--lane-mix: unknown lane {key!r} (known: chat, embed)")
        if value < 0:
            raise SpecError(f"--lane-mix: {key} must be >= 0")
    if not mix or sum(mix.values()) <= 0:
        raise SpecError("--lane-mix: weights must add up to more than 0")
    total = sum(mix.values())
    return {k: v / total for k, v in mix.items()}


@dataclass(frozen=True)
class LoadSpec:
    url: str
    rate: float
    model: str | None = None
    api: str = "chat"
    duration_s: float | None = None
    requests: int | None = None
    burstiness: float = 1.0
    pattern: Pattern = field(default_factory=Pattern)
    max_concurrency: int | None = None
    prompt_tokens: Dist = field(default_factory=lambda: Dist("fixed", 512))
    output_tokens: Dist = field(default_factory=lambda: Dist("fixed", 128))
    lane_mix: dict[str, float] = field(default_factory=lambda: {"chat": 1.0})
    slo: dict[str, float] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.rate > 0 or math.isinf(self.rate):
            raise SpecError(f"--rate must be above 0, got {self.rate}")
        if not self.burstiness > 0:
            raise SpecError(f"--burstiness must be above 0, got {self.burstiness}")
        if (self.duration_s is None) == (self.requests is None):
            raise SpecError("give exactly one of --duration or --requests")
        if self.api not in ("chat", "completions"):
            raise SpecError(f"--api must be chat or completions, got {self.api!r}")


def arrival_times(spec: LoadSpec, rng: random.Random) -> Iterator[float]:
    """Planned send times, the first at 0: gamma gaps (shape = burstiness, scale = 1 / (rate x
    shape)), as ``vllm bench serve`` draws them; the pattern scales the rate at each arrival."""
    t, n = 0.0, 0
    while spec.requests is None or n < spec.requests:
        if spec.duration_s is not None and t > spec.duration_s:
            return
        yield t
        n += 1
        rate = spec.rate * spec.pattern.multiplier(t)
        t += rng.gammavariate(spec.burstiness, 1.0 / (rate * spec.burstiness))
