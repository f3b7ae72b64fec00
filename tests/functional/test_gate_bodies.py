"""Request bodies from strangers: sizes, pace, JSON Python chokes on, wrong types, every form
of an output bound. Always a 4xx with a reason, never a 500, never an unchecked pass."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from tests.functional.gatekit import read_reply, rig

CAPS = {"lanes": {"chat": {"max_prompt_tokens": 1000, "max_output_tokens": 64}}}
DEEP = b'{"prompt": "hi", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (DEEP, "nesting deeper than"),
        (b'{"prompt": "hi", "max_tokens": 1' + b"0" * 5000 + b"}", "more than 64 digits"),
        (b'{"prompt": "hi", "seed": ' + b"9" * 4400 + b"}", "more than 64 digits"),
        (b'{"prompt": "\xff\xfe"}', "not UTF-8"),
        ('{"prompt": "hi"}'.encode("utf-16"), "not UTF-8"),
        (b'{"prompt": "hi", "temperature": NaN}', "NaN is not JSON"),
        (b'{"prompt": "hi", "temperature": 1e999}', "out of range"),
        (b'{"max_tokens": 1, "prompt": "hi", "max_tokens": 9999}', "duplicate key"),
        (b"[1, 2]", "must be a JSON object"),
        (b"not json", "invalid JSON"),
    ],
    ids=[
        "deep",
        "long-int-cap",
        "long-int",
        "not-utf8",
        "utf16",
        "nan",
        "inf",
        "dup-key",
        "array",
        "not-json",
    ],
)
async def test_json_python_cannot_decode_is_400_with_a_reason(
    tmp_path: Path, body: bytes, reason: str
) -> None:
    """Regression: RecursionError and the 4300-digit ValueError escaped as 500s."""
    async with rig(tmp_path) as r:
        await r.patch(CAPS)
        reply = await r.request("POST", "/v1/completions", body)
        assert reply.status == 400, reply
        assert reason in reply.json()["error"]["message"]
        assert r.upstream.arrivals == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": "hello"}, "messages"),
        ({"messages": [1]}, "messages[0]"),
        ({"messages": [{"role": 5, "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
            "messages[0].content[0].text",
        ),
        ({"messages": [{"role": "user", "content": ["x"]}]}, "messages[0].content[0]"),
        ({"prompt": {"text": "x"}}, "prompt"),
        ({"prompt": [1, "x"]}, "prompt"),
        ({"input": [[1, 2], "x"]}, "input"),
        ({"prompt": "x", "max_tokens": True}, "max_tokens"),
        ({"prompt": "x", "max_tokens": "lots"}, "max_tokens"),
        ({"prompt": "x", "max_tokens": 12.5}, "max_tokens"),
        ({"prompt": "x", "max_completion_tokens": [64]}, "max_completion_tokens"),
    ],
)
async def test_a_field_of_the_wrong_type_is_400_naming_it(
    tmp_path: Path, body: dict[str, Any], field: str
) -> None:
    """Regression: a content part whose text was not a string raised TypeError in a helper."""
    async with rig(tmp_path) as r:
        await r.patch(CAPS)
        reply = await r.request("POST", "/v1/chat/completions", json.dumps(body).encode())
        assert reply.status == 400, reply
        error = reply.json()["error"]
        assert error["param"] == field and error["message"].startswith(field), error
        assert r.upstream.arrivals == []


async def test_every_prompt_field_is_counted(tmp_path: Path) -> None:
    """Regression: with "messages" present, a long "prompt" beside it was never counted."""
    async with rig(tmp_path) as r:
        await r.patch({"lanes": {"chat": {"max_prompt_tokens": 10}}})
        for body in (
            {"messages": [], "prompt": "x" * 400},
            {"messages": [{"role": "user", "content": "hi"}], "input": "x" * 400},
            {"prompt": [[1] * 6, [2] * 6]},  # token-id batches: 12 ids
        ):
            reply = await r.request("POST", "/v1/completions", json.dumps(body).encode())
            assert reply.status == 400, (body, reply)
            assert reply.json()["error"]["code"] == "prompt_too_long"
        assert r.upstream.arrivals == []


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/v1/completions", "max_tokens", 500),
        ("/v1/chat/completions", "max_completion_tokens", 500.0),
        ("/v1/chat/completions", "max_completion_tokens", "500"),
        ("/v1/completions", "max_tokens", " 500 "),
        ("/v1/completions", "max_tokens", "500.0"),
        ("/v1/completions", "max_tokens", 1e300),
        ("/v1/completions", "max_new_tokens", 500),
        ("/v1/responses", "max_output_tokens", 500),
    ],
)
async def test_every_form_of_an_output_bound_is_clamped(
    tmp_path: Path, path: str, field: str, value: object
) -> None:
    """Regression: 500.0 and "500" passed unclamped, and vLLM reads both as 500."""
    async with rig(tmp_path) as r:
        await r.patch(CAPS)
        body = {"tag": "t", "prompt": "hi", field: value}
        reply = await r.request("POST", path, json.dumps(body).encode())
        assert reply.status == 200, reply
        assert r.upstream.bodies[-1][field] == 64
        await r.patch({"lanes": {"chat": {"output_tokens_policy": "reject"}}})
        reply = await r.request("POST", path, json.dumps(body).encode())
        assert reply.status == 400 and reply.json()["error"]["code"] == "max_tokens", reply


async def test_absent_bound_is_set_under_the_name_the_api_reads(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await r.patch(CAPS)
        for path, key in (
            ("/v1/completions", "max_tokens"),
            ("/v1/responses", "max_output_tokens"),
        ):
            reply = await r.request("POST", path, b'{"prompt": "hi", "max_tokens": null}')
            assert reply.status == 200, reply
            assert r.upstream.bodies[-1][key] == 64


async def test_the_cap_holds_every_answer_a_request_asks_for(tmp_path: Path) -> None:
    """Regression: ``n`` and ``best_of`` multiplied the output past the cap (4 x 64 tokens)."""
    async with rig(tmp_path) as r:
        await r.patch(CAPS)  # chat: max_output_tokens 64, clamp
        reply = await r.request("POST", "/v1/completions", b'{"prompt": "hi", "n": 4}')
        assert reply.status == 200, reply
        assert r.upstream.bodies[-1]["max_tokens"] == 16  # 64 tokens over 4 answers
        body = b'{"prompt": "hi", "best_of": 2, "max_tokens": 64}'
        reply = await r.request("POST", "/v1/completions", body)
        assert reply.status == 200 and r.upstream.bodies[-1]["max_tokens"] == 32
        reply = await r.request("POST", "/v1/completions", b'{"prompt": "hi", "n": 100}')
        assert reply.status == 400 and "100 answers cannot fit" in reply.json()["error"]["message"]
        reply = await r.request("POST", "/v1/completions", b'{"prompt": "hi", "n": "x"}')
        assert reply.status == 400 and reply.json()["error"]["param"] == "n"
        await r.patch({"lanes": {"chat": {"output_tokens_policy": "reject"}}})
        body = b'{"prompt": "hi", "n": 2, "max_tokens": 64}'
        reply = await r.request("POST", "/v1/completions", body)
        assert reply.status == 400 and "for each of 2 answers" in reply.json()["error"]["message"]


@pytest.mark.parametrize(
    ("field", "value"), [("n_predict", 100000), ("max_tokens", -1), ("max_tokens", 0)]
)
async def test_bounds_a_server_reads_as_unbounded_are_capped(
    tmp_path: Path, field: str, value: int
) -> None:
    """Regression: llama.cpp reads n_predict before max_tokens, and -1 as 'until the context is
    full'; both passed the cap untouched."""
    async with rig(tmp_path) as r:
        await r.patch(CAPS)  # chat: max_output_tokens 64, clamp
        body = json.dumps({"prompt": "hi", "max_tokens": 16, field: value}).encode()
        reply = await r.request("POST", "/v1/completions", body)
        assert reply.status == 200, reply
        assert r.upstream.bodies[-1][field] == 64
        await r.patch({"lanes": {"chat": {"output_tokens_policy": "reject"}}})
        reply = await r.request("POST", "/v1/completions", body)
        assert reply.status == 400 and reply.json()["error"]["code"] == "max_tokens", reply


