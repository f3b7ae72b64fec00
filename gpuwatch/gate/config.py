"""The gate's TOML config: lanes (path prefixes + limits) and extra routed paths.

```toml
extra_paths = ["/tokenize", "/health"]     # proxied to the "default" lane; others are 404
[lanes.chat]
prefixes = ["/v1/chat/completions", "/v1/completions", "/v1/responses"]
max_inflight = 8
max_output_tokens = 1024
tokenize = false                            # true: count prompts with the upstream /tokenize
[lanes.batch]                               # a new lane needs its prefixes
prefixes = ["/v1/batch"]
```
Limits given here are the starting point; limits persisted in the state file win over them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from gpuwatch.config import ConfigError
from gpuwatch.gate.limits import (
    DEFAULT_LANES,
    LANE_KEYS,
    Lane,
    LaneLimits,
    Limits,
    LimitsError,
    apply_patch,
)


@dataclass(frozen=True)
class GateConfig:
    lanes: tuple[Lane, ...]
    extra_paths: tuple[str, ...] = ()


def _strings(path: Path, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: key '{key}' must be a list of strings")
    return tuple(value)


def load_gate_config(path: Path | None) -> GateConfig:
    if path is None:
        return GateConfig(DEFAULT_LANES)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    lanes = {lane.name: lane for lane in DEFAULT_LANES}
    extra: tuple[str, ...] = ()
    for key, value in data.items():
        if key == "extra_paths":
            extra = _strings(path, key, value)
        elif key == "lanes":
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: 'lanes' must be a table ([lanes.NAME])")
            for name, spec in value.items():
                lanes[name] = _lane(path, name, spec, lanes.get(name))
        else:
            raise ConfigError(f"{path}: unknown key '{key}'")
    return GateConfig(tuple(lanes.values()), extra)


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
    return Lane(name, prefixes, limits.lanes[name], tokenize)
