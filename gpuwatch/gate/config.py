"""The gate's TOML config: lanes (path prefixes + limits) and extra routed paths.

```toml
extra_paths = ["/tokenize", "/health"]     # proxied to the "default" lane; others are 404
client_header_timeout_s = 10                # like nginx's client_header_timeout
client_body_timeout_s = 30                  # longest wait for the next piece of a body
client_send_timeout_s = 60                  # longest wait for a client to take a piece of a stream
default_output_tokens = 512                 # output reserved from a token budget when a request
                                            # sets no bound and its lane has no output cap
[slo]                                       # the objectives the gate holds (as the dashboard's)
ttft_p99_s = 2.0                            # a lane without a target of its own derives its
                                            # queue-wait budget from this (deadline.py)
lanes = ["chat"]                            # ... the lanes ttft_p99_s is for (the default)
kv_usage_high = 0.95                        # an adaptive lane cuts when upstream KV is this full
[lanes.chat]
prefixes = ["/v1/chat/completions", "/v1/completions", "/v1/responses"]
max_inflight = 8
max_output_tokens = 1024
tokenize = false                            # true: count prompts with the upstream /tokenize
max_body = "4MiB"                           # bytes, or a size with KiB / MiB / GiB
[lanes.batch]                               # a new lane needs its prefixes
prefixes = ["/v1/batch"]
[otlp]                                      # OpenTelemetry export (docs/otel.md); off without
endpoint = "http://127.0.0.1:4318"          # an endpoint (--otlp-endpoint sets it too)
protocol = "http/protobuf"                  # or "grpc" (the otlp-grpc extra)
schedule_delay_s = 1.0                      # the batch processor's pace
max_queue = 2048                            # spans held while the collector is away
timeout_s = 10                              # one export's limit, retries included
metrics_interval_s = 30                     # how often the GenAI metrics are sent
sample_ratio = 1.0                          # the share of traces recorded (metrics: all)
```
Limits given here are the starting point; limits persisted in the state file win over them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuwatch.errors import ConfigError
from gpuwatch.gate.classes import Fairness, parse_fairness
from gpuwatch.gate.limits import (
    DEFAULT_LANES,
    LANE_KEYS,
    MAX_TOKENS,
    Lane,
    LaneLimits,
    Limits,
    LimitsError,
    apply_patch,
)
from gpuwatch.otlp import PROTOCOLS, OtlpConfig, check_endpoint
from gpuwatch.tomlfile import read_toml


@dataclass(frozen=True)
class GateConfig:
    lanes: tuple[Lane, ...]
    extra_paths: tuple[str, ...] = ()
    # Slow clients: the request line and headers must arrive within the first; a body may
    # pause at most the second between two pieces (nginx's client_*_timeout, 408 on expiry).
    client_header_timeout_s: float = 10.0
    client_body_timeout_s: float = 30.0
    # A streaming client that stops reading for this long is cut off (nginx's send_timeout).
    client_send_timeout_s: float = 60.0
    # Output tokens reserved from a lane's max_inflight_tokens for a request that sets no
    # bound of its own, in a lane without max_output_tokens.
    default_output_tokens: int = 512
    # Classes and tenants from headers ([fairness], see classes.py).
    fairness: Fairness = field(default_factory=Fairness)
    # [slo]: the TTFT objective of lanes without a target of their own (None: those lanes
    # have no queue-wait budget unless max_queue_wait_s is set), and the upstream KV usage at
    # which an adaptive lane cuts (the dashboard's kv_usage_high).
    slo_ttft_s: float | None = None
    kv_usage_high: float = 0.95
    # The lanes slo_ttft_s is for: those that stream tokens. An image or an embedding has no
    # first token before its whole answer, so a TTFT budget would refuse all its queue.
    slo_lanes: tuple[str, ...] = ("chat",)
    # [otlp]: spans and GenAI metrics to an OpenTelemetry collector (off: no endpoint).
    otlp: OtlpConfig = field(default_factory=OtlpConfig)


TIMEOUT_KEYS = ("client_header_timeout_s", "client_body_timeout_s", "client_send_timeout_s")
_UNITS = {"": 1, "B": 1, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3}
MAX_BODY_CEILING = 1024**3


def parse_size(value: Any) -> int:
    """``4194304`` or ``"4MiB"`` -> bytes; ValueError with the reason."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str):
        number = value.strip().rstrip("BbIiKkMmGg")
        unit = value.strip()[len(number) :].upper()
        if unit not in _UNITS or not (number.strip().isascii() and number.strip().isdigit()):
            raise ValueError(f'must be bytes or a size like "4MiB", got {value[:40]!r}')
        size = int(number) * _UNITS[unit]
    else:
        raise ValueError(f'must be bytes or a size like "4MiB", got {type(value).__name__}')
    if not 1 <= size <= MAX_BODY_CEILING:
        raise ValueError(f"must be between 1 byte and 1GiB, got {size}")
    return size


