"""The simulator against bodies a client got wrong (real HTTP): always a 4xx in vLLM's error
shape, never a 500, and the node keeps serving."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from gpuwatch.sim.node import SimNode

RAW = {
    # json.loads raises RecursionError here, not JSONDecodeError.
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
    "deep object": b'{"prompt": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_001,
    # CPython's int/str limit: a bare ValueError from json.loads.
    "5000-digit integer": b'{"prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}",
    "NaN": b'{"prompt": "hi", "max_tokens": NaN}',
    "not UTF-8": b'{"prompt": "\xff"}',
    "not an object": b'["prompt"]',
    "empty": b"",
}


async def post(url: str, path: str, data: bytes) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as s, s.post(url + path, data=data, headers=headers) as r:
        assert r.content_type == "application/json", await r.text()
        return r.status, await r.json()


def assert_openai_error(status: int, data: Any, expected: int) -> str:
    assert status == expected, data
    error = data["error"]
    assert error["code"] == expected and isinstance(error["type"], str)
    assert isinstance(error["message"], str) and len(error["message"]) < 300
    return error["message"]


async def still_serves(url: str) -> None:
    status, data = await post(
        url, "/v1/completions", json.dumps({"prompt": "hi", "max_tokens": 2}).encode()
    )
    assert status == 200 and data["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize("body", RAW.values(), ids=RAW.keys())
async def test_undecodable_json_is_a_400(sim: tuple[SimNode, str], body: bytes) -> None:
    _, url = sim
    for path in ("/v1/completions", "/v1/chat/completions"):
        status, data = await post(url, path, body)
        assert_openai_error(status, data, 400)
    await still_serves(url)


CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
# Every field the simulator reads, with a wrong type: (path, body, message).
WRONG_TYPES = {
    "model not a string": (COMPLETIONS, {"prompt": "hi", "model": 5}, "model must be a string"),
    "n a string": (COMPLETIONS, {"prompt": "hi", "n": "1"}, "n must be an integer"),
    "max_tokens true": (
        COMPLETIONS,
        {"prompt": "hi", "max_tokens": True},
        "max_tokens must be an integer",
    ),
    "max_tokens float": (
        COMPLETIONS,
        {"prompt": "hi", "max_tokens": 1.5},
        "max_tokens must be an integer",
    ),
    "max_completion_tokens string": (
        CHAT,
        {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": "9"},
        "max_completion_tokens must be an integer",
    ),
    "stream a string": (COMPLETIONS, {"prompt": "hi", "stream": "no"}, "stream must be a boolean"),
    "stream_options a list": (
        COMPLETIONS,
        {"prompt": "hi", "stream": True, "stream_options": []},
        "stream_options must be an object",
    ),
    "include_usage a string": (
        COMPLETIONS,
        {"prompt": "hi", "stream": True, "stream_options": {"include_usage": "yes"}},
        "include_usage must be a boolean",
    ),
    "ignore_eos a string": (
        COMPLETIONS,
        {"prompt": "hi", "ignore_eos": "yes"},
        "ignore_eos must be a boolean",
    ),
    "prompt of booleans": (
        COMPLETIONS,
        {"prompt": [True, False]},
        "prompt must be a string or a list",
    ),
    "prompt an object": (
        COMPLETIONS,
        {"prompt": {"text": "hi"}},
        "prompt must be a string or a list",
    ),
    "message a string": (CHAT, {"messages": ["hi"]}, "messages[0] must be an object"),
    "role a number": (
        CHAT,
        {"messages": [{"role": 5, "content": "hi"}]},
        "messages[0].role must be a string",
    ),
    "content a number": (
        CHAT,
        {"messages": [{"role": "user", "content": 5}]},
        "messages[0].content must be a string or a list of content parts",
    ),
    "content part text an object": (
        CHAT,
        {"messages": [{"role": "user", "content": [{"type": "text", "text": {"a": 1}}]}]},
        "messages[0].content must be a string or a list of content parts",
    ),
    "messages an object": (
        CHAT,
        {"messages": {"role": "user"}},
        "messages must be a non-empty list",
    ),
}


@pytest.mark.parametrize("case", WRONG_TYPES)
async def test_a_field_of_the_wrong_type_is_a_400_naming_it(
    sim: tuple[SimNode, str], case: str
) -> None:
    node, url = sim
    path, body, expected = WRONG_TYPES[case]
    status, data = await post(url, path, json.dumps(body).encode())
    assert expected in assert_openai_error(status, data, 400)
    assert node.engines[0].idle  # nothing was queued
    await still_serves(url)


async def test_an_unknown_model_is_a_404_with_the_name_clipped(sim: tuple[SimNode, str]) -> None:
    _, url = sim
    body = json.dumps({"prompt": "hi", "model": "m" * 100_000}).encode()
    status, data = await post(url, COMPLETIONS, body)
    message = assert_openai_error(status, data, 404)
    assert message.startswith("The model `mmm") and "...` does not exist." in message


async def test_lone_surrogates_in_a_prompt_are_served(sim: tuple[SimNode, str]) -> None:
    """JSON can carry "\\ud800"; hashing the prefix blocks must not choke on it."""
    _, url = sim
    body = json.dumps({"prompt": "\ud800" * 200, "max_tokens": 2}).encode()
    status, data = await post(url, COMPLETIONS, body)
    assert status == 200 and data["usage"]["prompt_tokens"] == 50
    chat = {"messages": [{"role": "user", "content": "\udfff" * 200}], "max_tokens": 2}
    status, data = await post(url, CHAT, json.dumps(chat).encode())
    assert status == 200 and data["usage"]["completion_tokens"] == 2


async def test_unknown_paths_and_methods_answer_in_the_openai_error_shape(
    sim: tuple[SimNode, str],
) -> None:
    _, url = sim
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/v1/nothing") as resp:
            assert resp.status == 404 and resp.content_type == "application/json"
            error = (await resp.json())["error"]
        assert error == {
            "message": "Not Found: GET /v1/nothing",
            "type": "NotFoundError",
            "param": None,
            "code": 404,
        }
        async with s.get(url + "/v1/completions") as resp:
            assert resp.status == 405 and resp.content_type == "application/json"
            assert (await resp.json())["error"]["code"] == 405


async def test_a_body_over_the_size_limit_is_a_413_in_the_error_shape(
    sim: tuple[SimNode, str],
) -> None:
    _, url = sim
    body = json.dumps({"prompt": "x" * (2 * 1024 * 1024)}).encode()
    status, data = await post(url, COMPLETIONS, body)
    assert "Maximum request body size" in assert_openai_error(status, data, 413)
    await still_serves(url)
