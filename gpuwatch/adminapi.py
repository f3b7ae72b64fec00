"""The gate's admin API as types: limits, a PATCH, lane status, refusal reasons, an audit
entry and the 409 body. Shared by the gate (which writes them) and by every reader (the control
client, monitor, TUI, watch, plan, recordings).

JSON exists only at the edges: ``to_json`` where the gate answers (and where a recording or the
audit log stores a value), ``from_json`` where an answer is read. Between them the code uses
these types. ``from_json`` is for what another process sent: anything that is not the API's
shape is one ``AdminApiError`` naming where (``status.lanes.chat.queued: must be an integer``),
never a KeyError or TypeError deep in a reader. It is lenient about what is missing (an older
gate lacks newer keys: they take their defaults) and ignores keys it does not know (a newer
gate's), so old recordings still replay. The gate's own, strict checks of a PATCH (ranges,
unknown keys, field paths for a 400) stay in ``gate/limits.py``.

A shared plain module (the bottom layers): of gpuwatch it imports only ``errors``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from typing import Any, ClassVar, TypeAlias, TypeVar, cast

from gpuwatch.errors import GpuwatchError

Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"
JsonObject: TypeAlias = "dict[str, Json]"
# One limit's value in a PATCH or a lane's limits.
LimitValue: TypeAlias = "int | float | str | None"

POLICIES = ("clamp", "reject")
# Admission policy of a lane: "static" (the limits as set) or "adaptive" (gate/adaptive.py
# moves the effective limits between the lane's bounds to hold target_ttft_p99_s).
ADMISSION_POLICIES = ("static", "adaptive")
MEDIA_CAPS = ("max_pixels", "max_steps", "max_n", "max_inputs", "max_input_tokens")
UPSTREAM_TIMEOUTS = ("upstream_first_byte_timeout_s", "upstream_idle_timeout_s")
# Why the gate refused a request: the ``code`` of its error, the keys of ``rejected_total``.
REASONS = (
    "queue_full",
    "queue_timeout",
    # The lane's queue-wait budget (deadline.py): refused at once, or shed before starting.
    "queue_deadline",
    "paused",
    "prompt_too_long",
    "max_tokens",
    "over_token_budget",
    # Image and embedding caps (mediacaps.py), one reason per cap: the code names the limit.
    *MEDIA_CAPS,
    # Classes and tenants (fairqueue.py, tenants.py).
    "evicted",
    "tenant_paused",
    # The upstream is stalled (stallwatch.py): shed until it makes progress again.
    "upstream_stalled",
)


class AdminApiError(GpuwatchError, ValueError):
    """A document that is not the admin API's; the message says where and what."""


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


class _Doc:
    """A JSON object being read, with where it is (for the error): a missing key takes the
    default, a key of the wrong type is an AdminApiError."""

    def __init__(self, data: object, at: str) -> None:
        if not isinstance(data, dict):
            raise AdminApiError(f"{at}: must be an object, got {_kind(data)}")
        self.data: Mapping[str, object] = data
        self.at = at

    def _fail(self, key: str, want: str, value: object) -> AdminApiError:
        return AdminApiError(f"{self.at}.{key[:60]}: must be {want}, got {_kind(value)}")

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str) -> object:
        return self.data.get(key)

    def integer(self, key: str, default: int = 0) -> int:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(key, "an integer", value)
        return value

    def opt_integer(self, key: str) -> int | None:
        value = self.data.get(key)
        return None if value is None else self.integer(key)

    def number(self, key: str, default: float = 0.0) -> float:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._fail(key, "a number", value)
        return value

    def opt_number(self, key: str) -> float | None:
        value = self.data.get(key)
        return None if value is None else self.number(key)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def text(self, key: str, default: str = "") -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            raise self._fail(key, "a string", value)
        return value

    def opt_text(self, key: str) -> str | None:
        value = self.data.get(key)
        return None if value is None else self.text(key)

    def doc(self, key: str) -> _Doc:
        return _Doc(self.data.get(key, {}), f"{self.at}.{key}")

    def opt_doc(self, key: str) -> _Doc | None:
        value = self.data.get(key)
        return None if value is None else _Doc(value, f"{self.at}.{key}")

    def docs(self, key: str) -> dict[str, _Doc]:
        """An object of objects (lanes by name, windows by label)."""
        d = self.doc(key)
        return {name: _Doc(v, f"{d.at}.{name[:60]}") for name, v in d.data.items()}

    def counts(self, key: str) -> dict[str, int]:
        """An object of integers (refusals by reason)."""
        d = self.doc(key)
        return {name: d.integer(name) for name in d.data}

    def array(self, key: str) -> list[object]:
        value = self.data.get(key, [])
        if not isinstance(value, list):
            raise self._fail(key, "an array", value)
        return value

    def carried(self, key: str) -> Json:
        """A value carried as it is: it was JSON, so it is JSON."""
        return cast("Json", self.data.get(key))


