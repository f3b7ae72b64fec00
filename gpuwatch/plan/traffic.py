"""The traffic a sweep replays at each rate (pure): the load generator's shapes, or a recording.

``Traffic`` is what ``gpuwatch load`` is told (gamma arrivals with a burstiness, a pattern, a
lane mix, prompt and output length distributions), with the arrival times drawn by the very
same ``gpuwatch.load.spec.arrival_times``. A ``Recording`` replays the arrival times and shapes
of a ``gpuwatch load --json`` report instead, compressed or stretched in time to each rate, so a
recorded burst keeps its shape at every rate the sweep tries.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuwatch.errors import EXIT_USAGE, GpuwatchError
from gpuwatch.load.spec import Dist, LoadSpec, Pattern, arrival_times

# Defaults: chat traffic with a long output tail, arriving in bursts (gamma shape 0.5: the gaps'
# coefficient of variation is 1.4, where Poisson's is 1).
DEFAULT_PROMPT = "128:1024"
DEFAULT_OUTPUT = "lognormal:mean=128,sigma=0.6"
DEFAULT_BURSTINESS = 0.5


class TrafficError(GpuwatchError, ValueError, exit_code=EXIT_USAGE):
    """A traffic file or option that cannot be used; the message names it."""


@dataclass(frozen=True)
class Arrival:
    t: float  # seconds since the probe started
    lane: str  # "chat" or "embed"
    prompt: int
    output: int  # max_tokens; 0 for embed


@dataclass(frozen=True)
class Recording:
    """Arrival offsets (seconds, first at 0) and each request's lane and token counts."""

    offsets: tuple[float, ...]
    lanes: tuple[str, ...]
    prompts: tuple[int, ...]
    outputs: tuple[int, ...]
    source: str = ""

    @property
    def native_rate(self) -> float:
        """Requests per second as recorded (one mean gap added, so a loop keeps the rate)."""
        n = len(self.offsets)
        span = self.offsets[-1] - self.offsets[0]
        return n / (span + span / max(n - 1, 1)) if span > 0 else float(n)

    @classmethod
    def load(cls, path: Path) -> Recording:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise TrafficError(f"--traffic {path}: cannot read JSON: {exc}") from exc
        return cls.from_report(data, str(path))

    @classmethod
    def from_report(cls, data: Any, source: str = "") -> Recording:
        """A ``gpuwatch load --json`` report: ``start_times``, ``input_lens``, ``output_lens``,
        ``lanes`` and ``errors`` per request. A failed request's output length is unknown
        (0 in the report); it gets the median of the completed ones."""
        where = f"--traffic {source}" if source else "--traffic"
        if not isinstance(data, dict):
            raise TrafficError(f"{where}: expected a gpuwatch load --json report (an object)")
        try:
            starts = [float(x) for x in data["start_times"]]
            prompts = [int(x) for x in data["input_lens"]]
            outputs = [int(x) for x in data["output_lens"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise TrafficError(
                f"{where}: needs per-request start_times, input_lens and output_lens "
                f"(gpuwatch load --json): {type(exc).__name__}: {exc}"
            ) from None
        n = len(starts)
        lanes = [str(x) for x in data.get("lanes") or ["chat"] * n]
        errors = [str(x) for x in data.get("errors") or [""] * n]
        if n < 2 or not len(prompts) == len(outputs) == len(lanes) == len(errors) == n:
            raise TrafficError(f"{where}: needs at least 2 requests and arrays of one length")
        sent = [(s, i) for i, s in enumerate(starts) if s > 0 or i == 0]
        done = sorted(
            o for o, e, lane in zip(outputs, errors, lanes, strict=True) if not e and lane == "chat"
        )
        fallback = done[len(done) // 2] if done else 128
        sent.sort()
        t0 = sent[0][0]
        return cls(
            offsets=tuple(s - t0 for s, _ in sent),
            lanes=tuple(lanes[i] for _, i in sent),
            prompts=tuple(max(1, prompts[i]) for _, i in sent),
            outputs=tuple(
                0
                if lanes[i] == "embed"
                else (outputs[i] if outputs[i] > 0 and not errors[i] else fallback)
                for _, i in sent
            ),
            source=source,
        )


@dataclass(frozen=True)
class Traffic:
    burstiness: float = DEFAULT_BURSTINESS
    pattern: Pattern = field(default_factory=Pattern)
    prompt_tokens: Dist = field(default_factory=lambda: Dist.parse(DEFAULT_PROMPT, "prompt"))
    output_tokens: Dist = field(default_factory=lambda: Dist.parse(DEFAULT_OUTPUT, "output"))
    lane_mix: dict[str, float] = field(default_factory=lambda: {"chat": 1.0})
    recording: Recording | None = None

    def describe(self) -> str:
        if self.recording is not None:
            r = self.recording
            return (
                f"replay of {r.source or 'a recording'}: {len(r.offsets)} requests, "
                f"{r.native_rate:.2f} req/s as recorded"
            )
        p = self.pattern
        pattern = (
            "steady"
            if p.period <= 0
            else f"spike:period={p.period:g},duty={p.duty:g},factor={p.factor:g}"
        )
        mix = ",".join(f"{k}={v:g}" for k, v in self.lane_mix.items())
        return (
            f"gamma arrivals, burstiness {self.burstiness:g}, {pattern}; prompts "
            f"{self.prompt_tokens}, outputs {self.output_tokens}; lanes {mix}"
        )

    def arrivals(self, rate: float, duration_s: float, seed: int) -> Iterator[Arrival]:
        """Requests arriving in [0, duration_s] at mean ``rate`` req/s, seeded."""
        if self.recording is not None:
            yield from _replay(self.recording, rate, duration_s)
            return
        spec = LoadSpec(
            url="sim",
            rate=rate,
            duration_s=duration_s,
            burstiness=self.burstiness,
            pattern=self.pattern,
        )
        times = random.Random(seed)
        shapes = random.Random(seed + 1)
        lanes = list(self.lane_mix)
        weights = [self.lane_mix[k] for k in lanes]
        for t in arrival_times(spec, times):
            if t > duration_s:
                return
            lane = shapes.choices(lanes, weights)[0] if len(lanes) > 1 else lanes[0]
            prompt = self.prompt_tokens.sample(shapes)
            output = self.output_tokens.sample(shapes) if lane == "chat" else 0
            yield Arrival(t, lane, prompt, output)

    def output_quantile(self, q: float, seed: int = 0, n: int = 20_000) -> int:
        """The q-quantile of max_tokens per chat request (drawn, or as recorded)."""
        if self.recording is not None:
            r = self.recording
            pairs = zip(r.outputs, r.lanes, strict=True)
            values = sorted(o for o, lane in pairs if lane == "chat") or [1]
        else:
            rng = random.Random(seed)
            values = sorted(self.output_tokens.sample(rng) for _ in range(n))
        return values[min(len(values) - 1, math.ceil(q * len(values)) - 1)]

    def session_quantile(self, q: float, seed: int = 0, n: int = 20_000) -> int:
        """The q-quantile of prompt + output tokens per chat request: one session's KV."""
        if self.recording is not None:
            r = self.recording
            triples = zip(r.prompts, r.outputs, r.lanes, strict=True)
            values = sorted(p + o for p, o, lane in triples if lane == "chat") or [1]
        else:
            rng = random.Random(seed)
            values = sorted(
                self.prompt_tokens.sample(rng) + self.output_tokens.sample(rng) for _ in range(n)
            )
        return values[min(len(values) - 1, math.ceil(q * len(values)) - 1)]


def _replay(rec: Recording, rate: float, duration_s: float) -> Iterator[Arrival]:
    """The recording's offsets scaled so its mean rate is ``rate``, looped to fill the time."""
    scale = rec.native_rate / rate
    period = len(rec.offsets) / rate  # one pass, its last gap included
    base = 0.0
    while True:
        for off, lane, prompt, output in zip(
            rec.offsets, rec.lanes, rec.prompts, rec.outputs, strict=True
        ):
            t = base + off * scale
            if t > duration_s:
                return
            yield Arrival(t, lane, prompt, output)
        base += period
