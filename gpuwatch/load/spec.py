"""What ``gpuwatch load`` is asked to do, parsed from its arguments (pure).

Every parser raises ``SpecError`` naming the argument and what is wrong with it.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from gpuwatch.errors import EXIT_USAGE, GpuwatchError

SLO_KEYS = ("ttft", "tpot", "itl", "e2e")


class SpecError(GpuwatchError, ValueError, exit_code=EXIT_USAGE):
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


KINDS = ("chat", "embed", "image")
# Names sent in headers: a token a gate can map, nothing a header could be split on.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def parse_weights(text: str, what: str, known: tuple[str, ...] | None = None) -> dict[str, float]:
    """``a=0.7,b=0.3`` as weights that add up to 1; names checked against ``known``."""
    weights = _kv(text, what)
    for key, value in weights.items():
        if known is not None and key not in known:
            raise SpecError(f"{what}: unknown kind {key!r} (known: {', '.join(known)})")
        if known is None and not _NAME.match(key):
            raise SpecError(f"{what}: {key!r} is not a name (letters, digits, _ . -)")
        if value < 0:
            raise SpecError(f"{what}: {key} must be >= 0")
    if not weights or sum(weights.values()) <= 0:
        raise SpecError(f"{what}: weights must add up to more than 0")
    total = sum(weights.values())
    return {k: v / total for k, v in weights.items()}


def parse_lane_mix(text: str, what: str = "--mix") -> dict[str, float]:
    return parse_weights(text, what, KINDS)


def parse_sizes(text: str) -> tuple[tuple[int, int], ...]:
    """``1024x1024`` or ``512x512,1024x1024`` (one drawn per request, evenly)."""
    sizes = []
    for part in filter(None, text.split(",")):
        w, sep, h = part.strip().partition("x")
        if not (sep and w.isdigit() and h.isdigit()) or not (
            0 < int(w) <= 8192 and 0 < int(h) <= 8192
        ):
            raise SpecError(f"--image-size: expected WIDTHxHEIGHT, got {part!r}")
        sizes.append((int(w), int(h)))
    if not sizes:
        raise SpecError("--image-size: give at least one WIDTHxHEIGHT")
    return tuple(sizes)


@dataclass(frozen=True)
class EmbedShape:
    """An embeddings request: how many inputs, and how many tokens each."""

    inputs: Dist = field(default_factory=lambda: Dist("uniform", 1, 8))
    tokens: Dist = field(default_factory=lambda: Dist("uniform", 32, 512))


@dataclass(frozen=True)
class ImageShape:
    sizes: tuple[tuple[int, int], ...] = ((1024, 1024),)
    steps: Dist = field(default_factory=lambda: Dist("fixed", 30))
    n: Dist = field(default_factory=lambda: Dist("fixed", 1))


@dataclass(frozen=True)
class Tenancy:
    """``tenants`` tenants ``t01``... with Zipf weights 1 / rank^skew, and optionally one
    ``noisy`` tenant sending ``noisy`` times as much as the busiest of them."""

    tenants: int = 0
    skew: float = 1.0
    noisy: float = 0.0

    def __post_init__(self) -> None:
        if self.tenants < 0 or self.skew < 0 or self.noisy < 0:
            raise SpecError("--tenants, --tenant-skew and --noisy-tenant must be >= 0")
        if self.noisy and not self.tenants:
            raise SpecError("--noisy-tenant needs --tenants")

    def weights(self) -> dict[str, float]:
        width = len(str(self.tenants))
        raw = {f"t{k:0{max(2, width)}d}": 1 / k**self.skew for k in range(1, self.tenants + 1)}
        if self.noisy:
            raw["noisy"] = self.noisy * max(raw.values())
        total = sum(raw.values())
        return {k: v / total for k, v in raw.items()}


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
    embed: EmbedShape = field(default_factory=EmbedShape)
    image: ImageShape = field(default_factory=ImageShape)
    tenancy: Tenancy = field(default_factory=Tenancy)
    # Objective (class) names sent in x-llm-d-inference-objective, by weight; empty: none.
    classes: dict[str, float] = field(default_factory=dict)
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