def _items(d: _Doc, key: str) -> list[_Doc]:
    return [_Doc(v, f"{d.at}.{key}[{n}]") for n, v in enumerate(d.array(key))]


# How a field of each plain type is read (the annotation as written: ``int | None``).
_READ: dict[str, Callable[[_Doc, str], LimitValue | bool]] = {
    "int": _Doc.integer,
    "int | None": _Doc.opt_integer,
    "float": _Doc.number,
    "float | None": _Doc.opt_number,
    "str": _Doc.text,
    "str | None": _Doc.opt_text,
    "bool": _Doc.flag,
}
F = TypeVar("F", bound="_Flat")


class _Flat:
    """A dataclass of plain values (numbers, strings, booleans, null), one JSON key a field,
    in field order: read and written by its fields' types, so each such class is its fields
    and nothing else. A key that is missing takes the field's default (an older gate's)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    # Fields whose JSON key differs (a Python keyword): field -> key.
    _WIRE: ClassVar[Mapping[str, str]] = {}

    def to_json(self) -> JsonObject:
        return {self._WIRE.get(f.name, f.name): getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls: type[F], data: object, at: str = "value") -> F:
        d = _Doc(data, at)
        given = d.data
        values = {}
        for name, key, required, read, plain in _plan(cls):
            if key in given:
                value = given[key]
                # A value JSON gave of the field's own type is what its reader would return.
                values[name] = value if type(value) in plain else read(d, key)
            elif required:
                values[name] = read(d, key)
        return cls(**values)


_Reader: TypeAlias = "Callable[[_Doc, str], LimitValue | bool]"
_Step: TypeAlias = "tuple[str, str, bool, _Reader, tuple[type, ...]]"
# The types a field's reader passes through unchanged, by annotation (never bool for a number).
_PLAIN: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "int | None": (int, type(None)),
    "float": (float, int),
    "float | None": (float, int, type(None)),
    "str": (str,),
    "str | None": (str, type(None)),
    "bool": (bool,),
}
# Each _Flat class's fields as (name, JSON key, required, reader, plain types), worked out
# once: reading them from ``dataclasses.fields`` on every call was a third of reading the
# gate's status.
_PLANS: dict[type, tuple[_Step, ...]] = {}


def _plan(cls: type[_Flat]) -> tuple[_Step, ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = tuple(
            (
                f.name,
                cls._WIRE.get(f.name, f.name),
                f.default is MISSING and f.default_factory is MISSING,
                _READ[str(f.type)],
                _PLAIN[str(f.type)],
            )
            for f in fields(cls)
        )
    return plan


# -- limits ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TenantLimits(_Flat):
    paused: bool = False
    max_inflight: int | None = None

    def changes(self) -> dict[str, LimitValue]:
        """All of them as a tenant's part of a PATCH."""
        return {"paused": self.paused, "max_inflight": self.max_inflight}

    def with_values(self, changes: Mapping[str, LimitValue]) -> TenantLimits:
        """These limits with a PATCH's ``changes`` (values as sent: shown, not judged)."""
        known: dict[str, Any] = {
            k: v for k, v in changes.items() if k in ("paused", "max_inflight")
        }
        return replace(self, **known)


