"""The admin API's types (gpuwatch/adminapi.py): what the gate writes reads back the same, the
wire shape is the gate's as documented, and whatever else a server answers is one
AdminApiError, never another exception."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwatch import adminapi
from gpuwatch.adminapi import (
    SKETCH_REL_ERROR,
    AdaptiveDecision,
    AdaptiveStatus,
    AdminApiError,
    AuditEntry,
    ClassStatus,
    ConflictBody,
    EffectiveLimits,
    GateStatus,
    Goodput,
    LaneLimits,
    LaneStatus,
    LatencyWindow,
    Limits,
    LimitsPatch,
    QueueWait,
    StallReport,
    StallStatus,
    Tail,
    TenantLimits,
    TenantStatus,
    audit_entries,
)
from gpuwatch.record import codec

# -- strategies: values of every field's type ------------------------------------------------

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8)
counts = st.integers(0, 10**6)
maybe_counts = st.none() | counts
seconds = st.floats(0, 1e6, allow_nan=False)
maybe_seconds = st.none() | seconds
limit_values = st.none() | counts | seconds | names

tenant_limits = st.builds(TenantLimits, st.booleans(), maybe_counts)
lane_limits = st.builds(
    LaneLimits,
    max_inflight=counts,
    max_queue=counts,
    queue_timeout_s=seconds,
    max_queue_wait_s=maybe_seconds,
    upstream_idle_timeout_s=maybe_seconds,
    max_output_tokens=maybe_counts,
    output_tokens_policy=st.sampled_from(("clamp", "reject")),
    max_inflight_tokens=maybe_counts,
    policy=st.sampled_from(("static", "adaptive")),
    target_ttft_p99_s=maybe_seconds,
    min_inflight=counts,
    max_pixels=maybe_counts,
)
limits = st.builds(
    Limits,
    counts,
    st.booleans(),
    st.dictionaries(names, lane_limits, max_size=3),
    st.dictionaries(names, tenant_limits, max_size=3),
    st.none() | st.dictionaries(names, st.builds(EffectiveLimits, counts, maybe_counts)),
)
patches = st.builds(
    LimitsPatch,
    st.none() | st.booleans(),
    st.dictionaries(names, st.dictionaries(names, limit_values, max_size=3), max_size=3),
    st.dictionaries(names, st.none() | st.dictionaries(names, limit_values, max_size=2)),
)
tails = st.builds(Tail, counts, maybe_seconds, maybe_seconds, maybe_seconds, maybe_seconds)
windows = st.builds(
    LatencyWindow,
    counts,
    tails,
    tails,
    tails,
    tails,
    st.booleans(),
    st.floats(0, 1, exclude_max=True),
)
goodputs = st.builds(Goodput, counts, counts, counts, counts, counts, st.none() | st.floats(0, 1))
decisions = st.builds(
    AdaptiveDecision, seconds, st.sampled_from(("up", "down")), counts, counts,
    maybe_counts, maybe_counts, names,
)  # fmt: skip
adaptive = st.builds(
    AdaptiveStatus, counts, maybe_counts, counts, counts, maybe_counts, maybe_counts,
    maybe_seconds, st.none() | decisions, st.none() | names,
    st.lists(st.tuples(seconds, counts), max_size=4).map(tuple),
)  # fmt: skip
reports = st.builds(StallReport, seconds, seconds, names, names, maybe_seconds)
stalls = st.builds(
    StallStatus, maybe_seconds, st.lists(names, max_size=2), names, st.booleans(),
    st.booleans(), st.none() | reports, st.none() | reports,
)  # fmt: skip
lanes = st.builds(
    LaneStatus,
    inflight=counts,
    inflight_tokens=counts,
    max_inflight_tokens=maybe_counts,
    queued=counts,
    oldest_queued_s=seconds,
    queue_wait=st.none()
    | st.builds(
        QueueWait,
        maybe_seconds,
        st.none() | names,
        maybe_seconds,
        maybe_seconds,
        counts,
        maybe_counts,
    ),
    admitted_total=counts,
    rejected_total=st.dictionaries(names, counts, max_size=3),
    latency=st.dictionaries(st.sampled_from(("1m", "5m")), windows),
    goodput=st.dictionaries(st.sampled_from(("1m", "5m")), goodputs),
    classes=st.dictionaries(
        names,
        st.builds(ClassStatus, counts, counts, counts, st.dictionaries(names, counts)),
        max_size=2,
    ),
    tenants=st.lists(
        st.builds(TenantStatus, names, names, counts, counts, st.none() | tenant_limits),
        max_size=3,
    ).map(tuple),
    tenant_count=counts,
    max_inflight=maybe_counts,
    effective_max_inflight=maybe_counts,
    effective_max_inflight_tokens=maybe_counts,
    adaptive=st.none() | adaptive,
    shed=st.none() | names,
)
statuses = st.builds(
    GateStatus, counts, st.booleans(), st.dictionaries(names, lanes, max_size=2),
    st.none() | stalls,
)  # fmt: skip
entries = st.builds(
    AuditEntry, seconds, names, counts, patches, st.none() | names, st.none() | names,
    st.none() | st.dictionaries(names, maybe_counts, max_size=2),
)  # fmt: skip


def wire(value: Any) -> Any:
    """Through the wire: what a reader gets back of ``value``'s JSON."""
    return json.loads(json.dumps(value.to_json()))


