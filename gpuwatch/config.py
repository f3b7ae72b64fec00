"""TOML configuration: XDG path, typed settings, precedence CLI > file > defaults.

The settings are dataclasses and each default is written once, on its field (the scrape bounds
in ``bounds``, which the scraper reads too). The file is read by ``tomlfile`` and checked
against the fields' types: an unknown key or a wrong type is one line naming the file and the
key.
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gpuwatch.bounds import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ENGINES,
    DEFAULT_TIMEOUT_S,
)
from gpuwatch.errors import ConfigError as ConfigError  # re-exported: what callers catch
from gpuwatch.stall import DEFAULT_STALL_AFTER_S
from gpuwatch.tomlfile import read_toml

DEFAULT_THEME = "gpuwatch-dark"


@dataclass
class Slo:
    """The boring zone's thresholds, the ``[slo]`` table of the config; 0 switches one off."""

    ttft_p99_s: float = field(default=2.0, metadata={"min": 0.0})
    itl_p99_s: float = field(default=0.0, metadata={"min": 0.0})
    kv_usage_high: float = field(default=0.95, metadata={"min": 0.0, "max": 1.0})
    waiting_high: float = field(default=0.0, metadata={"min": 0.0})
    preemptions_per_min: float = field(default=1.0, metadata={"min": 0.0})
    # With a gate: the share of arriving requests that must be served within every bound
    # (refused, failed and slow ones are misses), over the last minute.
    goodput_min: float = field(default=0.99, metadata={"min": 0.0, "max": 1.0})
    # An engine with requests whose progress counters have not moved for longer than this is
    # STALLED (gpuwatch/stall.py): alive, answering, stuck.
    stall_after_s: float = field(default=DEFAULT_STALL_AFTER_S, metadata={"min": 0.0})

    def thresholds(self) -> dict[str, float | None]:
        """Signal key -> threshold, None where switched off (what ``judge`` takes)."""
        return {key: (value or None) for key, value in asdict(self).items()}


def positive(default: Any) -> Any:
    """A field whose value must be above 0 (checked when the file is read)."""
    return field(default=default, metadata={"positive": True})


def value_problem(f: dataclasses.Field[Any], value: Any) -> str | None:
    """Why ``value`` does not fit field ``f``'s bounds (finite; above 0; within min / max; one
    of its choices)."""
    choices = f.metadata.get("choices")
    if choices is not None and value not in choices:
        return f"must be one of {', '.join(choices)}, got {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if f.metadata.get("positive") and not value > 0:
        return f"must be above 0, got {value!r}"
    low, high = f.metadata.get("min"), f.metadata.get("max")
    if low is not None and value < low:
        return f"must be at least {low:g}, got {value!r}"
    if high is not None and value > high:
        return f"must be at most {high:g} (a share: 0.99 is 99%), got {value!r}"
    return None


def slo_value(key: str, value: float) -> float:
    """An SLO threshold from the command line, checked like the file's; ValueError."""
    f = next((f for f in dataclasses.fields(Slo) if f.name == key), None)
    if f is None:
        raise ValueError(f"{key}: not an SLO key")
    problem = value_problem(f, value)
    if problem:
        raise ValueError(f"--slo {key} {problem}")
    return value


@dataclass
class ScrapeSettings:
    connect_timeout_s: float = positive(DEFAULT_CONNECT_TIMEOUT_S)
    timeout_s: float = positive(DEFAULT_TIMEOUT_S)  # the whole request, body included
    max_bytes: int = positive(DEFAULT_MAX_BYTES)
    # Engines (model label values) shown per source; more is a warning, like sample_limit.
    max_engines: int = positive(DEFAULT_MAX_ENGINES)


@dataclass
class PrometheusSettings:
    """``[prometheus]``: the fleet's Prometheus (or anything answering its HTTP API: Thanos).

    Secrets come from files (or $GPUWATCH_PROMETHEUS_TOKEN / $GPUWATCH_PROMETHEUS_PASSWORD),
    never from the command line or this file itself.
    """

    url: str = ""
    token_file: str = ""  # a bearer token
    basic_user: str = ""  # basic auth: the user here, the password in password_file
    password_file: str = ""
    # The target label naming a node (relabel it in Prometheus); else the instance's host.
    node_label: str = "node"


@dataclass
class GateTarget:
    """``[gates."instance-glob"]``: how to reach the admin API of the gates that match."""

    admin: str = ""  # "http://{instance}" uses the scraped instance itself
    token_file: str = ""


KNOB_STACKS = ("ray", "dynamo", "litellm", "sglang", "vllm")


@dataclass
class KnobConfig:
    """``[[knobs]]``: a serving stack's own admin API, whose admission knobs gpuwatch reads and
    changes (gpuwatch/control/knobs/). The credential comes from a file, never from argv."""

    stack: str = field(default="", metadata={"choices": KNOB_STACKS, "required": True})
    url: str = field(default="", metadata={"required": True})  # e.g. http://127.0.0.1:8265
    credential_file: str = ""  # a bearer token (LiteLLM's master key)
    engine: str = ""  # the engine's metrics URL it steers (shown beside it), if any
    timeout_s: float = positive(3.0)


