"""Issue 25's gate attacks, and variants of each, against a real gate on 127.0.0.1: before
(8ebca5e) and after (this checkout), one table.

The gate runs as ``python -m gpuwatch gate`` (the old or the new code on its PYTHONPATH) in
front of an upstream in this process that records what reached it and misbehaves on request:
never answers, goes silent mid-stream, redirects to another origin. Each attack says HELD
(the gate held the line: refused it, capped it, or passed it on as the upstream needs) or
BROKE, with what happened.

- batched prompts (item 1): output past the cap through a ``prompt`` list; tokens reserved
- steps under another name (item 4): what a server reading each name would run
- prompt fields outside messages (item 5): 120 KB where the estimate did not look
- upstream redirects (item 7): does the request reach the other origin
- compressed bodies (item 8): does the upstream get a body it can parse
- a silent upstream (item 13): is the client answered, and the slot freed
- header names (item 15): is the llm-d spelling read, one value per request

(Item 6, a status read holding up the proxy, is ``bench/status_lag.py``.)

Run: python bench/attack_gate.py    (about a minute)
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import os
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

sys.path.insert(0, str(Path(__file__).parent))
from baseline import REPO, checkout
from gate import free_port, wait_port

BEFORE = "8ebca5e"
CAP = 64
PROMPT_CAP = 2000
MAX_STEPS = 20
STEP_NAMES = ("steps", "num_inference_steps", "step")
BIG = "x" * 120_000
Outcome = tuple[bool, str]


class Upstream:
    """Records each request; its body's ``mode`` picks a misbehaviour."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.elsewhere = 0  # requests that reached the other origin
        self.other_url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
        except (ValueError, RequestPayloadError):
            # What a server does with a body it cannot parse (here: still compressed).
            self.seen.append({"unparsable": True, "headers": dict(request.headers)})
            return web.json_response({"error": "cannot parse the body"}, status=400)
        self.seen.append({"body": body, "headers": dict(request.headers)})
        mode = body.get("mode")
        if mode == "silent":
            await asyncio.Event().wait()  # never a byte
        if mode == "redirect":
            return web.Response(
                status=body["status"], headers={"Location": f"{self.other_url}/steal"}
            )
        if mode == "silent_mid":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(b'data: {"i": 0}\n\n')
            await asyncio.Event().wait()
        return web.json_response({"ok": True})

    async def other(self, _: web.Request) -> web.Response:
        self.elsewhere += 1
        return web.json_response({"from": "elsewhere"})


