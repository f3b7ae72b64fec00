"""Every simulator profile is believable: its prefill and decode throughput, run through the
simulator's engine, within 0.5x-2x of the published measurement cited beside it
(``gpuwatch.sim.profiles.MEASURED``), and at the ratios the citations state."""

from __future__ import annotations

import pytest

from gpuwatch.sim.engine import Engine, Request
from gpuwatch.sim.profiles import MEASURED, PROFILES


def sim_time(name: str, requests: int, prompt: int, output: int) -> float:
    """Simulated seconds to serve ``requests`` distinct requests arriving at once."""
    engine = Engine(PROFILES[name], seed=1, prefix_caching=False)
    for i in range(requests):
        engine.add(Request(f"r{i}", prompt, output, 0.0))
    steps = 0
    while not engine.idle:
        engine.step()
        steps += 1
        assert steps < 100_000
    return engine.now


def prefill_tps(name: str) -> float:
    """One request's prompt tokens/s at 512 tokens (as llama-bench pp512): 512 / TTFT."""
    return 512 / sim_time(name, 1, 512, 1)


def decode_tps(name: str) -> float:
    """One request's output tokens/s after a 512-token prompt (as llama-bench tg512)."""
    return 128 / (sim_time(name, 1, 512, 129) - sim_time(name, 1, 512, 1))


def test_every_profile_has_a_measurement() -> None:
    assert set(MEASURED) == set(PROFILES)
    for m in MEASURED.values():
        assert m.source and m.setup
        assert m.prefill_tps or m.decode_tps or m.output_tps


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_is_within_a_factor_of_two_of_its_measurement(name: str) -> None:
    m = MEASURED[name]
    if m.prefill_tps:
        assert 0.5 <= prefill_tps(name) / m.prefill_tps <= 2.0
    if m.decode_tps:
        assert 0.5 <= decode_tps(name) / m.decode_tps <= 2.0
    if m.batch and m.output_tps:
        n, prompt, output = m.batch
        assert 0.5 <= n * output / sim_time(name, n, prompt, output) / m.output_tps <= 2.0


@pytest.mark.parametrize(
    ("name", "prefill", "decode"),
    [
        ("rtx4090-llama3-8b-awq", 0.68, 0.75),
        ("rtx4090-qwen2.5-14b-awq", 0.86, 0.73),
        ("l40s-llama3-8b-fp16", 1.55, 0.87),
        ("h100-llama3-70b-fp8", None, 1.33),
    ],
)
def test_the_ratios_the_notes_state(name: str, prefill: float | None, decode: float) -> None:
    m = MEASURED[name]
    if prefill is not None:
        assert m.prefill_tps is not None
        assert prefill_tps(name) / m.prefill_tps == pytest.approx(prefill, abs=0.02)
    assert m.decode_tps is not None
    assert decode_tps(name) / m.decode_tps == pytest.approx(decode, abs=0.02)


@pytest.mark.parametrize(
    ("name", "ratio"), [("h100-llama3-70b-fp8", 0.55), ("h200-llama3-70b-fp8", 0.62)]
)
def test_the_fp8_70b_batch_ratios(name: str, ratio: float) -> None:
    m = MEASURED[name]
    assert m.batch is not None and m.output_tps is not None
    n, prompt, output = m.batch
    sim = n * output / sim_time(name, n, prompt, output)
    assert sim / m.output_tps == pytest.approx(ratio, abs=0.02)