@dataclass
class AlertSettings:
    """``[alerts]``: the SLO's burn-rate alerts (gpuwatch/alerts/) and who hears of them."""

    # The error budget's period. The workbook's windows (1h & 5m, 6h & 30m, 3d & 6h) are for
    # 30 days and scale with it: a test runs them in seconds with a period of minutes.
    slo_period_days: float = positive(30.0)
    bell: bool = False  # ring the terminal's bell when a page-level (critical) alert fires
    webhooks: list[str] = field(default_factory=list)  # Alertmanager v4 payloads POSTed here
    runbook_url: str = ""  # each alert's runbook_url is this with "#alertname" added
    group_by: list[str] = field(default_factory=lambda: ["job", "instance"])  # rules' "by"
    target_selector: str = ""  # the targets LLMTargetDown watches, e.g. 'job=~"vllm|gate"'


@dataclass
class Settings:
    metrics: list[str] = field(default_factory=list)  # used when --metrics is not given
    interval_s: float = positive(1.0)
    no_gpu: bool = False
    admin: str = ""  # a gpuwatch gate, for the admission panel
    theme: str = DEFAULT_THEME
    read_only: bool = False
    # For a weak SSH link: charts every 10 s, no animation (``--slow-link``).
    slow_link: bool = False
    scrape: ScrapeSettings = field(default_factory=ScrapeSettings)
    slo: Slo = field(default_factory=Slo)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    gates: dict[str, GateTarget] = field(default_factory=dict)
    knobs: list[KnobConfig] = field(default_factory=list)
    # The local audit of knob changes (default $XDG_STATE_HOME/gpuwatch/knobs-audit.jsonl).
    knob_audit: str = ""


def default_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuwatch" / "config.toml"


def load(path: Path | None = None) -> Settings:
    """Defaults overlaid with the file at ``path`` (or the XDG default, if it exists)."""
    explicit = path is not None
    path = path or default_path()
    if not path.exists():
        if explicit:
            raise ConfigError(f"{path}: no such file")
        return Settings()
    return _build(Settings, read_toml(path), path, "")


T = TypeVar("T")


def _build(cls: type[T], data: Mapping[str, Any], path: Path, prefix: str) -> T:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in fields:
            raise ConfigError(f"{path}: unknown key '{dotted}'")
        hint = hints[key]
        if typing.get_origin(hint) is dict:
            values[key] = _table_of(hint, value, path, dotted)
        elif _is_list_of_tables(hint):
            values[key] = _tables_of(hint, value, path, dotted)
        elif dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: '{dotted}' must be a table ([{dotted}])")
            values[key] = _build(hint, value, path, f"{dotted}.")  # type: ignore[arg-type]
        else:
            values[key] = _checked(hint, value, path, dotted)
            problem = value_problem(fields[key], values[key])
            if problem:
                raise ConfigError(f"{path}: key '{dotted}' {problem}")
    for name, f in fields.items():
        if f.metadata.get("required") and not values.get(name):
            raise ConfigError(f"{path}: key '{prefix}{name}' is required")
    return cls(**values)


def _is_list_of_tables(hint: Any) -> bool:
    return typing.get_origin(hint) is list and dataclasses.is_dataclass(typing.get_args(hint)[0])


def _tables_of(hint: Any, value: Any, path: Path, dotted: str) -> list[Any]:
    """An array of tables (``[[knobs]]``), each checked as its type; ``knobs#2.url`` names
    one key of the second (counted from 1, as they are read in the file)."""
    (item_type,) = typing.get_args(hint)
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(f"{path}: '{dotted}' must be an array of tables ([[{dotted}]])")
    return [_build(item_type, t, path, f"{dotted}#{i}.") for i, t in enumerate(value, 1)]


def _table_of(hint: Any, value: Any, path: Path, dotted: str) -> dict[str, Any]:
    """A table of tables keyed by any string (``[gates."10.0.*"]``), each checked as a type."""
    _, item_type = typing.get_args(hint)
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: '{dotted}' must be a table ([{dotted}.\"name\"])")
    out = {}
    for name, table in value.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: '{dotted}.{name}' must be a table")
        out[name] = _build(item_type, table, path, f'{dotted}."{name}".')
    return out


_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _checked(hint: Any, value: Any, path: Path, dotted: str) -> Any:
    if typing.get_origin(hint) is list:
        (item_type,) = typing.get_args(hint)
        if not isinstance(value, list) or not all(_is(item_type, v) for v in value):
            raise ConfigError(f"{path}: key '{dotted}' must be a list of {item_type.__name__}")
        return list(value)
    if not _is(hint, value):
        raise ConfigError(f"{path}: key '{dotted}' must be {_NAMES[hint]}, got {value!r}")
    return float(value) if hint is float else value


def _is(hint: Any, value: Any) -> bool:
    # bool is an int in Python, and a number key must not accept `true`; an int is a float.
    if isinstance(value, bool):
        return hint is bool
    if hint is float:
        return isinstance(value, (int, float))
    return isinstance(value, hint)


def apply_cli(settings: Settings, overrides: Mapping[str, Any]) -> Settings:
    """Overlay dotted CLI values that were given (None means "not on the command line")."""
    for dotted, value in overrides.items():
        if value is None:
            continue
        node: Any = settings
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = getattr(node, part)
        if not hasattr(node, leaf):
            raise KeyError(dotted)  # a bug in a caller, not user input
        setattr(node, leaf, value)
    return settings