@dataclass(frozen=True)
class LaneLimits(_Flat):
    max_inflight: int = 16
    max_queue: int = 64
    queue_timeout_s: float = 30.0
    # The longest a request may wait for a slot before it is refused (deadline.py); None:
    # derived from the lane's TTFT target (or the gate's SLO) less its recent prefill time.
    max_queue_wait_s: float | None = None
    # A silent upstream (watchdog.py): no byte of its answer within the first of sending, or
    # no chunk within the second of the last, and the request ends (504, or mid-stream the
    # client's connection is cut) and the upstream connection is closed. None: no limit.
    upstream_first_byte_timeout_s: float | None = 300.0
    upstream_idle_timeout_s: float | None = 60.0
    max_prompt_tokens: int | None = None
    max_output_tokens: int | None = None
    output_tokens_policy: str = "clamp"
    # Token budget: the sum of (prompt + output bound) over the lane's requests in flight.
    max_inflight_tokens: int | None = None
    # Adaptive admission: with policy "adaptive", max_inflight / max_inflight_tokens are the
    # upper bounds and min_inflight / min_inflight_tokens the lower ones of the effective limit.
    policy: str = "static"
    target_ttft_p99_s: float | None = None
    min_inflight: int = 1
    min_inflight_tokens: int | None = None
    # Image and embedding caps (mediacaps.py), None for none; ``media_policy`` is clamp or
    # reject for all of them, as output_tokens_policy is for the output cap.
    max_pixels: int | None = None
    max_steps: int | None = None
    max_n: int | None = None
    max_inputs: int | None = None
    max_input_tokens: int | None = None
    media_policy: str = "clamp"

    def value(self, key: str) -> LimitValue:
        """One limit by its name (None for a name it does not have)."""
        found: LimitValue = getattr(self, key, None) if key in LANE_KEYS else None
        return found

    def with_values(self, changes: Mapping[str, LimitValue]) -> LaneLimits:
        """These limits with ``changes`` (by name; names it does not have are left out).
        Values are the caller's: the gate checks them when they are sent."""
        known: dict[str, Any] = {k: v for k, v in changes.items() if k in LANE_KEYS}
        return replace(self, **known)


LANE_KEYS = tuple(f.name for f in fields(LaneLimits))


@dataclass(frozen=True)
class EffectiveLimits(_Flat):
    """A lane's limits in force (the adaptive controller's on an adaptive lane)."""

    max_inflight: int
    max_inflight_tokens: int | None = None


@dataclass(frozen=True)
class Limits:
    """``GET /admin/limits``: the configured limits (what a PATCH changes, versioned) and,
    apart, ``effective`` (the limits in force; None where the gate did not say)."""

    version: int
    paused: bool
    lanes: Mapping[str, LaneLimits] = field(default_factory=dict)
    # Per-tenant limits (gate/tenants.py), by tenant id; only tenants that have some.
    tenants: Mapping[str, TenantLimits] = field(default_factory=dict)
    effective: Mapping[str, EffectiveLimits] | None = None

    def configured(self) -> Limits:
        """These limits without the effective ones (what the gate persists and audits)."""
        return replace(self, effective=None)

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "version": self.version,
            "paused": self.paused,
            "lanes": {name: lane.to_json() for name, lane in self.lanes.items()},
            "tenants": {tenant: t.to_json() for tenant, t in self.tenants.items()},
        }
        if self.effective is not None:
            out["effective"] = {name: e.to_json() for name, e in self.effective.items()}
        return out

    @classmethod
    def from_json(cls, data: object, at: str = "limits") -> Limits:
        d = _Doc(data, at)
        if not d.has("version"):
            raise AdminApiError(f"{at}: no version")
        effective = None
        if d.raw("effective") is not None:
            effective = {
                n: EffectiveLimits.from_json(e.data, e.at) for n, e in d.docs("effective").items()
            }
        return cls(
            d.integer("version"),
            d.flag("paused"),
            {
                name: LaneLimits.from_json(lane.data, lane.at)
                for name, lane in d.docs("lanes").items()
            },
            {t: TenantLimits.from_json(v.data, v.at) for t, v in d.docs("tenants").items()},
            effective,
        )