class Attack:
    def __init__(self, session: aiohttp.ClientSession, gate: str, upstream: Upstream) -> None:
        self.s = session
        self.gate = gate
        self.up = upstream

    async def patch(self, body: dict[str, Any]) -> int:
        async with self.s.patch(f"{self.gate}/admin/limits", json=body) as r:
            await r.read()
            return r.status

    async def post(
        self,
        path: str,
        body: Any,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, Any]:
        data = raw if raw is not None else json.dumps(body).encode()
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        async with self.s.post(
            f"{self.gate}{path}",
            data=data,
            headers=hdrs,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as r:
            text = await r.read()
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, text

    def last(self) -> dict[str, Any]:
        return self.up.seen[-1] if self.up.seen else {}


def _generated(sent: dict[str, Any], prompts: int) -> int:
    """Output tokens the upstream may generate for a body it got (vLLM: each prompt x n)."""
    bound = max(int(sent.get(k) or 0) for k in ("max_tokens", "max_completion_tokens"))
    n = max(int(sent.get("n") or 1), int(sent.get("best_of") or 1))
    return prompts * n * (bound or 10**6)


async def batched(a: Attack, prompt: Any, extra: dict[str, Any]) -> Outcome:
    before = len(a.up.seen)
    status, _ = await a.post("/v1/completions", {"prompt": prompt, **extra})
    if len(a.up.seen) == before:
        return True, f"refused {status}"
    prompts = len(prompt) if isinstance(prompt, list) and isinstance(prompt[0], (str, list)) else 1
    out = _generated(a.last()["body"], prompts)
    return out <= CAP, f"{out} output tokens against a cap of {CAP}"


async def reserve(a: Attack) -> Outcome:
    """50 prompts x 64 tokens against a budget of 3,000: reserved for what they generate?"""
    await a.patch({"lanes": {"chat": {"max_output_tokens": None, "max_inflight_tokens": 3000}}})
    try:
        status, _ = await a.post("/v1/completions", {"prompt": ["hi"] * 50, "max_tokens": 64})
    finally:
        await a.patch({"lanes": {"chat": {"max_output_tokens": CAP, "max_inflight_tokens": None}}})
    return status == 400, f"{status} (needs 3,250 tokens of a 3,000 budget)"


async def steps(a: Attack, body: dict[str, Any], policy: str) -> Outcome:
    await a.patch({"lanes": {"image": {"max_steps": MAX_STEPS, "media_policy": policy}}})
    before = len(a.up.seen)
    status, _ = await a.post("/v1/images/generations", {"prompt": "a cat", **body})
    if len(a.up.seen) == before:
        return True, f"refused {status}"
    sent = a.last()["body"]
    # A server reads one name and runs its default (30) when that one is absent.
    runs = {k: int(sent[k]) if sent.get(k) is not None else 30 for k in STEP_NAMES}
    worst = max(runs, key=lambda k: runs[k])
    return runs[worst] <= MAX_STEPS, f"a server reading {worst} runs {runs[worst]}"


async def prompt_field(a: Attack, path: str, body: dict[str, Any]) -> Outcome:
    before = len(a.up.seen)
    status, reply = await a.post(path, body)
    code = reply.get("error", {}).get("code") if isinstance(reply, dict) else None
    if len(a.up.seen) == before:
        return status == 400, f"{status} {code}"
    return False, f"{status}: 120 KB passed a {PROMPT_CAP}-token cap"


async def redirect(a: Attack, code: int) -> Outcome:
    before = a.up.elsewhere
    status, _ = await a.post(
        "/v1/completions", {"prompt": "secret", "mode": "redirect", "status": code}
    )
    went = a.up.elsewhere - before
    return went == 0, f"client got {status}; the other origin got {went} request(s)"


async def compressed(a: Attack, coding: str) -> Outcome:
    raw = json.dumps({"prompt": "hi", "max_tokens": 8}).encode()
    packed = gzip.compress(raw) if coding == "gzip" else zlib.compress(raw)
    before = len(a.up.seen)
    status, _ = await a.post("/v1/completions", None, {"Content-Encoding": coding}, packed)
    seen = a.last() if len(a.up.seen) > before else {}
    if seen.get("unparsable"):
        return False, f"{status}: the upstream got plain JSON labelled {coding}"
    return (
        status == 200,
        f"{status}; Content-Encoding upstream: {seen['headers'].get('Content-Encoding')}",
    )


async def undecodable(a: Attack) -> Outcome:
    before = len(a.up.seen)
    status, _ = await a.post("/v1/completions", None, {"Content-Encoding": "gzip"}, b"plain")
    passed = len(a.up.seen) - before
    return 400 <= status < 500 and not passed, f"{status}; {passed} reached the upstream"


async def silent(a: Attack, mode: str, stream: bool) -> Outcome:
    ok = await a.patch(
        {"lanes": {"chat": {"upstream_first_byte_timeout_s": 1, "upstream_idle_timeout_s": 1}}}
    )
    note = "" if ok == 200 else " (no upstream timeout to set)"
    body = {"prompt": "hi", "mode": mode, "stream": stream}
    try:
        status, reply = await a.post("/v1/completions", body, timeout=5.0)
    except asyncio.TimeoutError:
        return False, f"no answer in 5 s: the slot is held until the client leaves{note}"
    except aiohttp.ClientPayloadError:
        return True, "stream cut after 1 s of silence"
    code = reply.get("error", {}).get("code") if isinstance(reply, dict) else None
    return status == 504, f"{status} {code}"


async def header(a: Attack, headers: dict[str, str], want: int, what: str) -> Outcome:
    status, _ = await a.post("/v1/completions", {"prompt": "hi"}, headers)
    return status == want, f"{status} ({what})"


def attacks(a: Attack) -> list[tuple[str, str, Callable[[], Awaitable[Outcome]]]]:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": BIG}}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"d": BIG}}}
    new_t, old_t = "x-llm-d-inference-fairness-id", "x-gateway-inference-fairness-id"
    return [
        ("1 batch", "50 prompts, max_tokens 64", lambda: batched(a, ["hi"] * 50, {"max_tokens": 64})),
        ("1 batch", "500 prompts, no bound", lambda: batched(a, ["hi"] * 500, {})),
        ("1 batch", "50 token-id prompts", lambda: batched(a, [[1, 2, 3]] * 50, {"max_tokens": 64})),
        ("1 batch", "10 prompts x n=3", lambda: batched(a, ["hi"] * 10, {"n": 3})),
        ("1 batch", "4 prompts x best_of 4, max 16", lambda: batched(a, ["a"] * 4, {"best_of": 4, "max_tokens": 16})),
        ("1 batch", "reserved from the budget", lambda: reserve(a)),
        ("4 steps", "num_inference_steps 10, clamp", lambda: steps(a, {"num_inference_steps": 10}, "clamp")),
        ("4 steps", "num_inference_steps 10, reject", lambda: steps(a, {"num_inference_steps": 10}, "reject")),
        ("4 steps", "step 50 (LocalAI), clamp", lambda: steps(a, {"step": 50}, "clamp")),
        ("4 steps", "step 50, reject", lambda: steps(a, {"step": 50}, "reject")),
        ("4 steps", "steps 10 + num_inference 50", lambda: steps(a, {"steps": 10, "num_inference_steps": 50}, "clamp")),
        ("4 steps", '"50" as a string', lambda: steps(a, {"num_inference_steps": "50"}, "clamp")),
        ("5 prompt", "tools[] 120 KB", lambda: prompt_field(a, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": [tool]})),
        ("5 prompt", "tool_calls arguments", lambda: prompt_field(a, "/v1/chat/completions", {"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]})),
        ("5 prompt", "functions[] (legacy)", lambda: prompt_field(a, "/v1/chat/completions", {"messages": [], "functions": [tool["function"]]})),
        ("5 prompt", "tool message's tool_call_id", lambda: prompt_field(a, "/v1/chat/completions", {"messages": [{"role": "tool", "content": "", "tool_call_id": BIG}]})),
        ("5 prompt", "a message's name", lambda: prompt_field(a, "/v1/chat/completions", {"messages": [{"role": "user", "content": "", "name": BIG}]})),
        ("5 prompt", "documents (RAG template)", lambda: prompt_field(a, "/v1/chat/completions", {"messages": [], "documents": [{"text": BIG}]})),
        ("5 prompt", "chat_template", lambda: prompt_field(a, "/v1/chat/completions", {"messages": [], "chat_template": BIG})),
        ("5 prompt", "Responses instructions", lambda: prompt_field(a, "/v1/responses", {"input": "hi", "instructions": BIG})),
        ("5 prompt", "Responses input items", lambda: prompt_field(a, "/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_text", "text": BIG}]}]})),
        ("5 prompt", "function_call_output item", lambda: prompt_field(a, "/v1/responses", {"input": [{"type": "function_call_output", "call_id": "c", "output": BIG}]})),
        ("5 prompt", "completions suffix", lambda: prompt_field(a, "/v1/completions", {"prompt": "def f(", "suffix": BIG})),
        ("7 redirect", "302", lambda: redirect(a, 302)),
        ("7 redirect", "307 (body re-sent)", lambda: redirect(a, 307)),
        ("7 redirect", "308 (body re-sent)", lambda: redirect(a, 308)),
        ("8 gzip", "Content-Encoding: gzip", lambda: compressed(a, "gzip")),
        ("8 gzip", "Content-Encoding: deflate", lambda: compressed(a, "deflate")),
        ("8 gzip", "bytes that do not inflate", lambda: undecodable(a)),
        ("13 silent", "no first byte", lambda: silent(a, "silent", False)),
        ("13 silent", "no first byte, streamed", lambda: silent(a, "silent", True)),
        ("13 silent", "silent mid-stream", lambda: silent(a, "silent_mid", True)),
        ("15 headers", "llm-d tenant name", lambda: header(a, {new_t: "acme"}, 503, "acme is paused")),
        ("15 headers", "deprecated tenant name", lambda: header(a, {old_t: "acme"}, 503, "acme is paused")),
        ("15 headers", "both: new acme, old bob", lambda: header(a, {new_t: "acme", old_t: "bob"}, 503, "the new name's")),
        ("15 headers", "both: new bob, old acme", lambda: header(a, {new_t: "bob", old_t: "acme"}, 200, "the new name's")),
    ]  # fmt: skip


async def run_side(tree: Path) -> list[Outcome]:
    upstream = Upstream()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream.handle)
    other = web.Application()
    other.router.add_route("*", "/{tail:.*}", upstream.other)
    runners = []
    ports = []
    for one in (app, other):
        runner = web.AppRunner(one, handle_signals=False)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        ports.append(port)
    upstream.other_url = f"http://127.0.0.1:{ports[1]}"
    gate_port = free_port()
    state = Path(tempfile.mkdtemp()) / "state.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "gate", "--upstream", f"http://127.0.0.1:{ports[0]}",
         "--listen", f"127.0.0.1:{gate_port}", "--state-file", str(state)],
        # In the tree's folder: ``-m`` puts the working folder first on sys.path.
        env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await asyncio.to_thread(wait_port, gate_port)
        async with aiohttp.ClientSession() as s:
            a = Attack(s, f"http://127.0.0.1:{gate_port}", upstream)
            status = await a.patch(
                {"lanes": {"chat": {"max_output_tokens": CAP, "max_prompt_tokens": PROMPT_CAP}},
                 "tenants": {"acme": {"paused": True}}}
            )  # fmt: skip
            assert status == 200, status
            out = []
            for _, _, attack in attacks(a):
                try:
                    out.append(await attack())
                except Exception as exc:  # a crash is a result too
                    out.append((False, f"{type(exc).__name__}: {exc}"[:60]))
            return out
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for runner in runners:
            await runner.cleanup()


def main() -> None:
    # The upstream's server logs what it cannot decode (the old gate's relabelled bodies).
    logging.getLogger("aiohttp").setLevel(logging.CRITICAL)
    with checkout(BEFORE) as old:
        before = asyncio.run(run_side(old))
    after = asyncio.run(run_side(REPO))
    names = attacks(Attack(None, "", Upstream()))  # type: ignore[arg-type]
    print(f"{'item':<11}{'attack':<32}{'before (' + BEFORE + ')':<44}after (this checkout)")
    for (item, what, _), (held0, why0), (held1, why1) in zip(names, before, after, strict=True):
        first = f"{'HELD' if held0 else 'BROKE'} {why0}"[:42]
        print(f"{item:<11}{what:<32}{first:<44}{'HELD' if held1 else 'BROKE'} {why1}")
    print(
        f"held: before {sum(h for h, _ in before)}/{len(before)}, "
        f"after {sum(h for h, _ in after)}/{len(after)}"
    )


if __name__ == "__main__":
    main()