# -- what is written reads back the same -----------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "values"),
    [(Limits, limits), (LimitsPatch, patches), (GateStatus, statuses), (AuditEntry, entries)],
)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_what_is_written_reads_back_the_same(kind: Any, values: Any, data: Any) -> None:
    value = data.draw(values)
    assert kind.from_json(wire(value)) == value
    if kind is AuditEntry:
        assert audit_entries({"entries": [wire(value)]}) == [value]


@settings(max_examples=50, deadline=None)
@given(names, st.none() | names, st.none() | counts, st.none() | limits)
def test_a_409_reads_back_the_same(
    message: str, actor: str | None, version: int | None, current: Limits | None
) -> None:
    body = ConflictBody(message, actor, version, current)
    read = ConflictBody.from_json(wire(body), message)
    # A 409 without a version takes the limits' own (gates before the split sent only them).
    expected = version if version is not None else (current.version if current else None)
    assert read == ConflictBody(message, actor, expected, current)


# -- the wire shape is the gate's, as docs/gate.md describes it ------------------------------

TAIL = {"count": 3, "p50": 0.2, "p90": 0.5, "p99": 0.9, "max": 1.0}
NONE_TAIL = {"count": 0, "p50": None, "p90": None, "p99": None, "max": None}
GOOD = {"ended": 4, "good": 3, "slow": 0, "refused": 1, "failed": 0, "ratio": 0.75}
WINDOW = {"requests": 4, "exact": True, "rel_error": 0.005, "ttft": TAIL, "queue_wait": TAIL,
          "e2e": TAIL, "itl": NONE_TAIL}  # fmt: skip
SKETCHED = {**WINDOW, "exact": False}
STATUS = {
    "version": 3,
    "paused": False,
    "lanes": {
        "chat": {
            "inflight": 2, "inflight_tokens": 900, "max_inflight_tokens": 96000, "queued": 1,
            "oldest_queued_s": 0.42,
            "queue_wait": {"budget_s": 1.5, "source": "slo", "prefill_s": 0.3,
                           "drain_per_s": 4.0, "prefilling": 1, "prefill_cap": 6},
            "admitted_total": 40, "rejected_total": {"queue_full": 2},
            "latency": {"1m": WINDOW, "5m": SKETCHED}, "goodput": {"1m": GOOD, "5m": GOOD},
            "classes": {"critical": {"priority": 0, "inflight": 2, "queued": 1,
                                     "rejected_total": {"queue_full": 2}}},
            "tenants": [{"tenant": "acme", "id": "acme", "inflight": 2, "queued": 1,
                         "limits": {"paused": False, "max_inflight": 4}},
                        {"tenant": "key:1a2b", "id": "key:1a2b", "inflight": 0, "queued": 0}],
            "tenant_count": 2, "max_inflight": 16, "effective_max_inflight": 12,
            "effective_max_inflight_tokens": None,
            "adaptive": {"effective_max_inflight": 12, "effective_max_inflight_tokens": None,
                         "min_inflight": 2, "max_inflight": 16, "min_inflight_tokens": None,
                         "max_inflight_tokens": None, "target_ttft_p99_s": 2.0,
                         "last_decision": {"time": 1.7e9, "direction": "down", "from": 16,
                                           "to": 12, "tokens_from": None, "tokens_to": None,
                                           "reason": "-25%: p99 TTFT 3.0s > 2.0s"},
                         "note": "waiting for requests", "history": [[12.0, 16], [1.0, 12]]},
            "shed": None,
        },
    },
    "stall": {"stall_after_s": 10.0, "lanes": ["chat"], "signal": "metrics", "metrics": True,
              "stalled": False, "now": None,
              "last": {"since": 1.7e9, "for_s": 12.5, "signal": "streams", "detail": "no byte",
                       "ended": 1.7e9 + 13}},
}  # fmt: skip