@dataclass(frozen=True)
class LimitsPatch:
    """A change of limits, in the PATCH's shape: only what is set is sent. ``lanes``: the
    limits to set, by lane; ``tenants``: the limits to set of a tenant (the others are kept),
    or None to remove its entry. Values are the sender's: the gate judges them."""

    paused: bool | None = None
    lanes: Mapping[str, Mapping[str, LimitValue]] = field(default_factory=dict)
    tenants: Mapping[str, Mapping[str, LimitValue] | None] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.paused is not None or bool(self.lanes) or bool(self.tenants)

    def to_json(self) -> JsonObject:
        out: JsonObject = {}
        if self.paused is not None:
            out["paused"] = self.paused
        if self.lanes:
            out["lanes"] = {name: dict(changes) for name, changes in self.lanes.items()}
        if self.tenants:
            out["tenants"] = {
                t: None if changes is None else dict(changes) for t, changes in self.tenants.items()
            }
        return out

    @classmethod
    def from_json(cls, data: object, at: str = "change") -> LimitsPatch:
        d = _Doc(data, at)
        lanes = {name: _limit_values(lane) for name, lane in d.docs("lanes").items()}
        tenants = {
            t: None if v is None else _limit_values(_Doc(v, f"{at}.tenants.{t[:60]}"))
            for t, v in d.doc("tenants").data.items()
        }
        paused = d.flag("paused") if d.raw("paused") is not None else None
        return cls(paused, lanes, tenants)


def _limit_values(d: _Doc) -> dict[str, LimitValue]:
    out: dict[str, LimitValue] = {}
    for key, value in d.data.items():
        if value is not None and not isinstance(value, (int, float, str)):
            raise AdminApiError(f"{d.at}.{key[:60]}: must be a limit, got {_kind(value)}")
        out[key] = value
    return out


# -- the audit trail and the 409 ------------------------------------------------------------


@dataclass(frozen=True)
class AuditEntry:
    """One line of the audit trail. A person's change has a new ``version`` and the limits
    ``before`` and ``after``; a controller's line (adaptive, stall) names the ``controller``,
    keeps the version in force, says its ``reason``, and ``change`` holds what it moved."""

    time: float
    actor: str
    version: int
    change: LimitsPatch = field(default_factory=LimitsPatch)
    controller: str | None = None
    reason: str | None = None
    # The limits (or, from a controller, the bounds) before and after: carried, not read.
    before: Json = None
    after: Json = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"time": self.time, "actor": self.actor}
        if self.controller is not None:
            out["controller"] = self.controller
        out["version"] = self.version
        out["change"] = self.change.to_json()
        if self.reason is not None:
            out["reason"] = self.reason
        if self.before is not None:
            out["before"] = self.before
        if self.after is not None:
            out["after"] = self.after
        return out

    @classmethod
    def from_json(cls, data: object, at: str = "entry") -> AuditEntry:
        if not isinstance(data, dict):
            raise AdminApiError("an entry must be an object")
        # These three are what every line has; their messages are the audit log's own.
        if not isinstance(data.get("actor"), str):
            raise AdminApiError("'actor' must be a string")
        version = data.get("version")
        if isinstance(version, bool) or not isinstance(version, int):
            raise AdminApiError("'version' must be an integer")
        when = data.get("time")
        if isinstance(when, bool) or not isinstance(when, (int, float)):
            raise AdminApiError("'time' must be a number")
        d = _Doc(data, at)
        return cls(
            when,
            d.text("actor"),
            version,
            LimitsPatch.from_json(data.get("change") or {}, f"{at}.change"),
            d.opt_text("controller"),
            d.opt_text("reason"),
            d.carried("before"),
            d.carried("after"),
        )


