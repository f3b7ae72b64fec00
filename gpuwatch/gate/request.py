"""One inference request, read once: where it goes, who sent it, and every fact of its body
that the lane's checks judge (media parameters, prompt, output bound, stream flag). Pure.

``read_request`` reads the body the one time, and only the fields some check of the lane
reads: a lane without caps or a token budget passes any body on untouched and parses no JSON
at all, so its cost stays the proxy's own. What the gate must read and cannot (a field of the
wrong type, a body that is not a JSON object) is a ``BodyError`` naming the field: a 400,
raised before any cap judges the request. Nothing else escapes.

The checks take the typed request: ``mediacaps.check_media`` its media parameters,
``caps.check_text`` its prompt and output bound, the lane's admission its tenant, class, token
reservation and stream flag. A cap that rewrites fields returns a ``Clamp``, and
``BodyFacts.clamped`` applies it: ``InferenceRequest.payload`` is then what the upstream gets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuwatch.gate.classes import Who
from gpuwatch.gate.fields import BodyError, count
from gpuwatch.gate.limits import MEDIA_CAPS, LaneLimits
from gpuwatch.gate.prompt import EXTRA_PROMPT_KEYS, PROMPT_KEYS, Prompt, prompts, read_prompt
from gpuwatch.safejson import JSONError, loads_bounded

# Every name an OpenAI-compatible server reads as the output bound (vLLM, llama.cpp, TGI, the
# Responses API): all present are capped, whichever the upstream happens to use. llama.cpp
# reads n_predict before max_tokens even on /v1 routes.
OUTPUT_KEYS = (
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "max_new_tokens",
    "n_predict",
)
# Each answer a request asks for is generated: the output cap holds their sum.
CHOICE_KEYS = ("n", "best_of")
# Every name an image server reads its denoising steps under: ``steps`` (the simulator, A1111-
# style servers), diffusers' ``num_inference_steps`` (diffusers-based servers, SGLang's and
# vLLM-Omni's), LocalAI's ``step``.
STEP_KEYS = ("steps", "num_inference_steps", "step")
# Where embedding-lane routes carry their items: ``input`` (embeddings), ``documents``
# (vLLM's and Cohere's rerank), ``texts`` (TEI's rerank), ``text_1``/``text_2`` (vLLM's score).
ITEM_KEYS = ("input", "documents", "texts", "text_1", "text_2")
_SIZE = re.compile(r"(\d{1,6})x(\d{1,6})")
# The fields each fact is read from: a cap that rewrites one of them changes the fact.
_PROMPT_FIELDS = frozenset((*PROMPT_KEYS, *EXTRA_PROMPT_KEYS))
_OUTPUT_FIELDS = frozenset((*OUTPUT_KEYS, *CHOICE_KEYS, "prompt"))
_ANYONE = Who()


def has_media_caps(limits: LaneLimits) -> bool:
    return any(getattr(limits, key) is not None for key in MEDIA_CAPS)


@dataclass(frozen=True)
class Items:
    """An embedding-lane field's items (strings, or token-id lists), and whether it came as a
    single one (a string, or one flat id list): a clamp writes it back in the shape it came."""

    values: tuple[Any, ...]
    single: bool


@dataclass(frozen=True)
class Media:
    """The image and embedding parameters the lane's caps read; a parameter no cap of the lane
    reads is not read (absent here)."""

    size: tuple[int, int] | None = None  # None: absent or "auto", the server's default
    steps: Mapping[str, int] = field(default_factory=dict)  # each step name given, not null
    n: int | None = None
    items: Mapping[str, Items] = field(default_factory=dict)


@dataclass(frozen=True)
class Output:
    """The output a request asks for: each output-bound name it sends (as the upstream reads
    it; None for null), the answers per prompt it asks for (``n``, ``best_of``) and how many
    prompts it carries."""

    bounds: Mapping[str, int | None] = field(default_factory=dict)
    choices: Mapping[str, int] = field(default_factory=dict)
    prompts: int = 1

    @property
    def answers(self) -> int:
        """How many answers are generated: the most asked per prompt, for each prompt."""
        return max((1, *self.choices.values())) * self.prompts


@dataclass(frozen=True)
class Clamp:
    """What a cap rewrote in a request it lets through: fields and their new values, and the
    notes for ``X-Gpuwatch-Clamped`` (a field filled in with the client's own value is an edit
    without a note)."""

    edits: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class BodyFacts:
    """What the lane's checks read of a body: the JSON object (what is sent upstream, with
    the caps' edits), and the facts each check judges; None where no check of the lane reads
    them. ``notes``: what the caps clamped, for X-Gpuwatch-Clamped."""

    body: Mapping[str, Any]
    model: str | None = None
    media: Media | None = None
    prompt: Prompt | None = None
    output: Output | None = None
    rewritten: bool = False
    notes: tuple[str, ...] = ()

    def clamped(self, clamp: Clamp) -> BodyFacts:
        """The facts with a cap's edits applied; those read from a rewritten field are read
        again from its new value (an embedding input cut short is a shorter prompt, an ``n``
        held to ``max_n`` fewer answers)."""
        if not clamp.edits:
            return self
        body = {**self.body, **clamp.edits}
        keys = clamp.edits.keys()
        prompt = self.prompt
        if prompt is not None and keys & _PROMPT_FIELDS:
            prompt = read_prompt(body)
        output = self.output
        if output is not None and keys & _OUTPUT_FIELDS:
            output = read_output(body)
        notes = self.notes + clamp.notes
        return replace(self, body=body, prompt=prompt, output=output, rewritten=True, notes=notes)


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """A request as the gate's checks see it: its lane, path, tenant and class, and the facts
    of its body the lane's checks read (``facts``: None where no check reads the body, which is
    then forwarded as received). Few fields of its own: one is built for every request."""

    lane: str
    path: str
    raw: bytes
    query: str = ""
    who: Who = _ANYONE
    inference: bool = True
    # Asks for a streamed answer. Read only where it matters (the caller says: a lane whose
    # prefills are capped), else False: parsing a body just for it costs every request.
    stream: bool = False
    facts: BodyFacts | None = None

    @property
    def tenant(self) -> str:
        return self.who.tenant

    @property
    def klass(self) -> str:
        return self.who.klass

    @property
    def notes(self) -> tuple[str, ...]:
        return () if self.facts is None else self.facts.notes

    def payload(self) -> bytes:
        """The body to send upstream: as received, or encoded again when a cap rewrote it."""
        if self.facts is not None and self.facts.rewritten:
            return json.dumps(self.facts.body).encode()
        return self.raw


def _size(value: Any) -> tuple[int, int] | None:
    """(width, height) of a ``size`` field; None for absent or ``auto`` (the server picks)."""
    if value is None or value == "auto":
        return None
    if not isinstance(value, str):
        raise BodyError("size", "must be a string like '1024x1024'")
    match = _SIZE.fullmatch(value.strip())
    if match is None:
        raise BodyError("size", f"must be WIDTHxHEIGHT like '1024x1024', got {value[:20]!r}")
    width, height = int(match.group(1)), int(match.group(2))
    if width < 1 or height < 1:
        raise BodyError("size", "width and height must be at least 1")
    return width, height


def _items(key: str, value: Any) -> Items:
    """The items of an embedding-lane field: a string, strings, token ids, lists of ids."""
    if isinstance(value, str):
        return Items((value,), single=True)
    if isinstance(value, list):
        if all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            return Items((value,) if value else (), single=bool(value))
        if all(isinstance(i, str) for i in value):
            return Items(tuple(value), single=False)
        if all(
            isinstance(i, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in i)
            for i in value
        ):
            return Items(tuple(value), single=False)
    raise BodyError(key, "must be a string, a list of strings or a list of token ids")


def read_media(body: Mapping[str, Any], limits: LaneLimits) -> Media:
    """The parameters the lane's media caps read, in the order the caps judge them."""
    size = _size(body.get("size")) if limits.max_pixels is not None else None
    steps: dict[str, int] = {}
    if limits.max_steps is not None:
        for key in STEP_KEYS:
            value = count(key, body.get(key))
            if value is not None:
                steps[key] = value
    n = count("n", body.get("n")) if limits.max_n is not None else None
    items: dict[str, Items] = {}
    if limits.max_inputs is not None or limits.max_input_tokens is not None:
        items = {k: _items(k, body[k]) for k in ITEM_KEYS if body.get(k) is not None}
    return Media(size, steps, n, items)


