"""Image and embedding caps through the gate (real HTTP): clamped bodies reach the upstream
rewritten and the answer says so; rejected ones never reach it and name the cap."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from tests.functional.gatekit import rig

IMAGE = "/v1/images/generations"


async def test_image_over_max_pixels_is_clamped_and_the_answer_says_so(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        status, _ = await r.patch({"lanes": {"image": {"max_pixels": 512 * 512, "max_steps": 30}}})
        assert status == 200
        body = {"prompt": "a cat", "size": "1024x1024", "steps": 50, "tag": "big"}
        reply = await r.request("POST", IMAGE, json.dumps(body).encode())
        assert reply.status == 200, reply
        sent = r.upstream.bodies[-1]
        assert sent["size"] == "512x512"
        assert sent["steps"] == 30
        assert reply.headers["x-gpuwatch-clamped"] == "size 1024x1024->512x512; steps 50->30"


async def test_image_over_max_pixels_is_refused_under_reject(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await r.patch({"lanes": {"image": {"max_pixels": 512 * 512, "media_policy": "reject"}}})
        reply = await r.request("POST", IMAGE, b'{"prompt": "a cat", "size": "1024x768"}')
        assert reply.status == 400, reply
        error = reply.json()["error"]
        assert error["code"] == "max_pixels"
        assert "1024x768" in error["message"] and "262144" in error["message"]
        # A size the gate cannot read is a 400 too, never passed on unchecked.
        reply = await r.request("POST", IMAGE, b'{"prompt": "a cat", "size": "huge"}')
        assert reply.status == 400 and reply.json()["error"]["code"] == "invalid_body"
        assert r.upstream.arrivals == []


async def test_image_without_size_gets_the_default_held_to_the_cap(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await r.patch({"lanes": {"image": {"max_pixels": 256 * 256, "max_n": 2}}})
        reply = await r.request("POST", IMAGE, b'{"prompt": "a cat", "n": "4"}')
        assert reply.status == 200, reply
        assert r.upstream.bodies[-1]["size"] == "256x256"
        assert r.upstream.bodies[-1]["n"] == 2


async def test_embeddings_over_max_inputs_are_refused_naming_the_limit(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await r.patch({"lanes": {"embed": {"max_inputs": 4}}})
        body = {"model": "e", "input": [f"text {i}" for i in range(5)]}
        reply = await r.request("POST", "/v1/embeddings", json.dumps(body).encode())
        assert reply.status == 400, reply
        error = reply.json()["error"]
        assert error["code"] == "max_inputs"
        assert "max_inputs is 4" in error["message"] and "5 items" in error["message"]
        # Clamp does not apply to max_inputs: dropping items would misalign the vectors.
        await r.patch({"lanes": {"embed": {"media_policy": "clamp"}}})
        reply = await r.request("POST", "/v1/embeddings", json.dumps(body).encode())
        assert reply.status == 400
        body["input"] = body["input"][:4]
        reply = await r.request("POST", "/v1/embeddings", json.dumps(body).encode())
        assert reply.status == 200
        assert len(r.upstream.bodies) == 1
        async with aiohttp.ClientSession() as s, s.get(f"{r.url}/metrics") as m:
            text = await m.text()
        assert 'gpuwatch_gate_rejected_total{lane="embed",reason="max_inputs"} 2.0' in text


@pytest.mark.parametrize("policy", ["clamp", "reject"])
async def test_embedding_items_over_max_input_tokens(tmp_path: Path, policy: str) -> None:
    async with rig(tmp_path) as r:
        await r.patch({"lanes": {"embed": {"max_input_tokens": 8, "media_policy": policy}}})
        body = {"input": ["short", "x" * 400]}
        reply = await r.request("POST", "/v1/embeddings", json.dumps(body).encode())
        if policy == "reject":
            assert reply.status == 400
            assert reply.json()["error"]["code"] == "max_input_tokens"
            assert "input[1]" in reply.json()["error"]["message"]
        else:
            assert reply.status == 200
            assert r.upstream.bodies[-1]["input"] == ["short", "x" * 32]
            assert reply.headers["x-gpuwatch-clamped"] == "input 1 item(s) cut to 8 tokens"


async def test_media_caps_are_validated_in_a_patch(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        status, body = await r.patch({"lanes": {"image": {"max_steps": 0}}})
        assert status == 400 and body["error"]["code"] == "lanes.image.max_steps"
        status, body = await r.patch({"lanes": {"image": {"media_policy": "shrink"}}})
        assert status == 400 and body["error"]["code"] == "lanes.image.media_policy"
        status, body = await r.patch({"lanes": {"embed": {"max_inputs": True}}})
        assert status == 400 and body["error"]["code"] == "lanes.embed.max_inputs"


async def test_the_output_cap_says_what_it_clamped_too(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await r.patch({"lanes": {"chat": {"max_output_tokens": 64}}})
        body = b'{"prompt": "hi", "max_tokens": "\\n 500", "max_completion_tokens": 10}'
        reply = await r.request("POST", "/v1/completions", body)
        assert reply.status == 200, reply
        assert reply.headers["x-gpuwatch-clamped"] == "max_tokens 500->64"
        reply = await r.request("POST", "/v1/chat/completions", b'{"messages": []}')
        assert reply.headers["x-gpuwatch-clamped"] == "max_tokens none->64"
        reply = await r.request("POST", "/v1/completions", b'{"prompt": "hi", "max_tokens": 9}')
        assert reply.status == 200 and "x-gpuwatch-clamped" not in reply.headers


async def test_steps_left_out_or_below_one_are_held_to_the_cap(tmp_path: Path) -> None:
    """Review 2: a body without steps got the server's default (the simulator's 30, diffusers'
    50) past max_steps; 0 or -1 reads as that default too."""
    async with rig(tmp_path) as r:
        await r.patch({"lanes": {"image": {"max_steps": 20}}})
        reply = await r.request("POST", IMAGE, b'{"prompt": "a cat"}')
        assert reply.status == 200, reply
        assert r.upstream.bodies[-1]["steps"] == 20
        assert r.upstream.bodies[-1]["num_inference_steps"] == 20
        assert r.upstream.bodies[-1]["step"] == 20
        assert reply.headers["x-gpuwatch-clamped"] == "steps default->20"
        for steps in (0, -1, 0.0):
            body = {"prompt": "a cat", "num_inference_steps": steps}
            reply = await r.request("POST", IMAGE, json.dumps(body).encode())
            assert reply.status == 200, reply
            assert r.upstream.bodies[-1]["num_inference_steps"] == 20, steps
            assert r.upstream.bodies[-1]["steps"] == 20, steps
        await r.patch({"lanes": {"image": {"media_policy": "reject"}}})
        reply = await r.request("POST", IMAGE, b'{"prompt": "a cat", "steps": 0}')
        assert reply.status == 400 and reply.json()["error"]["code"] == "max_steps"


@pytest.mark.parametrize("policy", ["clamp", "reject"])
@pytest.mark.parametrize("name", ["num_inference_steps", "step", "steps"])
async def test_every_name_for_steps_is_capped_and_filled(
    tmp_path: Path, policy: str, name: str
) -> None:
    """Regression: ``num_inference_steps: 10`` alone skipped the cap: the gate added ``steps``
    only when both names were absent, so a server reading ``steps`` ran its default (30)."""
    async with rig(tmp_path) as r:
        await r.patch({"lanes": {"image": {"max_steps": 20, "media_policy": policy}}})
        reply = await r.request("POST", IMAGE, json.dumps({"prompt": "a", name: "10"}).encode())
        assert reply.status == 200, reply
        sent = r.upstream.bodies[-1]
        assert [sent.get(k) for k in ("steps", "num_inference_steps", "step")] == [
            10 if k != name else "10" for k in ("steps", "num_inference_steps", "step")
        ]
        assert "x-gpuwatch-clamped" not in reply.headers
        reply = await r.request("POST", IMAGE, json.dumps({"prompt": "a", name: 50}).encode())
        if policy == "reject":
            assert reply.status == 400 and reply.json()["error"]["code"] == "max_steps"
        else:
            assert reply.status == 200, reply
            sent = r.upstream.bodies[-1]
            assert [sent[k] for k in ("steps", "num_inference_steps", "step")] == [20] * 3


@pytest.mark.parametrize(
    ("path", "field"),
    [("/v1/rerank", "documents"), ("/v1/rerank", "texts"), ("/v1/score", "text_2")],
)
async def test_rerank_and_score_items_are_held_to_the_embed_caps(
    tmp_path: Path, path: str, field: str
) -> None:
    """Review 2: the embed lane routes rerank and score, whose items are not in ``input``:
    5,000 documents went through a lane capped at 4 inputs."""
    async with rig(tmp_path) as r:
        await r.patch({"lanes": {"embed": {"max_inputs": 4, "max_input_tokens": 8}}})
        body: dict[str, object] = {"query": "q", "text_1": "q", field: ["doc"] * 5000}
        reply = await r.request("POST", path, json.dumps(body).encode())
        assert reply.status == 400, reply
        assert reply.json()["error"]["code"] == "max_inputs"
        assert f"{field} has 5000 items" in reply.json()["error"]["message"]
        body[field] = ["doc", "x" * 400]
        reply = await r.request("POST", path, json.dumps(body).encode())
        assert reply.status == 200, reply
        assert r.upstream.bodies[-1][field] == ["doc", "x" * 32]
        assert reply.headers["x-gpuwatch-clamped"] == f"{field} 1 item(s) cut to 8 tokens"
        body[field] = [{"text": "doc"}]
        reply = await r.request("POST", path, json.dumps(body).encode())
        assert reply.status == 400 and reply.json()["error"]["param"] == field
        assert len(r.upstream.bodies) == 1


async def test_only_the_gate_writes_the_clamped_header(tmp_path: Path) -> None:
    """Review 2: an upstream's own X-Gpuwatch-Clamped went through to the client (a clamp the
    gate never made), and beside the gate's one in another case (two values)."""
    async with rig(tmp_path) as r, aiohttp.ClientSession() as s:
        r.upstream.extra_headers = {"x-gpuwatch-clamped": "size 9x9->8x8"}
        async with s.post(f"{r.url}/v1/chat/completions", json={"messages": []}) as reply:
            assert reply.status == 200
            assert "X-Gpuwatch-Clamped" not in reply.headers
        await r.patch({"lanes": {"image": {"max_n": 1}}})
        async with s.post(f"{r.url}{IMAGE}", json={"prompt": "a", "n": 3}) as reply:
            assert reply.status == 200
            assert reply.headers.getall("X-Gpuwatch-Clamped") == ["n 3->1"]