@dataclass(frozen=True)
class ConflictBody:
    """The 409 of a PATCH whose If-Match is old: who changed the limits, and the limits now."""

    message: str
    actor: str | None
    version: int | None
    limits: Limits | None

    def to_json(self) -> JsonObject:
        return {
            "error": {"message": self.message, "type": "conflict", "param": None, "code": 409},
            "actor": self.actor,
            "version": self.version,
            "limits": None if self.limits is None else self.limits.to_json(),
        }

    @classmethod
    def from_json(cls, data: object, message: str = "") -> ConflictBody:
        """Lenient: a 409 is a conflict whatever else its body holds; what it says that is
        of the API's shape is kept (gates before the split sent only the limits)."""
        body = data if isinstance(data, dict) else {}
        try:
            limits = Limits.from_json(body.get("limits"))
        except AdminApiError:
            limits = None
        actor = body.get("actor")
        version = body.get("version")
        if isinstance(version, bool) or not isinstance(version, int):
            version = limits.version if limits is not None else None
        return cls(message, actor if isinstance(actor, str) else None, version, limits)


# -- status ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tail(_Flat):
    """Quantiles of one measure over a window (seconds; None with no sample): exact or within
    the window's ``rel_error`` (``LatencyWindow``)."""

    count: int = 0
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None


# The relative error of a quantile the gate reads from its log buckets (gate/logsketch.py's
# ALPHA). Gates that do not say (before the ``exact`` / ``rel_error`` fields) kept every
# record of ttft, queue wait and e2e, and counted ITL in buckets of this same error.
SKETCH_REL_ERROR = 0.005


@dataclass(frozen=True)
class LatencyWindow:
    """What users felt in one window: requests ended, and the tails of each measure.

    ``exact``: ttft, queue_wait and e2e are the samples themselves (the window was small
    enough to keep every record); False: read from log buckets, each quantile within
    ``rel_error`` of the value at its rank. ITL's quantiles are always within ``rel_error``;
    every ``count`` and ``max`` is exact."""

    requests: int = 0
    ttft: Tail = Tail()
    queue_wait: Tail = Tail()
    e2e: Tail = Tail()
    itl: Tail = Tail()
    exact: bool = True
    rel_error: float = SKETCH_REL_ERROR

    @property
    def error(self) -> float | None:
        """The stated relative error of the ttft / queue_wait / e2e quantiles; None: exact."""
        return None if self.exact else self.rel_error

    def to_json(self) -> JsonObject:
        return {
            "requests": self.requests,
            "exact": self.exact,
            "rel_error": self.rel_error,
            "ttft": self.ttft.to_json(),
            "queue_wait": self.queue_wait.to_json(),
            "e2e": self.e2e.to_json(),
            "itl": self.itl.to_json(),
        }

    @classmethod
    def from_json(cls, data: object, at: str) -> LatencyWindow:
        d = _Doc(data, at)
        tails = {
            k: Tail.from_json(d.raw(k) or {}, f"{at}.{k}")
            for k in ("ttft", "queue_wait", "e2e", "itl")
        }
        rel_error = d.number("rel_error", SKETCH_REL_ERROR)
        if not 0 <= rel_error < 1:  # NaN too: shown as "±N%" beside the numbers
            raise d._fail("rel_error", "a number from 0 to 1", rel_error)
        return cls(d.integer("requests"), **tails, exact=d.flag("exact", True), rel_error=rel_error)


