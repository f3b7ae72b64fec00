"""TOML configuration: XDG path, a typed schema, precedence CLI > file > defaults."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from gpuwatch.httpclient import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_TIMEOUT_S

# key -> (accepted types, default[, list item type]). Sections are nested dicts of the same shape.
SCHEMA: dict[str, Any] = {
    "metrics": ((list,), [], str),
    "interval_s": ((int, float), 1.0),
    "no_gpu": ((bool,), False),
    "admin": ((str,), ""),
    "theme": ((str,), "gpuwatch-dark"),
    "read_only": ((bool,), False),
    "scrape": {
        "connect_timeout_s": ((int, float), DEFAULT_CONNECT_TIMEOUT_S),
        "timeout_s": ((int, float), DEFAULT_TIMEOUT_S),
        "max_bytes": ((int,), 16 * 1024 * 1024),
        # Engines (model label values) shown per source; more is a warning, like sample_limit.
        "max_engines": ((int,), 256),
    },
    # The boring zone (see gpuwatch/alerts.py); 0 switches a signal off.
    "slo": {
        "ttft_p99_s": ((int, float), 2.0),
        "itl_p99_s": ((int, float), 0.0),
        "kv_usage_high": ((int, float), 0.95),
        "waiting_high": ((int, float), 0.0),
        "preemptions_per_min": ((int, float), 1.0),
    },
}

_TYPE_NAMES = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    str: "a string",
}


class ConfigError(Exception):
    """One line naming the file and the key."""


def default_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuwatch" / "config.toml"


def defaults(schema: Mapping[str, Any] = SCHEMA) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, spec in schema.items():
        out[key] = defaults(spec) if isinstance(spec, dict) else _copy(spec[1])
    return out


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def _check(data: Mapping[str, Any], schema: Mapping[str, Any], path: Path, prefix: str) -> None:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in schema:
            raise ConfigError(f"{path}: unknown key '{dotted}'")
        spec = schema[key]
        if isinstance(spec, dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: '{dotted}' must be a table ([{dotted}])")
            _check(value, spec, path, f"{dotted}.")
            continue
        types = spec[0]
        # bool is an int in Python; a number key must not accept `true`.
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            want = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
            raise ConfigError(f"{path}: key '{dotted}' must be {want}, got {value!r}")
        if isinstance(value, list) and len(spec) > 2:
            for item in value:
                if not isinstance(item, spec[2]):
                    raise ConfigError(
                        f"{path}: key '{dotted}' must be a list of {spec[2].__name__}, got {item!r}"
                    )


def load(path: Path | None = None) -> dict[str, Any]:
    """Defaults overlaid with the file at ``path`` (or the XDG default, if it exists)."""
    explicit = path is not None
    path = path or default_path()
    settings = defaults()
    if not path.exists():
        if explicit:
            raise ConfigError(f"{path}: no such file")
        return settings
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    _check(data, SCHEMA, path, "")
    _merge(settings, data)
    return settings


def _merge(into: dict[str, Any], data: Mapping[str, Any]) -> None:
    for key, value in data.items():
        if isinstance(value, dict):
            _merge(into[key], value)
        else:
            into[key] = value


def apply_cli(settings: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Overlay dotted CLI values that were given (None means "not on the command line")."""
    for dotted, value in overrides.items():
        if value is None:
            continue
        node = settings
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return settings
