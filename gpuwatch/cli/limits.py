"""``gpuwatch limits``: read and change a gate's limits through its admin API, or a serving
stack's own knobs through its own (``--ray URL`` and the others: ``cli/limits_knobs.py``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from gpuwatch.adminapi import MEDIA_CAPS, AuditEntry, GateStatus, Limits, LimitsPatch, LimitValue
from gpuwatch.admintoken import read_token
from gpuwatch.cli.common import EXIT_OK, TOKEN_HELP, fail, parse_assignment, positive_int
from gpuwatch.cli.limits_knobs import PROG, register_knobs, run_knobs, stack_of
from gpuwatch.fmt import clip


def register(limits: argparse.ArgumentParser) -> None:
    limits.description = (
        "Talk to a gate's admin API (--admin), or to a serving stack's own admin API (--ray, "
        "--dynamo, --litellm, --sglang, --vllm: its knobs, TARGET.NAME=VALUE). Exit 1 when "
        "either refuses (or a knob changed since it was read), with the reason."
    )
    limits.add_argument(
        "action",
        nargs="?",
        default="get",
        choices=["get", "set", "pause", "resume", "audit", "status"],
    )
    limits.add_argument("assignments", nargs="*", metavar="LANE.KEY=VALUE")
    limits.add_argument("--admin", metavar="URL", help="the gate, e.g. http://127.0.0.1:9000")
    register_knobs(limits)
    limits.add_argument("--admin-token-file", type=Path, metavar="FILE", help=TOKEN_HELP)
    limits.add_argument(
        "--if-match", type=int, metavar="VERSION", help="refuse if the version moved"
    )
    limits.add_argument("--limit", type=positive_int, default=20, help="audit entries to show")
    limits.add_argument("--read-only", action="store_true", help="refuse every change")
    limits.add_argument("--json", action="store_true", help="print the gate's JSON")
    limits.set_defaults(func=run)


def patch_of(assignments: list[tuple[str, str, Any]]) -> LimitsPatch:
    """The PATCH ``set``'s assignments make; ValueError for a tenant given a bare value (a
    tenant's part of a PATCH is an object of its limits, or null)."""
    lanes: dict[str, dict[str, LimitValue]] = {}
    tenants: dict[str, dict[str, LimitValue] | None] = {}
    for lane, key, value in assignments:
        if lane != "tenants":
            lanes.setdefault(lane, {})[key] = value
            continue
        # tenants.ID.KEY=VALUE (an id may hold dots: the key is after the last), or
        # tenants.ID=none to remove the tenant's limits. A key the gate does not know is
        # sent all the same: the gate's refusal names it.
        tenant, dot, field = key.rpartition(".")
        if value is None and (not dot or field not in ("paused", "max_inflight")):
            tenants[key] = None
        elif dot:
            entry = tenants.setdefault(tenant, {})
            if entry is not None:
                entry[field] = value
        else:
            raise ValueError(f"tenants.{key}: set tenants.ID.KEY=VALUE, or tenants.ID=none")
    return LimitsPatch(None, lanes, tenants)


def run(args: argparse.Namespace) -> int:
    from gpuwatch.control.gate import GateClient
    from gpuwatch.control.guard import Guard

    try:
        stack = stack_of(args)
    except ValueError as exc:
        return fail(PROG, str(exc))
    if stack is not None:
        return run_knobs(args, *stack)

    try:
        token = read_token(args.admin_token_file)
        assignments = [parse_assignment(a) for a in args.assignments]
    except ValueError as exc:
        return fail(PROG, str(exc))
    if args.action == "set" and not assignments:
        return fail(PROG, "set needs at least one LANE.KEY=VALUE")
    if args.action != "set" and assignments:
        return fail(PROG, f"{args.action} takes no LANE.KEY=VALUE")
    try:
        patch = patch_of(assignments)
    except ValueError as exc:
        return fail(PROG, str(exc))

    async def call() -> Limits | GateStatus | list[AuditEntry]:
        async with GateClient(args.admin, token, Guard(read_only=args.read_only)) as client:
            if args.action == "get":
                return await client.limits()
            if args.action == "status":
                return await client.status()
            if args.action == "audit":
                return await client.audit(args.limit)
            if args.action in ("pause", "resume"):
                return await client.patch(LimitsPatch(args.action == "pause"), args.if_match)
            return await client.patch(patch, args.if_match)

    result = asyncio.run(call())  # GateError, ReadOnlyError: exit 1 (cli/main.py)
    if isinstance(result, Limits) and not args.json:
        print_limits(result)
    else:
        shown = [e.to_json() for e in result] if isinstance(result, list) else result.to_json()
        json.dump(shown, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return EXIT_OK


def _show(value: Any, none: str = "-") -> str:
    # What the gate answered is printed clean: a name or a value may hold an escape sequence.
    return none if value is None else f"{value:g}" if isinstance(value, float) else clip(value, 60)


def print_limits(limits: Limits) -> None:
    print(f"version {limits.version}  paused {str(limits.paused).lower()}")
    print(
        f"{'lane':<10}{'inflight':>9}{'queue':>7}{'timeout':>9}{'wait':>7}{'ttfb':>6}"
        f"{'idle':>6}{'prompt':>8}{'output':>8}{'tokens':>10}  policy"
    )
    for name, lane in limits.lanes.items():
        print(
            f"{_show(name):<10}{_show(lane.max_inflight):>9}{_show(lane.max_queue):>7}"
            f"{_show(lane.queue_timeout_s):>9}"
            f"{_show(lane.max_queue_wait_s, 'auto'):>7}"
            # The upstream timeouts (first byte, idle between chunks).
            f"{_show(lane.upstream_first_byte_timeout_s):>6}"
            f"{_show(lane.upstream_idle_timeout_s):>6}"
            f"{_show(lane.max_prompt_tokens):>8}{_show(lane.max_output_tokens):>8}"
            f"{_show(lane.max_inflight_tokens):>10}"
            f"  {_show(lane.output_tokens_policy)}"
        )
        media = {k: lane.value(k) for k in MEDIA_CAPS if lane.value(k) is not None}
        if media:
            caps = "  ".join(f"{k} {_show(v)}" for k, v in media.items())
            print(f"{'':<10}{caps}  ({_show(lane.media_policy)})")
    for tenant, t in limits.tenants.items():
        shown = ["paused"] if t.paused else []
        if t.max_inflight is not None:
            shown.append(f"max_inflight {_show(t.max_inflight)}")
        print(f"tenant {_show(tenant)}: {', '.join(shown) or 'no limits'}")
    effective = limits.effective or {}
    for name, lane in limits.lanes.items():
        if lane.policy == "adaptive":
            now = effective.get(name)
            bounds = f"{_show(lane.min_inflight)}..{_show(lane.max_inflight)}"
            print(
                f"{_show(name)}: adaptive, target p99 TTFT {_show(lane.target_ttft_p99_s)} "
                f"s, in flight {bounds}, effective {_show(now.max_inflight) if now else '?'}"
            )