@dataclass(frozen=True)
class Goodput(_Flat):
    """Outcomes of the requests that ended in a window, judged against the caller's SLO."""

    ended: int = 0
    good: int = 0
    slow: int = 0
    refused: int = 0
    failed: int = 0
    ratio: float | None = None


@dataclass(frozen=True)
class QueueWait(_Flat):
    """A lane's queue-wait budget in force and what it is made of (gate/deadline.py)."""

    budget_s: float | None = None
    source: str | None = None
    prefill_s: float | None = None
    drain_per_s: float | None = None
    # Streaming requests admitted without a first token yet, and how many may be.
    prefilling: int = 0
    prefill_cap: int | None = None


@dataclass(frozen=True)
class ClassStatus:
    priority: int = 0
    inflight: int = 0
    queued: int = 0
    rejected_total: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return {
            "priority": self.priority,
            "inflight": self.inflight,
            "queued": self.queued,
            "rejected_total": dict(self.rejected_total),
        }

    @classmethod
    def from_json(cls, data: object, at: str) -> ClassStatus:
        d = _Doc(data, at)
        return cls(
            d.integer("priority"),
            d.integer("inflight"),
            d.integer("queued"),
            d.counts("rejected_total"),
        )


@dataclass(frozen=True)
class TenantStatus:
    """One of a lane's busiest tenants: ``tenant`` is what to show (a name or a hash), ``id``
    what a PATCH names; ``limits`` only for a tenant that has some."""

    tenant: str
    id: str
    inflight: int = 0
    queued: int = 0
    limits: TenantLimits | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "tenant": self.tenant,
            "id": self.id,
            "inflight": self.inflight,
            "queued": self.queued,
        }
        if self.limits is not None:
            out["limits"] = self.limits.to_json()
        return out

    @classmethod
    def from_json(cls, data: object, at: str) -> TenantStatus:
        d = _Doc(data, at)
        limits = d.raw("limits")
        return cls(
            d.text("tenant", "?"),
            d.text("id"),
            d.integer("inflight"),
            d.integer("queued"),
            None if limits is None else TenantLimits.from_json(limits, f"{at}.limits"),
        )


@dataclass(frozen=True)
class AdaptiveDecision(_Flat):
    """The adaptive controller's last move of a lane's effective limit, and why."""

    time: float
    direction: str
    from_: int
    to: int
    tokens_from: int | None
    tokens_to: int | None
    reason: str

    _WIRE: ClassVar[Mapping[str, str]] = {"from_": "from"}


@dataclass(frozen=True)
class AdaptiveStatus:
    """An adaptive lane: its effective limits, bounds, target, last decision, and the last
    two minutes of its effective limit (seconds ago, limit), oldest first."""

    effective_max_inflight: int
    effective_max_inflight_tokens: int | None
    min_inflight: int
    max_inflight: int
    min_inflight_tokens: int | None = None
    max_inflight_tokens: int | None = None
    target_ttft_p99_s: float | None = None
    last_decision: AdaptiveDecision | None = None
    note: str | None = None
    history: Sequence[tuple[float, int]] = ()

    def to_json(self) -> JsonObject:
        return {
            "effective_max_inflight": self.effective_max_inflight,
            "effective_max_inflight_tokens": self.effective_max_inflight_tokens,
            "min_inflight": self.min_inflight,
            "max_inflight": self.max_inflight,
            "min_inflight_tokens": self.min_inflight_tokens,
            "max_inflight_tokens": self.max_inflight_tokens,
            "target_ttft_p99_s": self.target_ttft_p99_s,
            "last_decision": None if self.last_decision is None else self.last_decision.to_json(),
            "note": self.note,
            "history": [[ago, n] for ago, n in self.history],
        }

    @classmethod
    def from_json(cls, data: object, at: str) -> AdaptiveStatus:
        d = _Doc(data, at)
        last = d.raw("last_decision")
        history = []
        for n, point in enumerate(d.array("history")):
            if (
                not isinstance(point, list)
                or len(point) != 2
                or isinstance(point[0], bool)
                or not isinstance(point[0], (int, float))
                or isinstance(point[1], bool)
                or not isinstance(point[1], int)
            ):
                raise AdminApiError(f"{at}.history[{n}]: must be [seconds ago, limit]")
            history.append((point[0], point[1]))
        return cls(
            d.integer("effective_max_inflight"),
            d.opt_integer("effective_max_inflight_tokens"),
            d.integer("min_inflight", 1),
            d.integer("max_inflight"),
            d.opt_integer("min_inflight_tokens"),
            d.opt_integer("max_inflight_tokens"),
            d.opt_number("target_ttft_p99_s"),
            None if last is None else AdaptiveDecision.from_json(last, f"{at}.last_decision"),
            d.opt_text("note"),
            tuple(history),
        )