def test_the_documented_status_reads_back_byte_for_byte() -> None:
    read = GateStatus.from_json(copy.deepcopy(STATUS))
    assert json.dumps(read.to_json()) == json.dumps(STATUS)  # same keys, same order
    chat = read.lanes["chat"]
    assert chat.latency["1m"].ttft.p99 == 0.9 and chat.goodput["5m"].ratio == 0.75
    assert chat.latency["1m"].error is None and chat.latency["5m"].error == 0.005
    assert chat.adaptive is not None and chat.adaptive.last_decision is not None
    assert chat.adaptive.last_decision.from_ == 16 and chat.tenants[0].limits == TenantLimits(
        False, 4
    )


def test_the_documented_409_and_audit_lines_keep_their_shape() -> None:
    now = Limits(6, False, {"chat": LaneLimits()})
    body = ConflictBody("limits changed by alice@box", "alice@box", 6, now).to_json()
    assert body == {
        "error": {"message": "limits changed by alice@box", "type": "conflict", "param": None,
                  "code": 409},
        "actor": "alice@box", "version": 6, "limits": now.to_json(),
    }  # fmt: skip
    person = AuditEntry(1.0, "alice", 2, LimitsPatch(True), before={"a": 1}, after={"a": 2})
    assert list(person.to_json()) == ["time", "actor", "version", "change", "before", "after"]
    shed = LimitsPatch(lanes={"chat": {"shed": "upstream_stalled"}})
    stall = AuditEntry(1.0, "stall", 2, shed, controller="stall", reason="stalled").to_json()
    assert stall == {"time": 1.0, "actor": "stall", "controller": "stall", "version": 2,
                     "change": {"lanes": {"chat": {"shed": "upstream_stalled"}}},
                     "reason": "stalled"}  # fmt: skip


def test_an_older_gates_answer_takes_the_defaults_for_what_it_lacks() -> None:
    old = Limits.from_json({"version": 2, "paused": False, "lanes": {"chat": {"max_inflight": 4}}})
    assert old.lanes["chat"] == LaneLimits(max_inflight=4) and old.effective is None
    status = GateStatus.from_json({"version": 2, "lanes": {"chat": {"queued": 1}}})
    assert status.lanes["chat"] == LaneStatus(queued=1) and status.stall is None
    # A newer gate's keys are left out, not refused.
    newer = Limits.from_json({"version": 2, "lanes": {"chat": {"max_warp": 9}}, "extra": 1})
    assert newer.lanes["chat"] == LaneLimits()


def test_a_window_says_whether_its_tails_are_exact() -> None:
    """A gate before the flag kept every record of ttft, queue wait and e2e: read as exact,
    with the 0.5% its ITL buckets always had. A stated error that is no fraction is refused."""
    old = LatencyWindow.from_json({"requests": 4, "ttft": TAIL}, "w")
    assert (old.exact, old.rel_error, old.error) == (True, SKETCH_REL_ERROR, None)
    sketched = LatencyWindow.from_json({"requests": 4, "exact": False, "rel_error": 0.01}, "w")
    assert sketched.error == 0.01
    for bad in (-0.1, 1.0, float("nan"), "0.5%"):
        with pytest.raises(AdminApiError, match=r"w\.rel_error"):
            LatencyWindow.from_json({"requests": 4, "rel_error": bad}, "w")
    with pytest.raises(AdminApiError, match=r"w\.exact"):
        LatencyWindow.from_json({"exact": "yes"}, "w")


