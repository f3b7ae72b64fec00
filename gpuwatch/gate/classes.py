"""Who a request is: its tenant and its class, from headers the operator mapped. Pure: no I/O.

The headers are the llm-d router's: ``x-llm-d-inference-objective`` names an objective,
``x-llm-d-inference-fairness-id`` a tenant. Their older names (the Gateway API Inference
Extension's ``x-gateway-inference-objective`` and ``x-gateway-inference-fairness-id``) are read
as deprecated aliases: a request has one value of each, the new name's when it sends both.
With ``api_keys = true`` the bearer key of ``Authorization`` identifies the tenant instead, by
its hash: a key holder cannot pass for another tenant by sending another fairness id, and the
raw key is never kept, shown or counted anywhere.

A class is only ever one the operator mapped: an objective (or key hash) the config does not
name gets ``default_class``. A client cannot promote itself by sending ``critical``.

```toml
[fairness]
default_class = "standard"
api_keys = false                   # true: tenant = "key:" + sha256(bearer key)[:16]
[fairness.classes]                 # name = priority: higher is served first; below 0 sheddable
critical = 10
standard = 0
sheddable = -10
[fairness.objectives]              # x-llm-d-inference-objective value -> class
interactive = "critical"
batch = "sheddable"
[fairness.keys]                    # "key:<hash>" -> class (with api_keys)
"key:9f86d081884c7d65" = "critical"
[fairness.names]                   # tenant id -> the name shown on screen
"key:9f86d081884c7d65" = "search"
```
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gpuwatch.config import ConfigError

OBJECTIVE_HEADER = "x-llm-d-inference-objective"
FAIRNESS_HEADER = "x-llm-d-inference-fairness-id"
# Each header under its current name first, then the deprecated ones llm-d still reads.
OBJECTIVE_HEADERS = (OBJECTIVE_HEADER, "x-gateway-inference-objective")
FAIRNESS_HEADERS = (FAIRNESS_HEADER, "x-gateway-inference-fairness-id")
DEFAULT_CLASSES: Mapping[str, int] = {"critical": 10, "standard": 0, "sheddable": -10}
# A fairness id is shown on terminals and used as a key in the limits: one that is not a
# short plain token is replaced by its hash, so hostile ids can neither smuggle control
# characters nor grow the tables with megabyte-long keys.
TENANT_ID = re.compile(r"[A-Za-z0-9._:@/+-]{1,64}")
ANONYMOUS = "-"
_RESERVED = ("key:", "id:")  # the prefixes of hashed tenant ids
_MAX_CLASSES = 16  # classes are metric labels: their number stays small


def header_value(headers: Mapping[str, str], names: tuple[str, ...]) -> str:
    """One value of a header that goes by several ``names``: the first name's the request
    carries (not blank), so a client sending both spellings cannot have each read by a
    different reader; a name sent twice counts by its first value. Empty when none."""
    for name in names:
        value = headers.get(name, "").strip()
        if value:
            return value
    return ""


def hashed(prefix: str, value: str) -> str:
    digest = hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()
    return f"{prefix}:{digest[:16]}"


def key_hash(key: str) -> str:
    """The tenant id of an API key: ``key:`` + the first 16 hex digits of its SHA-256
    (``printf %s "$KEY" | sha256sum | cut -c1-16``)."""
    return hashed("key", key)


@dataclass(frozen=True)
class Who:
    """A request's tenant (an id safe to show and to key on) and class."""

    tenant: str = ANONYMOUS
    klass: str = "standard"
    priority: int = 0

    @property
    def sheddable(self) -> bool:
        # As in the Inference Extension: a negative priority may be dropped under load.
        return self.priority < 0


