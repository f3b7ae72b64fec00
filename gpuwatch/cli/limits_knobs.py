"""``gpuwatch limits --ray URL`` (and ``--dynamo``, ``--litellm``, ``--sglang``, ``--vllm``): a
serving stack's own knobs through its own admin API, by the same one apply path as the
dashboard's keys (control/knobs/apply.py: guard, bounds, conflict check, write, read back,
local audit).

``get`` lists the knobs; ``set TARGET.NAME=VALUE ...`` changes them (the name is after the LAST
dot: ``llm/Forward.max_ongoing_requests=4``); ``pause`` / ``resume`` set a stack's ``paused``
knobs; ``audit`` shows the local audit of that stack's endpoint. A ``set`` is conflict-checked
against the values this command read just before.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwatch import config
from gpuwatch.adminapi import AuditEntry, Json
from gpuwatch.cli.common import EXIT_OK, fail, parse_assignment
from gpuwatch.config import KNOB_STACKS, KnobConfig
from gpuwatch.fmt import clip

if TYPE_CHECKING:
    from gpuwatch.control.knobs.base import Knob

PROG = "gpuwatch limits"
CREDENTIAL_HELP = "the stack's bearer token (LiteLLM's master key); never on the command line"


def register_knobs(limits: argparse.ArgumentParser) -> None:
    for stack in KNOB_STACKS:
        limits.add_argument(
            f"--{stack}", metavar="URL", help=f"{stack}'s own admin API (docs/native-knobs.md)"
        )
    limits.add_argument("--credential-file", type=Path, metavar="FILE", help=CREDENTIAL_HELP)
    limits.add_argument(
        "--config", type=Path, metavar="FILE", help=f"config file (default {config.default_path()})"
    )


def stack_of(args: argparse.Namespace) -> tuple[str, str] | None:
    """The one stack named (stack, URL), None for the gate; ValueError for none or several."""
    named = [(s, getattr(args, s)) for s in KNOB_STACKS if getattr(args, s)]
    if len(named) + bool(args.admin) > 1:
        raise ValueError("give one of --admin, --ray, --dynamo, --litellm, --sglang, --vllm")
    if not named and not args.admin:
        raise ValueError(
            "give --admin URL (a gate) or a stack's URL: --ray, --dynamo, --litellm, "
            "--sglang or --vllm"
        )
    return named[0] if named else None


def parse_knob_assignment(text: str) -> tuple[str, str, Any]:
    """``llm/Forward.max_ongoing_requests=4`` -> ("llm/Forward", "max_ongoing_requests", 4)."""
    return parse_assignment(text, "TARGET.NAME=VALUE", last_dot=True)


def _configured(stack: str, url: str, settings: config.Settings) -> KnobConfig:
    # A [[knobs]] entry for this stack at this URL lends its credential file and timeout.
    for entry in settings.knobs:
        if entry.stack == stack and entry.url.rstrip("/") == url.rstrip("/"):
            return entry
    return KnobConfig(stack, url)


def run_knobs(args: argparse.Namespace, stack: str, url: str) -> int:
    from gpuwatch.control.gate import default_actor
    from gpuwatch.control.guard import Guard
    from gpuwatch.control.knobs.apply import apply_changes, default_audit_path, open_audit
    from gpuwatch.control.knobs.base import KnobChange, KnobError
    from gpuwatch.control.knobs.registry import adapter_for, endpoint_of

    if args.action == "status" or args.if_match is not None:
        return fail(PROG, "status and --if-match are the gate's (a stack's knobs have neither)")
    try:
        assignments = [parse_knob_assignment(a) for a in args.assignments]
    except ValueError as exc:
        return fail(PROG, str(exc))
    if (args.action == "set") != bool(assignments):
        return fail(PROG, "set takes TARGET.NAME=VALUE ...; the other actions take none")
    settings = config.load(args.config)  # ConfigError: one line, exit 2 (cli/main.py)
    entry = _configured(stack, url, settings)
    if args.credential_file is not None:
        entry = KnobConfig(stack, url, str(args.credential_file), timeout_s=entry.timeout_s)
    endpoint = endpoint_of(KnobConfig(stack, url, entry.credential_file, "", entry.timeout_s))
    audit_path = Path(settings.knob_audit).expanduser() if settings.knob_audit else None
    audit_path = audit_path or default_audit_path()

    if args.action == "audit":
        mine = f"{stack} admin API {endpoint.base}"  # the reason apply.py writes
        entries = [e for e in open_audit(audit_path).recent if e.reason == mine][: args.limit]
        print_audit(entries, args.json)
        return EXIT_OK

    def changes_of(knobs: list[Knob]) -> list[KnobChange]:
        if args.action in ("pause", "resume"):
            paused = [KnobChange(k, args.action == "pause") for k in knobs if k.name == "paused"]
            if not paused:
                raise KnobError(f"{stack} at {endpoint.base} has no paused knob to {args.action}")
            return paused
        by_key = {(k.target, k.name): k for k in knobs}
        out = []
        for target, name, value in assignments:
            knob = by_key.get((target, name))
            if knob is None:
                raise KnobError(f"{stack} has no knob {clip(target, 80)}.{clip(name, 60)}")
            if isinstance(value, str):
                raise KnobError(f"{knob.label}: {clip(value, 40)!r} is not a value")
            out.append(KnobChange(knob, value))
        return out

    async def call() -> tuple[list[Knob], list[KnobChange]]:
        adapter = adapter_for(endpoint)
        try:
            knobs = await adapter.read()
            if args.action == "get":
                return knobs, []
            changes = changes_of(knobs)
            guard = Guard(read_only=args.read_only)
            audit = open_audit(audit_path)
            after = await apply_changes(adapter, changes, guard, audit, default_actor())
            return after, changes
        finally:
            await adapter.close()

    knobs, changes = asyncio.run(call())  # KnobError, ReadOnlyError: exit 1 (cli/main.py)
    if args.json:
        json.dump([knob_json(k) for k in knobs], sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif changes:
        for change in changes:
            print(clip(change.describe(), 300))
    else:
        print_knobs(knobs)
    return EXIT_OK


def knob_json(knob: Knob) -> dict[str, Any]:
    return {
        "stack": knob.stack,
        "target": knob.target,
        "name": knob.name,
        "value": knob.value,
        "kind": knob.kind,
        "minimum": knob.minimum,
        "maximum": knob.maximum,
        "nullable": knob.nullable,
    }


def print_knobs(knobs: list[Knob]) -> None:
    from gpuwatch.control.knobs.base import show_value

    if not knobs:
        print("no knobs")
        return
    width = min(40, max(len(clip(k.target, 40)) for k in knobs))
    print(f"{'target':<{width}}  {'knob':<32}{'value':>10}  bounds")
    for k in knobs:
        low = "" if k.minimum is None else f"{k.minimum:g}"
        high = "" if k.maximum is None else f"{k.maximum:g}"
        bounds = f"{low}..{high}" if low or high else ""
        bounds += "  (none: no limit)" if k.nullable else ""
        target, name = clip(k.target, 40), clip(k.name, 32)
        print(f"{target:<{width}}  {name:<32}{show_value(k.value):>10}  {bounds}")


def _part(doc: Json, where: str) -> dict[str, Json]:
    # An audit line's before / after, by "stack target": what it carries, read defensively.
    part = doc.get(where) if isinstance(doc, dict) else None
    return part if isinstance(part, dict) else {}


def print_audit(entries: list[AuditEntry], as_json: bool) -> None:
    if as_json:
        json.dump([e.to_json() for e in entries], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    for e in entries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.time))
        for where, changed in e.change.lanes.items():
            was, now = _part(e.before, where), _part(e.after, where)
            for name, value in changed.items():
                kept = "" if now.get(name, value) == value else f" (the stack kept {now[name]})"
                line = f"{when}  {e.actor}  {where} {name} {was.get(name)} -> {value}{kept}"
                print(clip(line, 300))
