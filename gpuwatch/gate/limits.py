"""The gate's limits: defaults, JSON shape, and whole-object validation of a PATCH.

Pure: no I/O. A PATCH is validated completely before anything changes, so a bad field never
leaves half a change applied.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

# The limits' types are the admin API's (adminapi.py); named here too for the gate's modules.
from gpuwatch.adminapi import ADMISSION_POLICIES as ADMISSION_POLICIES
from gpuwatch.adminapi import LANE_KEYS as LANE_KEYS
from gpuwatch.adminapi import MEDIA_CAPS as MEDIA_CAPS
from gpuwatch.adminapi import POLICIES as POLICIES
from gpuwatch.adminapi import REASONS as REASONS
from gpuwatch.adminapi import UPSTREAM_TIMEOUTS as UPSTREAM_TIMEOUTS
from gpuwatch.adminapi import LaneLimits as LaneLimits
from gpuwatch.adminapi import Limits as Limits
from gpuwatch.adminapi import LimitsPatch, LimitValue, TenantLimits
from gpuwatch.errors import EXIT_USAGE, GpuwatchError
from gpuwatch.fmt import clip
from gpuwatch.gate.classes import TENANT_ID
from gpuwatch.gate.tenants import MAX_TENANT_LIMITS


class LimitsError(GpuwatchError, ValueError, exit_code=EXIT_USAGE):
    """A refused change; ``field`` names what was wrong (``lanes.chat.max_inflight``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


# Upper bounds: far above any real node, low enough that arithmetic and display stay sane.
MAX_COUNT = 1_000_000
MAX_TOKENS = 100_000_000
MAX_TIMEOUT_S = 86_400.0


MiB = 1024 * 1024


@dataclass(frozen=True)
class Lane:
    """A lane's routing and body bound (config only) and its limits (changeable at run time).

    ``max_body``: the largest request body the lane accepts, in bytes. Bodies are held in
    memory while queued, so a lane holds at most (max_inflight + max_queue) x max_body.
    """

    name: str
    prefixes: tuple[str, ...]
    limits: LaneLimits
    tokenize: bool = False
    max_body: int = 4 * MiB


DEFAULT_LANES: tuple[Lane, ...] = (
    Lane("chat", ("/v1/chat/completions", "/v1/completions", "/v1/responses"), LaneLimits()),
    Lane("embed", ("/v1/embeddings", "/v1/rerank", "/v1/score"), LaneLimits(32, 128, 30.0)),
    Lane("image", ("/v1/images/",), LaneLimits(4, 16, 60.0), max_body=32 * MiB),
    Lane("default", (), LaneLimits(), max_body=8 * MiB),
)


def _shown(value: Any) -> str:
    """A client's value in an error message: bounded, whatever it is."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return "an integer of more than 60 digits"  # repr() itself refuses past 4300 digits
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _int(path: str, value: Any, minimum: int, maximum: int, nullable: bool = False) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an integer or null" if nullable else "an integer"
        raise LimitsError(path, f"must be {kind}, got {_shown(value)}")
    if value < minimum:
        raise LimitsError(path, f"must be >= {minimum}, got {_shown(value)}")
    if value > maximum:
        raise LimitsError(path, f"must be <= {maximum}, got {_shown(value)}")
    return value


def patch_tenants(current: Mapping[str, TenantLimits], patch: Any) -> dict[str, TenantLimits]:
    """``{"tenants": {ID: {"paused": true, "max_inflight": 2} | null}}``; null (or an entry
    back at the defaults) removes the tenant's entry."""
    if not isinstance(patch, dict):
        raise LimitsError("tenants", f"must be an object, got {_shown(patch)}")
    out = dict(current)
    for tenant, spec in patch.items():
        at = f"tenants.{clip(tenant, 80)}"
        if not TENANT_ID.fullmatch(tenant):
            raise LimitsError(at, "a tenant id is 1-64 of A-Z a-z 0-9 . _ : @ / + -")
        if spec is None:
            out.pop(tenant, None)
            continue
        if not isinstance(spec, dict):
            raise LimitsError(at, f"must be an object or null, got {_shown(spec)}")
        limits = out.get(tenant, TenantLimits())
        for key, value in spec.items():
            if key == "paused":
                limits = replace(limits, paused=_bool(f"{at}.paused", value))
            elif key == "max_inflight":
                limits = replace(
                    limits, max_inflight=_int(f"{at}.max_inflight", value, 0, MAX_COUNT, True)
                )
            else:
                raise LimitsError(f"{at}.{clip(key, 40)}", "unknown key")
        if limits == TenantLimits():
            out.pop(tenant, None)
        else:
            out[tenant] = limits
    if len(out) > MAX_TENANT_LIMITS:
        raise LimitsError("tenants", f"at most {MAX_TENANT_LIMITS} tenants have limits")
    return out


def _seconds(path: str, value: Any, allow_zero: bool) -> float | None:
    """A number of seconds or null, in (0, MAX_TIMEOUT_S] ([0, ...] with ``allow_zero``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LimitsError(path, f"must be a number or null, got {_shown(value)}")
    # Compared as numbers first: float() of a 5000-digit integer raises.
    low_ok = value >= 0 if allow_zero else value > 0
    if not (low_ok and value <= MAX_TIMEOUT_S) or not math.isfinite(value):
        low = ">= 0" if allow_zero else "> 0"
        raise LimitsError(path, f"must be {low} and <= {MAX_TIMEOUT_S:g}, got {_shown(value)}")
    return float(value)


def _bool(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise LimitsError(path, f"must be true or false, got {_shown(value)}")
    return value


def _lane_patch(path: str, current: LaneLimits, patch: Any) -> LaneLimits:
    if not isinstance(patch, dict):
        raise LimitsError(path, f"must be an object, got {_shown(patch)}")
    changes: dict[str, Any] = {}
    for key, value in patch.items():
        at = f"{path}.{key}"
        if key in ("max_inflight", "max_queue"):
            changes[key] = _int(at, value, 0, MAX_COUNT)
        elif key == "min_inflight":
            changes[key] = _int(at, value, 1, MAX_COUNT)
        elif key in (
            "max_prompt_tokens",
            "max_output_tokens",
            "max_inflight_tokens",
            "min_inflight_tokens",
            *MEDIA_CAPS,
        ):
            changes[key] = _int(at, value, 1, MAX_TOKENS, nullable=True)
        elif key == "target_ttft_p99_s":
            changes[key] = _seconds(at, value, allow_zero=False)
        elif key == "max_queue_wait_s":
            # 0 is a lane without a queue in time: a request starts at once or is refused.
            changes[key] = _seconds(at, value, allow_zero=True)
        elif key in UPSTREAM_TIMEOUTS:
            changes[key] = _seconds(at, value, allow_zero=False)
        elif key == "policy":
            if not isinstance(value, str) or value not in ADMISSION_POLICIES:
                raise LimitsError(
                    at, f"must be one of {', '.join(ADMISSION_POLICIES)}, got {_shown(value)}"
                )
            changes[key] = value
        elif key == "queue_timeout_s":
            if value is None:
                raise LimitsError(at, "must be a number, got None")
            changes[key] = _seconds(at, value, allow_zero=False)
        elif key in ("output_tokens_policy", "media_policy"):
            if not isinstance(value, str) or value not in POLICIES:
                raise LimitsError(at, f"must be one of {', '.join(POLICIES)}, got {_shown(value)}")
            changes[key] = value
        else:
            raise LimitsError(_field(at), "unknown key")
    return _check_adaptive(path, replace(current, **changes))


def _check_adaptive(path: str, lane: LaneLimits) -> LaneLimits:
    """An adaptive lane needs a target and bounds in order; a static lane's are not judged
    (they are kept for when adaptive is switched back on)."""
    if lane.policy != "adaptive":
        return lane
    if lane.target_ttft_p99_s is None:
        raise LimitsError(f"{path}.target_ttft_p99_s", "an adaptive lane needs a target")
    if lane.max_inflight < lane.min_inflight:
        raise LimitsError(
            f"{path}.max_inflight",
            f"must be >= min_inflight ({lane.min_inflight}) on an adaptive lane, "
            f"got {lane.max_inflight}",
        )
    low, high = lane.min_inflight_tokens, lane.max_inflight_tokens
    if low is not None and (high is None or high < low):
        raise LimitsError(
            f"{path}.max_inflight_tokens",
            f"must be set and >= min_inflight_tokens ({low}) on an adaptive lane, got {high}",
        )
    return lane


def apply_patch(current: Limits, patch: Any) -> Limits:
    """The limits after ``patch``, with ``version`` + 1; LimitsError names the first bad field."""
    if not isinstance(patch, dict):
        raise LimitsError("body", "must be a JSON object")
    paused = current.paused
    lanes = dict(current.lanes)
    tenants = current.tenants
    for key, value in patch.items():
        if key in ("version", "effective"):
            # A GET-modify-PATCH client may send them back: If-Match is the check, and the
            # effective limits are the controller's, never set by a PATCH.
            continue
        if key == "paused":
            paused = _bool("paused", value)
        elif key == "lanes":
            if not isinstance(value, dict):
                raise LimitsError("lanes", f"must be an object, got {_shown(value)}")
            for name, lane_patch in value.items():
                if name not in lanes:
                    raise LimitsError(_field(f"lanes.{name}"), "unknown lane")
                lanes[name] = _lane_patch(f"lanes.{name}", lanes[name], lane_patch)
        elif key == "tenants":
            tenants = patch_tenants(tenants, value)
        else:
            raise LimitsError(_field(key), "unknown key")
    return Limits(current.version + 1, paused, lanes, tenants)


def _field(name: str) -> str:
    """A field name from a client, as it appears in an error: printable and bounded."""
    return clip(name, 80)


def from_json(data: Any, lanes: Mapping[str, LaneLimits]) -> Limits:
    """Limits read back from a state file, checked with the same rules as a PATCH.

    Lanes the config no longer has are left out (``unknown_lanes`` names them for a log line).
    """
    if not isinstance(data, dict):
        raise LimitsError("limits", "must be an object")
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < 2**53:
        raise LimitsError("limits.version", f"must be an integer >= 0, got {_shown(version)}")
    saved = data.get("lanes", {})
    if not isinstance(saved, dict):
        raise LimitsError("limits.lanes", f"must be an object, got {_shown(saved)}")
    base = Limits(version - 1, False, dict(lanes))
    known = {k: v for k, v in saved.items() if k in lanes}
    patch = {
        "paused": data.get("paused", False),
        "lanes": copy.deepcopy(known),
        "tenants": copy.deepcopy(data.get("tenants", {})),
    }
    return apply_patch(base, patch)


def unknown_lanes(data: dict[str, Any], lanes: Mapping[str, LaneLimits]) -> list[str]:
    saved = data.get("lanes", {})
    return [k for k in saved if k not in lanes] if isinstance(saved, dict) else []


def changed(before: Limits, after: Limits) -> LimitsPatch:
    """Only what differs, in PATCH shape: what the audit trail records as the change."""
    lanes: dict[str, dict[str, LimitValue]] = {}
    for name, lane in after.lanes.items():
        old = before.lanes[name]
        diff = {k: lane.value(k) for k in LANE_KEYS if old.value(k) != lane.value(k)}
        if diff:
            lanes[name] = diff
    tenants: dict[str, dict[str, LimitValue] | None] = {}
    for tenant in sorted(set(before.tenants) | set(after.tenants)):
        was, now = before.tenants.get(tenant), after.tenants.get(tenant)
        if was != now:
            tenants[tenant] = None if now is None else now.changes()
    paused = after.paused if before.paused != after.paused else None
    return LimitsPatch(paused, lanes, tenants)