def test_an_old_recordings_gate_row_still_replays() -> None:
    """Recordings store the gate's answers as it sent them: a row written before the types
    decodes to them (with an older gate's keys missing), and a row that is not one is a
    CodecError."""
    row = {
        "limits": {"version": 3, "paused": False, "lanes": {"chat": {"max_inflight": 8}}},
        "status": {"version": 3, "paused": False, "lanes": {"chat": {"queued": 1,
                   "rejected_total": {"queue_full": 2}}}},
        "error": None,
        "current": False,
    }  # fmt: skip
    limits_read, status_read, error, current = codec.decode_payload("gate", row)
    assert limits_read == Limits(3, False, {"chat": LaneLimits(max_inflight=8)})
    assert status_read.lanes["chat"].rejected_total == {"queue_full": 2}
    assert (error, current) == (None, False)
    same = codec.decode_payload("gate", {**row, "limits": codec.SAME_LIMITS})
    assert same[0] == codec.SAME_LIMITS
    with pytest.raises(codec.CodecError):
        codec.decode_payload("gate", {**row, "status": {"lanes": {"chat": {"queued": "1"}}}})
    with pytest.raises(codec.CodecError):
        codec.decode_payload("gate", {**row, "limits": 5})


# -- whatever else a server answers: one AdminApiError ---------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=20,
)  # fmt: skip
READERS: list[Callable[[Any], object]] = [Limits.from_json, GateStatus.from_json, LimitsPatch.from_json, AuditEntry.from_json,
           audit_entries, lambda v: ConflictBody.from_json(v, "409")]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(json_values, st.sampled_from(range(len(READERS))))
def test_any_json_is_read_or_refused_with_one_error(value: Any, reader: int) -> None:
    try:
        READERS[reader](value)
    except AdminApiError as exc:
        assert str(exc)  # says what is wrong


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*at, i))
    return out


STATUS_PATHS = _paths(STATUS)[1:]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(STATUS_PATHS), json_values)
def test_a_status_with_one_part_replaced_is_read_or_refused_naming_where(
    path: tuple[Any, ...], value: Any
) -> None:
    """A real status document with any one value replaced by any JSON: read, or one error
    whose message names a place in the document (a prefix of the path replaced)."""
    doc = copy.deepcopy(STATUS)
    parent: Any = doc  # walked down by any path: a dict or a list
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    try:
        GateStatus.from_json(doc)
    except AdminApiError as exc:
        assert str(exc).startswith("status")


def flat_classes(cls: type[adminapi._Flat] = adminapi._Flat) -> list[type[adminapi._Flat]]:
    subclasses: list[type[adminapi._Flat]] = cls.__subclasses__()
    return [c for sub in subclasses for c in (sub, *flat_classes(sub))]


@pytest.mark.parametrize("cls", flat_classes(), ids=lambda c: c.__name__)
def test_each_flat_class_is_read_by_its_fields_as_planned_once(cls: type[adminapi._Flat]) -> None:
    """``_Flat.from_json`` reads by a plan worked out once per class: it is the fields'
    names, JSON keys, requiredness and types, in order; a value of a type the field's reader
    passes through is taken as it is, any other goes to the reader (and its error)."""
    plan = adminapi._plan(cls)
    wanted = [
        (
            f.name,
            cls._WIRE.get(f.name, f.name),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            adminapi._READ[str(f.type)],
            adminapi._PLAIN[str(f.type)],
        )
        for f in dataclasses.fields(cls)
    ]
    assert list(plan) == wanted
    assert adminapi._plan(cls) is plan


@pytest.mark.parametrize("cls", flat_classes(), ids=lambda c: c.__name__)
def test_values_the_plan_takes_as_they_are_are_what_the_readers_return(
    cls: type[adminapi._Flat],
) -> None:
    """For every field and every kind of JSON value, the planned read (a plain value taken as
    it is) equals its reader's result, or raises the reader's error."""
    samples: list[object] = [None, True, False, 0, -3, 2.5, "x", "", [], {}]
    for name, key, _required, read, _plain in adminapi._plan(cls):
        for value in samples:
            doc = {key: value}
            try:
                expected: object = read(adminapi._Doc(doc, "v"), key)
            except AdminApiError as exc:
                with pytest.raises(AdminApiError, match=re.escape(str(exc))):
                    cls.from_json(doc, "v")
                continue
            got = getattr(cls.from_json(doc, "v"), name)  # other fields take their defaults
            assert (type(got), got) == (type(expected), expected)