def read_output(body: Mapping[str, Any]) -> Output:
    """The output bounds and answers a body asks for, type-checked."""
    choices: dict[str, int] = {}
    for key in CHOICE_KEYS:
        value = count(key, body.get(key))
        if value is not None:
            if value < 1:
                raise BodyError(key, f"must be at least 1, got {value}")
            choices[key] = value
    bounds = {k: count(k, body[k]) for k in OUTPUT_KEYS if k in body}
    return Output(bounds, choices, prompts(body))


def _asks_to_stream(raw: bytes) -> bool:
    """The stream flag of a body read for nothing else: only a body that names ``stream`` at
    all is parsed, and one that does not parse streams nothing (no check refuses it)."""
    if b'"stream"' not in raw:
        return False
    try:
        body = loads_bounded(raw)
    except JSONError:
        return False
    return isinstance(body, dict) and body.get("stream") is True


def read_request(
    raw: bytes,
    limits: LaneLimits,
    *,
    lane: str,
    path: str,
    query: str = "",
    who: Who | None = None,
    inference: bool = True,
    stream_matters: bool = False,
) -> InferenceRequest:
    """Read a request the one time, for the checks of a lane under ``limits``: the body's
    facts each check needs, type-checked; BodyError for what cannot be read.

    The body is parsed when a check needs it: media caps (a request with a body), a prompt or
    output cap (every request, a GET too: a capped lane needs a JSON body), a token budget (a
    request with a body). ``stream_matters``: the lane caps prefills, so the stream flag is read
    even from a body no check parses."""
    has_body = bool(raw.strip())  # a GET through the lane has none to cap or count
    budget = limits.max_inflight_tokens is not None
    cap_prompt = limits.max_prompt_tokens is not None
    cap_output = limits.max_output_tokens is not None
    media = has_body and has_media_caps(limits)
    who = who or _ANYONE
    if not (media or cap_prompt or cap_output or (budget and has_body)):
        stream = stream_matters and _asks_to_stream(raw)
        return InferenceRequest(lane, path, raw, query, who, inference, stream=stream)
    try:
        body = loads_bounded(raw)
    except JSONError as exc:
        raise BodyError(
            "body", f"lane {lane!r} has caps or a token budget and needs a JSON body: {exc}"
        ) from None
    if not isinstance(body, dict):
        raise BodyError("body", "must be a JSON object")
    # Read in the order the checks judge: media caps, then the prompt, then the output bound.
    params = read_media(body, limits) if media else None
    prompt = read_prompt(body) if cap_prompt or budget else None
    output = read_output(body) if cap_output or budget else None
    model = body.get("model")
    facts = BodyFacts(body, model if isinstance(model, str) else None, params, prompt, output)
    stream = stream_matters and body.get("stream") is True
    return InferenceRequest(lane, path, raw, query, who, inference, stream, facts)
