"""Which adapter serves which stack, and where an engine's knobs are.

A ``[[knobs]]`` entry of the config names a stack's admin API (and, with ``engine``, the engine
it steers). Without one, the stacks whose admin API shares the engine's port (Dynamo's frontend,
vLLM, SGLang, LiteLLM's proxy) are looked for at the metrics URL's origin; Ray Serve's is on the
dashboard's port (8265), which only the config can say.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from gpuwatch.admintoken import read_token
from gpuwatch.config import KnobConfig
from gpuwatch.control.knobs.base import KnobAdapter, KnobEndpoint, KnobError
from gpuwatch.control.knobs.dynamo import DynamoKnobs
from gpuwatch.control.knobs.litellm import LiteLLMKnobs
from gpuwatch.control.knobs.ray import RayServeKnobs
from gpuwatch.control.knobs.sglang import SGLangKnobs
from gpuwatch.control.knobs.vllm import VLLMKnobs

ADAPTERS: dict[str, Callable[[KnobEndpoint], KnobAdapter]] = {
    # One line per stack's module (ray, dynamo, litellm, sglang, vllm).
    "ray": RayServeKnobs,
    "dynamo": DynamoKnobs,
    "litellm": LiteLLMKnobs,
    "sglang": SGLangKnobs,
    "vllm": VLLMKnobs,
}

# The stacks whose admin API answers on the same port as their metrics.
ON_METRICS_ORIGIN = ("dynamo", "vllm", "sglang", "litellm")


def adapter_for(endpoint: KnobEndpoint) -> KnobAdapter:
    make = ADAPTERS.get(endpoint.stack)
    if make is None:
        known = ", ".join(sorted(ADAPTERS)) or "none"
        raise KnobError(f"no knob adapter for stack {endpoint.stack!r} (known: {known})")
    return make(endpoint)


def origin(url: str) -> str:
    """``http://host:8000/metrics`` -> ``http://host:8000``."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def endpoint_of(config: KnobConfig) -> KnobEndpoint:
    """The endpoint a ``[[knobs]]`` entry names, its credential read from its file (with the
    admin token's care: trimmed, sendable in a header, a warning when others may read it);
    KnobError naming the file."""
    credential = None
    if config.credential_file:
        try:
            credential = read_token(
                Path(config.credential_file).expanduser(), what=f"{config.stack} credential"
            )
        except ValueError as exc:
            raise KnobError(str(exc)) from None
    return KnobEndpoint(config.stack, config.url, credential, config.timeout_s)


def _same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def discover(
    dialect: str, metrics_url: str, configured: Sequence[KnobConfig]
) -> KnobEndpoint | None:
    """Where the knobs of the engine scraped at ``metrics_url`` (speaking ``dialect``) are:
    a ``[[knobs]]`` entry whose ``engine`` is that URL wins; then the only entry of that stack
    that names no engine; then, for the stacks whose admin API shares the engine's port, the
    metrics URL's origin; else None."""
    for config in configured:
        if config.engine and _same_url(config.engine, metrics_url):
            return endpoint_of(config)
    unnamed = [c for c in configured if c.stack == dialect and not c.engine]
    if len(unnamed) == 1:
        return endpoint_of(unnamed[0])
    if dialect in ON_METRICS_ORIGIN:
        return KnobEndpoint(dialect, origin(metrics_url))
    return None