def small() -> GateConfig:
    """Every lane takes 1 KiB bodies, and a body may pause 0.3 s."""
    lanes = tuple(replace(lane, max_body=1024) for lane in DEFAULT_LANES)
    return GateConfig(lanes, client_body_timeout_s=0.3)


async def test_oversized_body_is_413_from_its_content_length_without_reading_it(
    tmp_path: Path,
) -> None:
    """Regression: bodies up to 64 MiB were read whole before anything was checked."""
    async with rig(tmp_path) as r:  # the chat lane's default max_body: 4 MiB
        head = (
            b"POST /v1/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
            b"Content-Length: 60000000\r\n\r\n"
        )
        reply = await r.raw(head)  # the body is never sent: the answer must not wait for it
        assert reply.status == 413, reply
        assert "over this path's limit of 4194304" in reply.json()["error"]["message"]
        assert reply.headers.get("connection") == "close"


async def test_an_oversized_body_behind_expect_100_continue_is_refused_before_it_is_sent(
    tmp_path: Path,
) -> None:
    async with rig(tmp_path) as r:
        reply = await r.raw(
            b"POST /v1/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 60000000\r\n"
            b"Expect: 100-continue\r\n\r\n"
        )
        assert reply.status == 413, reply  # not "100 Continue"
        reader, writer = await asyncio.open_connection("127.0.0.1", r.port)
        body = b'{"prompt": "hi", "tag": "e"}'
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: g\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        assert await asyncio.wait_for(reader.readline(), 5) == b"HTTP/1.1 100 Continue\r\n"
        await reader.readline()
        writer.write(body)
        reply = await asyncio.wait_for(read_reply(reader), 5)
        writer.close()
        assert reply.status == 200 and r.upstream.arrivals == ["e"]


