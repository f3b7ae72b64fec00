"""A lane's prompt and output caps and the tokens a request reserves (gate/caps.py), each at
its edge: what the client reads in a refusal, what a clamp rewrites and says, what is reserved.
(tests/functional/test_gate_bodies.py sends the same through a real gate.)"""

from __future__ import annotations

import pytest

from gpuwatch.adminapi import LaneLimits
from gpuwatch.gate.caps import CapRefused, OverCap, cap_output, check_text, output_bound
from gpuwatch.gate.request import Clamp, Output

CHAT = "/v1/chat/completions"


def refusal(output: Output | None, limits: LaneLimits, prompt: int | None = 10) -> CapRefused:
    with pytest.raises(CapRefused) as caught:
        check_text(output, limits, "chat", CHAT, prompt, 256)
    return caught.value


def test_the_prompt_cap_lets_its_own_length_through_and_refuses_one_more() -> None:
    limits = LaneLimits(max_prompt_tokens=100)
    assert check_text(None, limits, "chat", CHAT, 100, 256) == (Clamp(), 0)
    exc = refusal(None, limits, 101)
    assert exc.reason == "prompt_too_long"
    assert str(exc) == "prompt is 101 tokens; lane 'chat' allows 100"
    # A prompt of unknown length is not judged; without a cap nothing is.
    assert check_text(None, limits, "chat", CHAT, None, 256) == (Clamp(), 0)
    assert check_text(None, LaneLimits(), "chat", CHAT, 10**9, 256) == (Clamp(), 0)


def test_a_bound_over_the_cap_is_clamped_and_said_a_bound_at_it_is_not() -> None:
    limits = LaneLimits(max_output_tokens=512)
    at = Output({"max_tokens": 512})
    assert check_text(at, limits, "chat", CHAT, 10, 256) == (Clamp(), 0)
    over = Output({"max_tokens": 513, "max_completion_tokens": 600, "n_predict": 100})
    clamp, reserve = check_text(over, limits, "chat", CHAT, 10, 256)
    assert clamp == Clamp(
        {"max_tokens": 512, "max_completion_tokens": 512},
        ("max_tokens 513->512", "max_completion_tokens 600->512"),
    )
    assert reserve == 0  # no token budget: nothing reserved


@pytest.mark.parametrize("bound", [0, -1])
def test_a_bound_under_one_means_none_and_is_over_any_cap(bound: int) -> None:
    clamp = cap_output(Output({"n_predict": bound}), 64, False, "max_tokens", "chat")
    assert clamp == Clamp({"n_predict": 64}, (f"n_predict {bound or 'none'}->64",))
    with pytest.raises(OverCap, match=f"^n_predict {bound} is over lane 'chat''s cap of 64$"):
        cap_output(Output({"n_predict": bound}), 64, True, "max_tokens", "chat")
    # A bound of 1 is a bound: kept.
    assert cap_output(Output({"n_predict": 1}), 64, True, "max_tokens", "chat") == Clamp()


def test_a_body_without_a_bound_gets_the_cap_under_its_endpoint_s_name() -> None:
    limits = LaneLimits(max_output_tokens=300)
    clamp, _ = check_text(Output(), limits, "chat", CHAT, 1, 256)
    assert clamp == Clamp({"max_tokens": 300}, ("max_tokens none->300",))
    clamp, _ = check_text(Output(), limits, "chat", "/v1/responses", 1, 256)
    assert clamp == Clamp({"max_output_tokens": 300}, ("max_output_tokens none->300",))
    # A null bound is no bound; a bound present is the client's, kept.
    clamp, _ = check_text(Output({"max_tokens": None}), limits, "chat", CHAT, 1, 256)
    assert clamp.edits == {"max_tokens": 300}
    clamp, _ = check_text(Output({"max_tokens": None, "n_predict": 5}), limits, "c", CHAT, 1, 9)
    assert clamp == Clamp()


def test_the_cap_is_shared_by_every_answer_asked_for() -> None:
    out = Output({"max_tokens": 200}, {"n": 2, "best_of": 3}, prompts=2)
    assert out.answers == 6
    clamp = cap_output(out, 1000, False, "max_tokens", "chat")
    assert clamp == Clamp({"max_tokens": 166}, ("max_tokens 200->166",))  # 1000 // 6
    assert cap_output(Output({"max_tokens": 166}, {"n": 6}), 1000, False, "x", "l") == Clamp()
    with pytest.raises(OverCap) as caught:
        cap_output(out, 1000, True, "max_tokens", "chat")
    assert (
        str(caught.value)
        == "max_tokens 200 for each of 6 answers is over lane 'chat''s cap of 1000"
    )
    two = Output({"max_tokens": 600}, {"n": 2})
    with pytest.raises(OverCap, match=r"^max_tokens 600 for each of 2 answers is over"):
        cap_output(two, 1000, True, "max_tokens", "chat")
    # Each answer needs a token at least: 6 answers under a cap of 5 cannot fit.
    with pytest.raises(OverCap) as caught:
        cap_output(out, 5, False, "max_tokens", "chat")
    assert str(caught.value) == "6 answers cannot fit lane 'chat''s output cap of 5 tokens"
    assert cap_output(Output({}, {"n": 6}), 6, False, "max_tokens", "chat").edits == {
        "max_tokens": 1
    }


def test_the_reject_policy_refuses_with_the_max_tokens_reason() -> None:
    limits = LaneLimits(max_output_tokens=100, output_tokens_policy="reject")
    exc = refusal(Output({"max_new_tokens": 101}), limits)
    assert exc.reason == "max_tokens"
    assert str(exc) == "max_new_tokens 101 is over lane 'chat''s cap of 100"
    assert check_text(Output({"max_new_tokens": 100}), limits, "chat", CHAT, 1, 256)[0] == Clamp()
    # Reject refuses a bound over the cap; a missing one is still filled in.
    assert check_text(Output(), limits, "chat", CHAT, 1, 256)[0].edits == {"max_tokens": 100}


def test_a_budget_reserves_the_prompt_and_the_bound_after_the_clamp() -> None:
    budget = LaneLimits(max_inflight_tokens=10_000)
    assert check_text(Output({"max_tokens": 300}), budget, "c", CHAT, 40, 256) == (Clamp(), 340)
    # The largest bound present, per answer, times the answers.
    two = Output({"max_tokens": 300, "max_completion_tokens": 500}, {"n": 2})
    assert check_text(two, budget, "c", CHAT, 40, 256)[1] == 40 + 1000
    # Without a bound: the gate's default; a prompt of unknown length reserves none.
    assert check_text(Output(), budget, "c", CHAT, None, 256)[1] == 256
    capped = LaneLimits(max_inflight_tokens=10_000, max_output_tokens=128)
    clamp, reserve = check_text(Output({"max_tokens": 4000}), capped, "c", CHAT, 40, 256)
    assert clamp.edits == {"max_tokens": 128} and reserve == 40 + 128
    assert check_text(Output(), capped, "c", CHAT, 40, 256)[1] == 40 + 128


def test_output_bound_counts_a_bound_under_one_as_none() -> None:
    assert output_bound({"max_tokens": 0, "n_predict": -1}, 1, None, 77) == 77
    assert output_bound({"max_tokens": 1}, 3, 500, 77) == 3
    assert output_bound({"max_tokens": None}, 2, 500, 77) == 1000
    assert output_bound({"max_tokens": 9, "n_predict": 12}, 1, None, 77) == 12