def _seconds(path: Path, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
        raise ConfigError(f"{path}: key '{key}' must be a number of seconds in (0, 3600]")
    return float(value)


def _strings(path: Path, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: key '{key}' must be a list of strings")
    return tuple(value)


def load_gate_config(path: Path | None) -> GateConfig:
    if path is None:
        return GateConfig(DEFAULT_LANES)
    data = read_toml(path)
    lanes = {lane.name: lane for lane in DEFAULT_LANES}
    extra: tuple[str, ...] = ()
    timeouts: dict[str, Any] = {}  # floats; Any so ** can pass them beside an int field
    default_output = GateConfig.default_output_tokens
    fairness = Fairness()
    slo: dict[str, Any] = {}
    otlp = OtlpConfig()
    for key, value in data.items():
        if key == "extra_paths":
            extra = _strings(path, key, value)
        elif key in TIMEOUT_KEYS:
            timeouts[key] = _seconds(path, key, value)
        elif key == "default_output_tokens":
            if isinstance(value, bool) or not isinstance(value, int):
                value = 0  # refused just below
            if not 1 <= value <= MAX_TOKENS:
                raise ConfigError(f"{path}: key '{key}' must be an integer in [1, {MAX_TOKENS}]")
            default_output = value
        elif key == "fairness":
            fairness = parse_fairness(path, value)
        elif key == "slo":
            slo = _slo(path, value)
        elif key == "otlp":
            otlp = _otlp(path, value)
        elif key == "lanes":
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: 'lanes' must be a table ([lanes.NAME])")
            for name, spec in value.items():
                lanes[name] = _lane(path, name, spec, lanes.get(name))
        else:
            raise ConfigError(f"{path}: unknown key '{key}'")
    return GateConfig(
        tuple(lanes.values()),
        extra,
        **timeouts,
        default_output_tokens=default_output,
        fairness=fairness,
        **slo,
        otlp=otlp,
    )


# [otlp]'s numbers: (key, low, high, whole number); the bounds keep a typo from holding a
# million spans or exporting every microsecond.
_OTLP_NUMBERS = (
    ("schedule_delay_s", 0.01, 60.0, False),
    ("max_queue", 16, 1_000_000, True),
    ("timeout_s", 0.1, 120.0, False),
    ("metrics_interval_s", 0.05, 3600.0, False),
    ("sample_ratio", 0.0, 1.0, False),
)


def _otlp(path: Path, value: Any) -> OtlpConfig:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: 'otlp' must be a table ([otlp])")
    out: dict[str, Any] = {}
    spec = dict(value)
    if "endpoint" in spec:
        endpoint = spec.pop("endpoint")
        if not isinstance(endpoint, str):
            raise ConfigError(f"{path}: key 'otlp.endpoint' must be a URL string")
        try:
            out["endpoint"] = check_endpoint(endpoint)
        except ValueError as exc:
            raise ConfigError(f"{path}: key 'otlp.endpoint' {exc}") from None
    if "protocol" in spec:
        protocol = spec.pop("protocol")
        if protocol not in PROTOCOLS:
            raise ConfigError(f"{path}: key 'otlp.protocol' must be one of {', '.join(PROTOCOLS)}")
        out["protocol"] = protocol
    for key, low, high, whole in _OTLP_NUMBERS:
        if key not in spec:
            continue
        item = spec.pop(key)
        kind = int if whole else (int, float)
        if isinstance(item, bool) or not isinstance(item, kind) or not low <= item <= high:
            what = "an integer" if whole else "a number"
            raise ConfigError(f"{path}: key 'otlp.{key}' must be {what} in [{low:g}, {high:g}]")
        out[key] = item if whole else float(item)
    for key in spec:
        raise ConfigError(f"{path}: unknown key 'otlp.{key}'")
    return OtlpConfig(**out)


def _slo(path: Path, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: 'slo' must be a table ([slo])")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "ttft_p99_s":
            out["slo_ttft_s"] = _seconds(path, "slo.ttft_p99_s", item)
        elif key == "lanes":
            out["slo_lanes"] = _strings(path, "slo.lanes", item)
        elif key == "kv_usage_high":
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                item = -1.0  # refused just below
            if not 0 < item <= 1:
                raise ConfigError(f"{path}: key 'slo.kv_usage_high' must be a share in (0, 1]")
            out["kv_usage_high"] = float(item)
        else:
            raise ConfigError(f"{path}: unknown key 'slo.{key}'")
    return out


def _lane(path: Path, name: str, spec: Any, base: Lane | None) -> Lane:
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: 'lanes.{name}' must be a table")
    spec = dict(spec)
    prefixes = (
        _strings(path, f"lanes.{name}.prefixes", spec.pop("prefixes"))
        if "prefixes" in spec
        else None
    )
    tokenize = spec.pop("tokenize", base.tokenize if base else False)
    if not isinstance(tokenize, bool):
        raise ConfigError(f"{path}: key 'lanes.{name}.tokenize' must be true or false")
    try:
        max_body = parse_size(spec.pop("max_body")) if "max_body" in spec else None
    except ValueError as exc:
        raise ConfigError(f"{path}: key 'lanes.{name}.max_body' {exc}") from None
    if max_body is None:
        max_body = base.max_body if base else Lane(name, (), LaneLimits()).max_body
    if prefixes is None:
        if base is None:
            raise ConfigError(f"{path}: new lane 'lanes.{name}' needs 'prefixes'")
        prefixes = base.prefixes
    for key in spec:
        if key not in LANE_KEYS:
            raise ConfigError(f"{path}: unknown key 'lanes.{name}.{key}'")
    start = base.limits if base else LaneLimits()
    try:
        limits = apply_patch(Limits(0, False, {name: start}), {"lanes": {name: spec}})
    except LimitsError as exc:
        raise ConfigError(f"{path}: key '{exc.field}' {str(exc).split(': ', 1)[1]}") from exc
    return Lane(name, prefixes, limits.lanes[name], tokenize, max_body)