async def test_chunked_body_is_counted_as_it_streams(tmp_path: Path) -> None:
    async with rig(tmp_path, small()) as r:
        reader, writer = await asyncio.open_connection("127.0.0.1", r.port)
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        for _ in range(3):
            writer.write(b"200\r\n" + b"x" * 512 + b"\r\n")
        await writer.drain()
        reply = await asyncio.wait_for(read_reply(reader), 5)
        writer.close()
        assert reply.status == 413, reply
        assert r.upstream.arrivals == []


async def test_a_body_that_stalls_is_408(tmp_path: Path) -> None:
    """Regression: a request promising 100 bytes and sending 30 was held forever."""
    async with rig(tmp_path, small()) as r:
        started = time.monotonic()
        reply = await r.raw(
            b"POST /v1/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 100\r\n\r\n"
            + b'{"prompt": "'
            + b"x" * 18,
            timeout=5,
        )
        assert reply.status == 408, reply
        assert "stalled for 0.3 s after 30 bytes" in reply.json()["error"]["message"]
        assert time.monotonic() - started < 3
        assert r.upstream.arrivals == []


@pytest.mark.parametrize(
    ("prompt", "count"),
    [(["hi"] * 4, 4), ([[1, 2]] * 8, 8), (["hi", "there"], 2), ([7, 8, 9], 1), ("hi", 1)],
    ids=["strings", "id-lists", "two", "one-id-list", "one-string"],
)
async def test_a_batch_of_prompts_shares_the_output_cap(
    tmp_path: Path, prompt: object, count: int
) -> None:
    """Regression: a completions ``prompt`` list is one completion per prompt (OpenAI, vLLM),
    but only ``n`` counted: 50 prompts x 64 tokens passed a cap of 64."""
    async with rig(tmp_path) as r:
        await r.patch(CAPS)  # chat: max_output_tokens 64, clamp
        body = json.dumps({"prompt": prompt, "max_tokens": 64}).encode()
        reply = await r.request("POST", "/v1/completions", body)
        assert reply.status == 200, reply
        assert r.upstream.bodies[-1]["max_tokens"] == 64 // count
        body = json.dumps({"prompt": prompt, "n": 2}).encode()
        reply = await r.request("POST", "/v1/completions", body)
        assert reply.status == 200 and r.upstream.bodies[-1]["max_tokens"] == 32 // count
        if count > 1:
            await r.patch({"lanes": {"chat": {"output_tokens_policy": "reject"}}})
            body = json.dumps({"prompt": prompt, "max_tokens": 64}).encode()
            reply = await r.request("POST", "/v1/completions", body)
            assert reply.status == 400, reply
            assert f"for each of {count} answers" in reply.json()["error"]["message"]