@dataclass(frozen=True)
class StallReport(_Flat):
    """A stall of the upstream: since when (wall clock), how long, by which signal; ``ended``
    (wall clock) once it is over."""

    since: float
    for_s: float
    signal: str
    detail: str
    ended: float | None = None

    def to_json(self) -> JsonObject:
        out = super().to_json()
        if self.ended is None:
            del out["ended"]  # a stall now has not ended: no key, as the gate has always said
        return out


@dataclass(frozen=True)
class StallStatus:
    """The stall watch: its rule, the lanes it sheds, the stall now and the last that ended."""

    stall_after_s: float | None
    lanes: Sequence[str]
    signal: str
    metrics: bool
    stalled: bool
    now: StallReport | None = None
    last: StallReport | None = None

    def to_json(self) -> JsonObject:
        return {
            "stall_after_s": self.stall_after_s,
            "lanes": list(self.lanes),
            "signal": self.signal,
            "metrics": self.metrics,
            "stalled": self.stalled,
            "now": None if self.now is None else self.now.to_json(),
            "last": None if self.last is None else self.last.to_json(),
        }

    @classmethod
    def from_json(cls, data: object, at: str) -> StallStatus:
        d = _Doc(data, at)
        lanes = d.array("lanes")
        if not all(isinstance(name, str) for name in lanes):
            raise AdminApiError(f"{at}.lanes: must be an array of lane names")
        now, last = d.opt_doc("now"), d.opt_doc("last")
        return cls(
            d.opt_number("stall_after_s"),
            [str(name) for name in lanes],
            d.text("signal"),
            d.flag("metrics"),
            d.flag("stalled"),
            None if now is None else StallReport.from_json(now.data, now.at),
            None if last is None else StallReport.from_json(last.data, last.at),
        )