@dataclass(frozen=True)
class Fairness:
    classes: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_CLASSES))
    default_class: str = "standard"
    api_keys: bool = False
    objectives: Mapping[str, str] = field(default_factory=dict)
    keys: Mapping[str, str] = field(default_factory=dict)
    names: Mapping[str, str] = field(default_factory=dict)

    def who(self, headers: Mapping[str, str]) -> Who:
        tenant = ANONYMOUS
        klass: str | None = None
        if self.api_keys:
            scheme, _, key = headers.get("Authorization", "").partition(" ")
            if scheme.lower() == "bearer" and key.strip():
                tenant = key_hash(key.strip())
                klass = self.keys.get(tenant)
        if tenant == ANONYMOUS:
            given = header_value(headers, FAIRNESS_HEADERS)
            if given:
                # A header cannot name a key's tenant: "key:..." (and "id:...") are hashed too.
                plain = TENANT_ID.fullmatch(given) and not given.startswith(_RESERVED)
                tenant = given if plain else hashed("id", given)
        if klass is None:
            klass = self.objectives.get(header_value(headers, OBJECTIVE_HEADERS))
        if klass is None:
            klass = self.default_class
        return Who(tenant, klass, self.classes[klass])

    def shown(self, tenant: str) -> str:
        """The name a tenant goes by on screen: its configured name, else its id (already a
        hash for keys and for ids that are not plain tokens)."""
        return self.names.get(tenant, tenant)

    def by_priority(self) -> list[str]:
        return sorted(self.classes, key=lambda k: -self.classes[k])


def _table(path: Path, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: '{key}' must be a table")
    return value


def parse_fairness(path: Path, data: Any) -> Fairness:
    """``[fairness]`` of the gate's config; ConfigError naming the key."""
    data = dict(_table(path, "fairness", data))
    classes = dict(DEFAULT_CLASSES)
    if "classes" in data:
        classes = {}
        for name, priority in _table(path, "fairness.classes", data.pop("classes")).items():
            at = f"fairness.classes.{name}"
            if not TENANT_ID.fullmatch(name) or len(name) > 32:
                raise ConfigError(f"{path}: key '{at}': a class name is a short plain word")
            if isinstance(priority, bool) or not isinstance(priority, int):
                raise ConfigError(f"{path}: key '{at}' must be an integer priority")
            if not -1000 <= priority <= 1000:
                raise ConfigError(f"{path}: key '{at}' must be in [-1000, 1000]")
            classes[name] = priority
        if not classes or len(classes) > _MAX_CLASSES:
            raise ConfigError(f"{path}: 'fairness.classes' needs 1 to {_MAX_CLASSES} classes")
    default = data.pop("default_class", "standard" if "standard" in classes else None)
    if default not in classes:
        raise ConfigError(f"{path}: key 'fairness.default_class' must name one of the classes")
    api_keys = data.pop("api_keys", False)
    if not isinstance(api_keys, bool):
        raise ConfigError(f"{path}: key 'fairness.api_keys' must be true or false")
    maps: dict[str, dict[str, str]] = {}
    for table in ("objectives", "keys", "names"):
        entries = _table(path, f"fairness.{table}", data.pop(table, {}))
        for name, value in entries.items():
            at = f"fairness.{table}.{name}"
            if not isinstance(value, str):
                raise ConfigError(f"{path}: key '{at}' must be a string")
            if table != "names" and value not in classes:
                raise ConfigError(f"{path}: key '{at}' names no class ({', '.join(classes)})")
            if table == "names" and not TENANT_ID.fullmatch(value):
                raise ConfigError(f"{path}: key '{at}': a name is a short plain word")
        maps[table] = dict(entries)
    for key in data:
        raise ConfigError(f"{path}: unknown key 'fairness.{key}'")
    return Fairness(classes, default, api_keys, maps["objectives"], maps["keys"], maps["names"])


K = TypeVar("K")


def count_down(counter: Counter[K], key: K) -> None:
    """One less of ``key``; a key at zero is dropped, so per-tenant and per-class counters hold
    only what is live (their size stays bounded by the requests in the gate)."""
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]