async def test_a_batch_too_big_for_the_cap_is_refused(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await r.patch(CAPS)
        for prompt in (["hi"] * 500, [[1]] * 65):
            body = json.dumps({"prompt": prompt, "max_tokens": 1}).encode()
            reply = await r.request("POST", "/v1/completions", body)
            assert reply.status == 400, reply
            assert f"{len(prompt)} answers cannot fit" in reply.json()["error"]["message"]
        assert r.upstream.arrivals == []


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"d": "x" * 120_000}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "x" * 120_000}}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": [TOOL]}),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "assistant", "content": None, "tool_calls": [CALL]}]},
        ),
        ("/v1/chat/completions", {"messages": [{"role": "tool", "content": "ok",
                                                "tool_call_id": "x" * 120_000}]}),
        ("/v1/chat/completions", {"messages": [], "functions": [TOOL["function"]]}),
        ("/v1/chat/completions", {"messages": [], "documents": [{"text": "x" * 120_000}]}),
        ("/v1/responses", {"input": "hi", "instructions": "x" * 120_000}),
        ("/v1/responses", {"input": [{"role": "user", "content": "x" * 120_000}]}),
        (
            "/v1/responses",
            {"input": [{"type": "function_call_output", "call_id": "c", "output": "x" * 120_000}]},
        ),
        ("/v1/completions", {"prompt": "def f(", "suffix": "x" * 120_000}),
    ],
    ids=[
        "tools",
        "tool-call-arguments",
        "tool-call-id",
        "functions",
        "documents",
        "instructions",
        "responses-input-items",
        "function-call-output",
        "suffix",
    ],
)  # fmt: skip
async def test_prompt_fields_outside_the_messages_count(
    tmp_path: Path, path: str, body: dict[str, Any]
) -> None:
    """Regression: 120 KB in tools[], a tool call's arguments or the Responses API's
    instructions passed a 2,000-token prompt cap: only messages[].content was counted."""
    async with rig(tmp_path) as r:
        await r.patch({"lanes": {"chat": {"max_prompt_tokens": 2000}}})
        reply = await r.request("POST", path, json.dumps(body).encode())
        assert reply.status == 400, reply
        assert reply.json()["error"]["code"] == "prompt_too_long"
        assert "30" in reply.json()["error"]["message"]  # ~30,000 tokens, not ~70
        assert r.upstream.arrivals == []


async def test_media_parts_are_not_counted_as_text(tmp_path: Path) -> None:
    """An image's base64 is not 4 characters a token: it passes a text cap it is far over."""
    async with rig(tmp_path) as r:
        await r.patch({"lanes": {"chat": {"max_prompt_tokens": 2000}}})
        image = {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + "A" * 100_000},
        }
        body = {
            "tag": "t",
            "messages": [{"role": "user", "content": [image, {"type": "text", "text": "what?"}]}],
        }
        reply = await r.request("POST", "/v1/chat/completions", json.dumps(body).encode())
        assert reply.status == 200, reply


@pytest.mark.parametrize("caps", [True, False], ids=["capped", "uncapped"])
@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_compressed_body_goes_on_decoded_without_its_encoding(
    tmp_path: Path, caps: bool, encoding: str
) -> None:
    """Regression: a gzip body was checked decoded and forwarded decoded with
    ``Content-Encoding: gzip`` still set: the upstream failed to inflate plain JSON."""
    import zlib

    body = {"tag": "z", "prompt": "hi", "max_tokens": 500}
    raw = json.dumps(body).encode()
    packed = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw)
    async with rig(tmp_path) as r:
        if caps:
            await r.patch(CAPS)
        headers = {"Content-Encoding": encoding}
        reply = await r.request("POST", "/v1/completions", packed, headers)
        assert reply.status == 200, reply
        assert r.upstream.encodings == [None]
        sent = r.upstream.bodies[-1]
        assert sent["prompt"] == "hi" and sent["max_tokens"] == (64 if caps else 500)
        # An inflated body over the lane's max_body is refused as such (a bomb is a 413).
        bomb = gzip.compress(b'{"prompt": "' + b"x" * (5 * 1024 * 1024) + b'"}')
        reply = await r.request("POST", "/v1/completions", bomb, {"Content-Encoding": "gzip"})
        assert reply.status == 413, reply
        assert len(r.upstream.bodies) == 1


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_body_that_does_not_inflate_is_a_400_not_a_500(
    tmp_path: Path, encoding: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression (found beside item 8): bytes that do not inflate as their Content-Encoding
    says raised out of the body reader: a 500 and a traceback in the log."""
    async with rig(tmp_path) as r:
        for caps in (False, True):
            if caps:
                await r.patch(CAPS)
            headers = {"Content-Encoding": encoding}
            reply = await r.request("POST", "/v1/completions", b"not compressed", headers)
            assert reply.status == 400, reply
            error = reply.json()["error"]
            assert error["code"] == "body_undecodable"
            assert error["message"] == "the body does not decode as its Content-Encoding says"
        reply = await r.request("PATCH", "/admin/limits", b"not compressed", headers)
        assert reply.status == 400, reply
        assert r.upstream.arrivals == []
    # Refused, not crashed: nothing logged as an error (no traceback, while answering or after).
    assert [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.ERROR] == []