@dataclass(frozen=True)
class LaneStatus:
    """One lane of ``GET /admin/status`` (docs/gate.md has the reference)."""

    inflight: int = 0
    inflight_tokens: int = 0
    max_inflight_tokens: int | None = None
    queued: int = 0
    oldest_queued_s: float = 0.0
    queue_wait: QueueWait | None = None
    admitted_total: int = 0
    rejected_total: Mapping[str, int] = field(default_factory=dict)
    # What users felt, by window ("1m", "5m"); empty from a gate that keeps no records.
    latency: Mapping[str, LatencyWindow] = field(default_factory=dict)
    goodput: Mapping[str, Goodput] = field(default_factory=dict)
    classes: Mapping[str, ClassStatus] = field(default_factory=dict)
    tenants: Sequence[TenantStatus] = ()
    tenant_count: int = 0
    # Configured (what the operator set) apart from effective (in force: the controller's on
    # an adaptive lane); None from a gate that did not say.
    max_inflight: int | None = None
    effective_max_inflight: int | None = None
    effective_max_inflight_tokens: int | None = None
    adaptive: AdaptiveStatus | None = None
    # The reason new requests are refused with while the upstream is stalled.
    shed: str | None = None

    def to_json(self) -> JsonObject:
        return {
            "inflight": self.inflight,
            "inflight_tokens": self.inflight_tokens,
            "max_inflight_tokens": self.max_inflight_tokens,
            "queued": self.queued,
            "oldest_queued_s": self.oldest_queued_s,
            "queue_wait": None if self.queue_wait is None else self.queue_wait.to_json(),
            "admitted_total": self.admitted_total,
            "rejected_total": dict(self.rejected_total),
            "latency": {w: v.to_json() for w, v in self.latency.items()},
            "goodput": {w: v.to_json() for w, v in self.goodput.items()},
            "classes": {name: c.to_json() for name, c in self.classes.items()},
            "tenants": [t.to_json() for t in self.tenants],
            "tenant_count": self.tenant_count,
            "max_inflight": self.max_inflight,
            "effective_max_inflight": self.effective_max_inflight,
            "effective_max_inflight_tokens": self.effective_max_inflight_tokens,
            "adaptive": None if self.adaptive is None else self.adaptive.to_json(),
            "shed": self.shed,
        }

    @classmethod
    def from_json(cls, data: object, at: str) -> LaneStatus:
        d = _Doc(data, at)
        queue_wait, adaptive = d.opt_doc("queue_wait"), d.opt_doc("adaptive")
        return cls(
            d.integer("inflight"),
            d.integer("inflight_tokens"),
            d.opt_integer("max_inflight_tokens"),
            d.integer("queued"),
            d.number("oldest_queued_s"),
            None if queue_wait is None else QueueWait.from_json(queue_wait.data, queue_wait.at),
            d.integer("admitted_total"),
            d.counts("rejected_total"),
            {w: LatencyWindow.from_json(v.data, v.at) for w, v in d.docs("latency").items()},
            {w: Goodput.from_json(v.data, v.at) for w, v in d.docs("goodput").items()},
            {n: ClassStatus.from_json(c.data, c.at) for n, c in d.docs("classes").items()},
            tuple(TenantStatus.from_json(t.data, t.at) for t in _items(d, "tenants")),
            d.integer("tenant_count"),
            d.opt_integer("max_inflight"),
            d.opt_integer("effective_max_inflight"),
            d.opt_integer("effective_max_inflight_tokens"),
            None if adaptive is None else AdaptiveStatus.from_json(adaptive.data, adaptive.at),
            d.opt_text("shed"),
        )


@dataclass(frozen=True)
class GateStatus:
    """``GET /admin/status``: the limits' version, the pause, each lane, the stall watch."""

    version: int
    paused: bool
    lanes: Mapping[str, LaneStatus] = field(default_factory=dict)
    stall: StallStatus | None = None

    def to_json(self) -> JsonObject:
        return {
            "version": self.version,
            "paused": self.paused,
            "lanes": {name: lane.to_json() for name, lane in self.lanes.items()},
            "stall": None if self.stall is None else self.stall.to_json(),
        }

    @classmethod
    def from_json(cls, data: object, at: str = "status") -> GateStatus:
        d = _Doc(data, at)
        if not d.has("lanes"):
            raise AdminApiError(f"{at}: no lanes")
        stall = d.opt_doc("stall")
        return cls(
            d.integer("version"),
            d.flag("paused"),
            {
                name: LaneStatus.from_json(lane.data, lane.at)
                for name, lane in d.docs("lanes").items()
            },
            None if stall is None else StallStatus.from_json(stall.data, stall.at),
        )


def audit_entries(data: object, at: str = "audit") -> list[AuditEntry]:
    """``GET /admin/audit``'s entries, newest first; an answer without a list of them is an
    AdminApiError, and an entry that is not an audit entry is left out."""
    d = _Doc(data, at)
    if not isinstance(d.raw("entries"), list):
        raise AdminApiError(f"{at}: no list of entries")
    out = []
    for entry in d.array("entries"):
        try:
            out.append(AuditEntry.from_json(entry))
        except AdminApiError:
            continue
    return out
