"""The parser and the dispatch: ``gpuwatch`` alone is the dashboard."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpuwatch import __version__, config
from gpuwatch.cli import (
    dashboard,
    demo,
    gate,
    limits,
    load,
    plan,
    record,
    replay,
    rules,
    sim,
    snapshot,
    watch,
)
from gpuwatch.cli.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, fail

# Order is the order of `gpuwatch --help`.
SUBCOMMANDS = (
    dashboard, demo, snapshot, watch, record, replay, rules, sim, gate, limits, load, plan,
)  # fmt: skip


def build_parser() -> tuple[argparse.ArgumentParser, set[str]]:
    parser = argparse.ArgumentParser(
        prog="gpuwatch",
        description="htop for LLM serving on a GPU node: VRAM, KV cache, queues, tail latency.",
    )
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(sub)
    return parser, set(sub.choices)


def main(argv: Sequence[str] | None = None) -> int:
    parser, commands = build_parser()
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `gpuwatch` alone, or with dashboard options only, is the dashboard.
    if not args_list or (
        args_list[0] not in commands and args_list[0] not in ("-h", "--help", "--version")
    ):
        args_list.insert(0, "top")
    args = parser.parse_args(args_list)
    try:
        code: int = args.func(args)
        return code
    except config.ConfigError as exc:
        return fail("gpuwatch", f"config error: {exc}", EXIT_USAGE)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Output piped into `head` that closed early: not an error worth a traceback.
        sys.stderr.close()
        return EXIT_OK
