"""Send the load and measure every request as a user feels it (aiohttp).

Per request: TTFT = first chunk whose choice carries text; ITL = gaps between such chunks;
E2E = start to the last of them; TPOT = (E2E - TTFT) / (output tokens - 1). Output tokens come
from ``usage`` when the server sends it, else from the number of content chunks.
Embeddings and images are not streamed: they have an E2E latency only.
Non-2xx responses fail by status code and are never retried. With tenants or classes, each
request carries the llm-d router's headers (``gate/classes.py``): ``x-llm-d-inference-
fairness-id`` (the tenant) and ``x-llm-d-inference-objective`` (the class).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gpuwatch.errors import GpuwatchError
from gpuwatch.gate.classes import FAIRNESS_HEADER, OBJECTIVE_HEADER
from gpuwatch.load.spec import LoadSpec, arrival_times
from gpuwatch.tokens import CHARS_PER_TOKEN, single_message_chars

_WORDS = ("alpha", "bravo", "delta", "echo", "gamma", "kilo", "lima", "nova", "omega", "sierra")
# (planned send time, lane, prompt tokens, output tokens)
Shape = tuple[float, str, int, int]
# Statuses that are a refusal to come back later (rate limited, overloaded), not a failure.
REFUSALS = (429, 503)
# Stop early when this many requests in a row failed to connect and none ever succeeded.
_DEAD_AFTER = 3


class NothingListening(GpuwatchError):
    """The target never answered; the message is the one line the CLI prints."""


@dataclass
class Result:
    lane: str
    planned: float
    klass: str | None = None
    tenant: str | None = None
    sent: float = 0.0
    status: int | str | None = None
    ttft: float | None = None
    e2e: float | None = None
    itl: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    # A 429 / 503: how long the refusal took to come, and the Retry-After it carried. A gate
    # that holds the boring zone refuses at once and says when to come back.
    refused_s: float | None = None
    retry_after: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def tpot(self) -> float | None:
        if self.ttft is None or self.e2e is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


def make_prompt(tokens: int, rng: random.Random, tag: int) -> str:
    """Text the server will count as ``tokens`` tokens (4 characters each)."""
    return make_text(tokens * CHARS_PER_TOKEN, rng, tag)


def make_text(target: int, rng: random.Random, tag: int) -> str:
    """``target`` characters of words, with a unique lead so that requests do not share a
    cached prefix by accident."""
    head = f"req {tag:08d} "
    words: list[str] = [head]
    size = len(head)
    while size < target:
        word = rng.choice(_WORDS) + " "
        words.append(word)
        size += len(word)
    return "".join(words)[:target]


async def fetch_model(session: aiohttp.ClientSession, url: str) -> str:
    try:
        async with session.get(f"{url}/v1/models") as resp:
            if resp.status != 200:
                raise NothingListening(
                    f"GET {url}/v1/models answered HTTP {resp.status}; pass --model"
                )
            data = await resp.json()
            if data.get("data"):
                return data["data"][0]["id"]
            return data["models"][0]["model"]  # llama.cpp's own list, when "data" is empty
    except aiohttp.ClientConnectorError as exc:
        raise NothingListening(f"nothing listening at {url} (connection refused)") from exc
    except (aiohttp.ClientError, KeyError, IndexError, ValueError, TypeError) as exc:
        raise NothingListening(
            f"cannot read the model list at {url}/v1/models ({type(exc).__name__}); pass --model"
        ) from exc


class LoadRun:
    """One load run; ``results`` fills while it runs, ``stop()`` ends it early."""

    def __init__(
        self,
        spec: LoadSpec,
        on_update: Callable[[LoadRun], None] | None = None,
        shapes: Iterable[Shape] | None = None,
    ) -> None:
        self.spec = spec
        # A replay: each request's planned time, lane, prompt and output tokens, given instead
        # of drawn (``gpuwatch plan sweep --traffic``); None draws them from the spec.
        self.shapes = shapes
        self.results: list[Result] = []
        self.inflight = 0
        self.started = 0.0
        self.ended = 0.0
        self.model = spec.model
        self._stop = asyncio.Event()
        self._on_update = on_update
        self._connect_failures = 0
        self._any_ok = False
        self.dead: str | None = None

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _body(
        self, lane: str, rng: random.Random, tag: int, r: Result, shape: Shape | None = None
    ) -> tuple[str, dict[str, Any]]:
        spec = self.spec
        prompt_tokens = shape[2] if shape else spec.prompt_tokens.sample(rng)
        r.prompt_tokens = prompt_tokens
        if lane == "embed":
            # No "model": an embedding server serves its one model (TEI ignores the field).
            if shape:
                return "/v1/embeddings", {"input": make_prompt(prompt_tokens, rng, tag)}
            count = spec.embed.inputs.sample(rng)
            sizes = [spec.embed.tokens.sample(rng) for _ in range(count)]
            r.prompt_tokens = sum(sizes)
            texts = [make_prompt(t, rng, tag) for t in sizes]
            return "/v1/embeddings", {"input": texts if count > 1 else texts[0]}
        if lane == "image":
            width, height = rng.choice(spec.image.sizes)
            n = spec.image.n.sample(rng)
            steps = spec.image.steps.sample(rng)
            r.prompt_tokens = 0
            body = {"prompt": make_text(64, rng, tag), "size": f"{width}x{height}", "n": n}
            return "/v1/images/generations", {**body, "steps": steps}
        max_tokens = shape[3] if shape else spec.output_tokens.sample(rng)
        common = {
            "model": self.model,
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
        if spec.api == "completions":
            return "/v1/completions", {**common, "prompt": make_prompt(prompt_tokens, rng, tag)}
        text = make_text(single_message_chars(prompt_tokens), rng, tag)
        return "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": text}]}

    async def _one(
        self, session: aiohttp.ClientSession, path: str, body: dict[str, Any], r: Result
    ) -> None:
        headers = {}
        if r.klass:
            headers[OBJECTIVE_HEADER] = r.klass
        if r.tenant:
            headers[FAIRNESS_HEADER] = r.tenant
        self.inflight += 1
        start = time.perf_counter()
        r.sent = start - self.started
        last = None
        chunks = 0
        try:
            url = f"{self.spec.url}{path}"
            async with session.post(url, json=body, headers=headers) as resp:
                if resp.status != 200:
                    r.status = resp.status
                    if resp.status in REFUSALS:
                        r.refused_s = time.perf_counter() - start
                        r.retry_after = resp.headers.get("Retry-After")
                    await resp.read()
                    return
                if not body.get("stream"):
                    await resp.read()
                    r.e2e = time.perf_counter() - start
                    r.status = 200
                    return
                async for line in resp.content:
                    if not line.startswith(b"data: "):
                        continue
                    payload = line[6:].strip()
                    if payload == b"[DONE]":
                        # Read on to the end of the body: closing the connection under the
                        # server's last write makes a gate count a whole answer as abandoned.
                        continue
                    data = json.loads(payload)
                    if not isinstance(data, dict):  # the server's answer, whatever it is
                        raise ValueError("a stream chunk that is not a JSON object")
                    usage = data.get("usage")
                    if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                        r.output_tokens = usage["completion_tokens"]
                    if _has_content(data):
                        now = time.perf_counter()
                        if last is None:
                            r.ttft = now - start
                        else:
                            r.itl.append(now - last)
                        last = now
                        chunks += 1
                r.e2e = (last - start) if last is not None else time.perf_counter() - start
                r.output_tokens = r.output_tokens or chunks
                r.status = 200
        except aiohttp.ClientConnectorError:
            r.status = "connect"
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError):
            r.status = "disconnected"
        except asyncio.TimeoutError:
            r.status = "timeout"
        except (aiohttp.ClientError, ValueError) as exc:
            r.status = type(exc).__name__
        finally:
            self.inflight -= 1
            if r.status == 200:
                self._any_ok = True
                self._connect_failures = 0
            elif r.status == "connect":
                self._connect_failures += 1
                if not self._any_ok and self._connect_failures >= _DEAD_AFTER:
                    self.dead = f"nothing listening at {self.spec.url} (connection refused)"
                    self._stop.set()
            if self._on_update:
                self._on_update(self)

    async def run(self) -> list[Result]:
        spec = self.spec
        rng = random.Random(spec.seed)
        lanes = list(spec.lane_mix)
        weights = [spec.lane_mix[k] for k in lanes]
        tenants = spec.tenancy.weights()
        tenant_names, tenant_weights = list(tenants), list(tenants.values())
        class_names, class_weights = list(spec.classes), list(spec.classes.values())
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
        gate = asyncio.Semaphore(spec.max_concurrency) if spec.max_concurrency else None
        tasks: set[asyncio.Task[None]] = set()
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            if self.model is None and "chat" in lanes:
                self.model = await fetch_model(session, spec.url)
            self.started = time.perf_counter()
            timeline: Iterable[tuple[float, Shape | None]] = (
                ((shape[0], shape) for shape in self.shapes)
                if self.shapes is not None
                else ((t, None) for t in arrival_times(spec, rng))
            )
            for tag, (planned, shape) in enumerate(timeline):
                delay = self.started + planned - time.perf_counter()
                if delay > 0:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), delay)
                if self._stop.is_set():
                    break
                if shape:
                    lane = shape[1]
                else:
                    lane = rng.choices(lanes, weights)[0] if len(lanes) > 1 else lanes[0]
                r = Result(lane, planned)
                path, body = self._body(lane, rng, tag, r, shape)
                # Drawn only when asked for, so a run without them keeps its seeded sequence.
                if tenant_names:
                    r.tenant = rng.choices(tenant_names, tenant_weights)[0]
                if class_names:
                    r.klass = rng.choices(class_names, class_weights)[0]
                self.results.append(r)
                task = asyncio.create_task(self._guarded(session, gate, path, body, r))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                # Stopped early (Ctrl-C): give in-flight requests a moment, then cut them off.
                grace = 5.0 if self._stop.is_set() else None
                _, pending = await asyncio.wait(tasks, timeout=grace)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
        self.ended = time.perf_counter()
        if self.dead:
            raise NothingListening(self.dead)
        return self.results

    async def _guarded(
        self,
        session: aiohttp.ClientSession,
        gate: asyncio.Semaphore | None,
        path: str,
        body: dict[str, Any],
        r: Result,
    ) -> None:
        if gate is None:
            await self._one(session, path, body, r)
            return
        async with gate:
            await self._one(session, path, body, r)


def _has_content(data: dict[str, Any]) -> bool:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    choice = choices[0]
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    return isinstance(delta, dict) and bool(delta.get("content") or delta.get("reasoning_content"))
