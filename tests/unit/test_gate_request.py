"""The one read of a request (gate/request.py) and the checks that judge what it read
(gate/mediacaps.py, gate/caps.py): any body is a typed request or a BodyError naming the field,
and the checks on a typed request refuse or rewrite, never raise anything else."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwatch.gate.caps import CapRefused, check_text
from gpuwatch.gate.fields import BodyError
from gpuwatch.gate.limits import LaneLimits
from gpuwatch.gate.mediacaps import MediaRefused, check_media
from gpuwatch.gate.prompt import read_prompt
from gpuwatch.gate.request import BodyFacts, InferenceRequest, Output, read_request
from gpuwatch.safejson import loads_bounded
from gpuwatch.tokens import estimate_chat, estimate_text

CLAMP_ALL = LaneLimits(
    max_prompt_tokens=50,
    max_output_tokens=64,
    max_inflight_tokens=10_000,
    max_pixels=512 * 512,
    max_steps=20,
    max_n=2,
    max_inputs=4,
    max_input_tokens=8,
)
LIMITS = {
    "none": LaneLimits(),
    "clamp-all": CLAMP_ALL,
    "reject-all": replace(CLAMP_ALL, output_tokens_policy="reject", media_policy="reject"),
    "budget-only": LaneLimits(max_inflight_tokens=10_000),
    "media-only": LaneLimits(max_pixels=512 * 512, max_steps=20, max_n=2, max_inputs=4),
}

# The names the checks read, and values of every type and of the forms servers coerce.
KEYS = st.sampled_from(
    [
        "messages", "prompt", "input", "tools", "documents", "instructions", "suffix", "system",
        "max_tokens", "max_completion_tokens", "max_output_tokens", "n_predict", "n", "best_of",
        "size", "steps", "num_inference_steps", "step", "texts", "text_1", "text_2", "stream",
        "model", "role", "content", "text", "type", "other",
    ]
)  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 200),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "hi", "x" * 100, "500", " 64 ", "12.0", "auto", "1024x1024", "0x9"]),
    st.sampled_from(["image_url", "text", "user", "9999999x9999999", "-1", "1e3"]),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
BODIES = st.dictionaries(KEYS, JSON, max_size=6)


def read(raw: bytes, limits: LaneLimits, path: str = "/v1/chat/completions") -> InferenceRequest:
    return read_request(raw, limits, lane="chat", path=path, stream_matters=True)


def facts(req: InferenceRequest) -> BodyFacts:
    assert req.facts is not None
    return req.facts


def judged(req: InferenceRequest, limits: LaneLimits) -> tuple[InferenceRequest, int]:
    """What the proxy does after the read, less the tokenizer: the estimate stands in."""
    read_ = req.facts
    if read_ is None:
        return req, 0
    if read_.media is not None:
        read_ = read_.clamped(check_media(read_.media, limits, req.lane))
    prompt = read_.prompt
    tokens = prompt.estimate() if prompt is not None and prompt.found else None
    clamp, reserve = check_text(read_.output, limits, req.lane, req.path, tokens, 512)
    return replace(req, facts=read_.clamped(clamp)), reserve


@settings(max_examples=300, deadline=None)
@given(body=st.one_of(BODIES, JSON), lane=st.sampled_from(sorted(LIMITS)))
def test_any_json_body_is_a_typed_request_or_a_reason_never_an_exception(
    body: Any, lane: str
) -> None:
    limits = LIMITS[lane]
    raw = json.dumps(body).encode()
    try:
        req = read(raw, limits)
    except BodyError as exc:
        assert exc.field and str(exc).startswith(f"{exc.field}: ")
        return
    try:
        final, reserve = judged(req, limits)
    except (MediaRefused, CapRefused) as exc:
        assert str(exc)  # the refusal says why
        return
    sent = loads_bounded(final.payload())
    assert isinstance(sent, dict) or lane == "none"  # a lane that reads a body needs an object
    assert reserve >= 0 and (reserve == 0) == (limits.max_inflight_tokens is None)
    if final.payload() != raw:  # only a cap's rewrite changes what goes upstream
        assert facts(final).rewritten and isinstance(sent, dict)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=64), lane=st.sampled_from(sorted(LIMITS)))
def test_any_bytes_are_a_typed_request_or_a_reason(raw: bytes, lane: str) -> None:
    try:
        req = read(raw, LIMITS[lane])
    except BodyError as exc:
        assert exc.field
        return
    assert req.payload() == raw


def test_the_typed_request_holds_the_facts_the_checks_need() -> None:
    messages = [{"role": "user", "content": "x" * 40}]
    body = {
        "model": "m",
        "messages": messages,
        "tools": [{"type": "function"}],
        "max_tokens": " 500 ",
        "max_completion_tokens": None,
        "n": "2",
        "stream": True,
    }
    req = read(json.dumps(body).encode(), CLAMP_ALL)
    read_ = facts(req)
    assert read_.model == "m" and req.stream is True
    assert read_.prompt is not None and read_.output is not None
    assert read_.prompt.estimate() == estimate_chat(messages) + estimate_text(
        '[{"type":"function"}]'
    )
    assert dict(read_.output.bounds) == {"max_tokens": 500, "max_completion_tokens": None}
    assert read_.output.answers == 2
    # A completions batch is one answer per prompt, for each of its n.
    batch = facts(read(b'{"prompt": ["a", "b", "c"], "n": 2}', CLAMP_ALL))
    assert batch.output is not None and batch.output.answers == 6


def test_a_lane_without_caps_reads_no_json_and_forwards_the_bytes() -> None:
    raw = b'{"prompt": "hi", "max_tokens": "lots", "stream": true}'
    req = read_request(raw, LaneLimits(), lane="chat", path="/v1/completions")
    assert req.facts is None
    assert req.stream is False  # read only where it matters (a lane capping prefills)
    assert req.payload() is raw
    assert read(raw, LaneLimits()).stream is True
    assert read(b"not json", LaneLimits()).stream is False  # nothing refuses it either


def test_only_the_fields_a_cap_reads_are_checked() -> None:
    """A lane with only an image cap passes a prompt of the wrong type on: no check reads it."""
    raw = b'{"prompt": 5, "max_tokens": "lots", "size": "auto"}'
    read_ = facts(read(raw, LaneLimits(max_pixels=512 * 512)))
    assert read_.prompt is None and read_.output is None and read_.media is not None
    with pytest.raises(BodyError) as exc:
        read(raw, LaneLimits(max_output_tokens=64))
    assert exc.value.field == "max_tokens"
    with pytest.raises(BodyError) as exc:
        read(raw, LaneLimits(max_prompt_tokens=64))
    assert exc.value.field == "prompt"


def test_a_field_that_does_not_parse_is_named_before_any_cap_judges() -> None:
    """The read comes first: an unreadable n is a BodyError even beside a prompt over the cap."""
    raw = json.dumps({"prompt": "x" * 4000, "n": "many"}).encode()
    with pytest.raises(BodyError) as exc:
        read(raw, CLAMP_ALL)
    assert exc.value.field == "n"


def test_a_media_clamp_reads_the_prompt_and_answers_again_from_what_it_wrote() -> None:
    """An embedding input cut short is a shorter prompt; n held to max_n is fewer answers:
    the budget reserves for what the upstream gets."""
    limits = LaneLimits(max_input_tokens=8, max_n=2, max_inflight_tokens=100_000)
    req = read(json.dumps({"input": ["x" * 400, "short"], "n": 5}).encode(), limits)
    before = facts(req)
    assert before.prompt is not None and before.prompt.estimate() == 100 + 2
    assert before.output is not None and before.output.answers == 5
    final, reserve = judged(req, limits)
    after = facts(final)
    assert after.prompt is not None and after.prompt.estimate() == 8 + 2
    assert after.output is not None and after.output.answers == 2
    assert reserve == 10 + 512 * 2
    assert final.notes == ("n 5->2", "input 1 item(s) cut to 8 tokens")
    assert json.loads(final.payload()) == {"input": ["x" * 32, "short"], "n": 2}


def test_the_output_cap_rewrites_in_place_and_appends_what_it_adds() -> None:
    limits = LaneLimits(max_output_tokens=64, max_inflight_tokens=100_000)
    raw = b'{"max_tokens": "500", "prompt": "hi", "max_new_tokens": 9}'
    final, reserve = judged(read(raw, limits, "/v1/completions"), limits)
    assert final.notes == ("max_tokens 500->64",)
    assert final.payload() == b'{"max_tokens": 64, "prompt": "hi", "max_new_tokens": 9}'
    assert reserve == 1 + 64
    final, _ = judged(read(b'{"input": "hi"}', limits, "/v1/responses"), limits)
    assert final.notes == ("max_output_tokens none->64",)
    assert final.payload() == b'{"input": "hi", "max_output_tokens": 64}'
    untouched = b'{"prompt": "hi", "max_tokens": 9}'
    final, _ = judged(read(untouched, limits, "/v1/completions"), limits)
    assert final.payload() is untouched and not facts(final).rewritten


def test_check_text_on_an_output_given_as_such() -> None:
    """The planner's use: a simulated request's output, no body."""
    limits = LaneLimits(max_output_tokens=100, max_inflight_tokens=10_000)
    clamp, reserve = check_text(Output({"max_tokens": 300}), limits, "chat", "/v1/x", 40, 512)
    assert clamp.edits == {"max_tokens": 100} and reserve == 40 + 100
    with pytest.raises(CapRefused) as exc:
        check_text(Output(), replace(limits, max_prompt_tokens=10), "chat", "/v1/x", 40, 512)
    assert exc.value.reason == "prompt_too_long"
    assert check_text(None, LaneLimits(), "chat", "/v1/x", None, 512)[1] == 0


def test_read_prompt_counts_every_prompt_field() -> None:
    prompt = read_prompt({"messages": [], "prompt": [[1, 2], [3]], "suffix": "abcd"})
    assert prompt.ids == 3 and prompt.texts == ("abcd",)
    assert prompt.estimate() == estimate_chat([]) + 3 + estimate_text("abcd")


def test_step_names_sent_as_null_are_filled_like_absent_ones() -> None:
    """Regression: with every other name sent as null the body went on unchanged (no key was
    added), and a server reading one of them ran its default (diffusers' 50) past the cap."""
    limits = LaneLimits(max_steps=20)
    raw = b'{"prompt": "a", "steps": "10", "num_inference_steps": null, "step": null}'
    final, _ = judged(read(raw, limits, "/v1/images/generations"), limits)
    assert json.loads(final.payload()) == {
        "prompt": "a", "steps": "10", "num_inference_steps": 10, "step": 10
    }  # fmt: skip
    assert final.notes == ()  # the client's own value under other names: no clamp
