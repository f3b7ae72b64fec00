"""What a span reads of an answer (``otel.AnswerFacts``): the same facts however the bytes are
split across chunks, and never a key's look-alike inside the generated text."""

from __future__ import annotations

import json

import pytest

from gpuwatch.gate.otel import AnswerFacts
from gpuwatch.otlp import operation

CHUNKS = [
    {"id": "chatcmpl-1", "model": "m-7b", "choices": [{"delta": {"content": 'x "model": "no"'},
                                                      "finish_reason": None}]},
    {"id": "chatcmpl-1", "model": "m-7b", "choices": [{"delta": {}, "finish_reason": "length"}]},
    {"id": "chatcmpl-1", "model": "m-7b", "choices": [],
     "usage": {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290}},
]  # fmt: skip
STREAM = (
    b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in CHUNKS) + b"data: [DONE]\n\n"
)


def facts_of(*pieces: bytes) -> AnswerFacts:
    facts = AnswerFacts()
    for piece in pieces:
        facts.feed(piece)
    return facts


def summary(facts: AnswerFacts) -> tuple[object, ...]:
    return (facts.model, facts.id, facts.input_tokens, facts.output_tokens, facts.finish_reasons)


def test_a_stream_read_whole() -> None:
    assert summary(facts_of(STREAM)) == ("m-7b", "chatcmpl-1", 1234, 56, ["length"])


COMPACT = b"".join(
    b"data: " + json.dumps(c, separators=(",", ":")).encode() + b"\n\n" for c in CHUNKS
)


@pytest.mark.parametrize("stream", [STREAM, COMPACT], ids=["spaced", "compact"])
def test_split_anywhere_reads_the_same(stream: bytes) -> None:
    whole = summary(facts_of(stream))
    assert whole == ("m-7b", "chatcmpl-1", 1234, 56, ["length"])
    for at in range(1, len(stream)):
        assert summary(facts_of(stream[:at], stream[at:])) == whole, stream[:at]


def test_a_finish_beside_a_null_one_is_read() -> None:
    """Two choices in one chunk: one still going (null), one done."""
    chunk = {"id": "c", "model": "m", "choices": [
        {"index": 0, "finish_reason": None}, {"index": 1, "finish_reason": "stop"}]}  # fmt: skip
    facts = facts_of(json.dumps(chunk).encode())
    assert facts.finish_reasons == ["stop"]


def test_byte_by_byte() -> None:
    assert summary(facts_of(*(STREAM[k : k + 1] for k in range(len(STREAM))))) == summary(
        facts_of(STREAM)
    )


def test_responses_api_names_and_a_tool_calls_id() -> None:
    body = {
        "id": "resp_1",
        "model": "m",
        "output": [{"type": "function_call", "id": "fc_9", "call_id": "c"}],
        "usage": {"input_tokens": 7, "output_tokens": 3},
    }
    facts = facts_of(json.dumps(body).encode())
    assert (facts.id, facts.input_tokens, facts.output_tokens) == ("resp_1", 7, 3)


def test_an_answer_without_facts_says_none() -> None:
    assert summary(facts_of(b"<html>502</html>")) == (None, None, None, None, [])


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/chat/completions", "chat"),
        ("/v1/completions", "text_completion"),
        ("/v1/embeddings", "embeddings"),
        ("/v1/images/generations", "generations"),
    ],
)
def test_operation_names(path: str, name: str) -> None:
    assert operation(path) == name
