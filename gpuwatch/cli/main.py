"""The parser and the dispatch: ``gpuwatch`` alone is the dashboard. The one place that turns
a ``GpuwatchError`` into its one-line failure and exit code.

Each subcommand's module imports only what its parser needs; what it runs (Textual, aiohttp,
httpx, plotext) is imported inside its ``run``, so ``gpuwatch --help`` and ``gpuwatch snapshot``
load none of it (tests/unit/test_import_hygiene.py, bench/startup.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Collection, Sequence
from typing import Any

from gpuwatch.cli.common import fail
from gpuwatch.errors import EXIT_INTERRUPTED, EXIT_OK, ConfigError, GpuwatchError

# Importing httpx loads its own command-line client (click, rich.progress, pygments: ~30 ms of
# every command that reads an endpoint), which gpuwatch never runs. A None entry makes that one
# import fail, and httpx defines a stub ``main`` in its place (httpx/__init__.py catches the
# ImportError, as it does when its CLI extras are not installed).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

# Every subcommand: its module in gpuwatch.cli, and its line in `gpuwatch --help` (in this
# order). A module is imported only for the command that runs (pip's commands_dict does the
# same): `gpuwatch --help` loads none of them, `gpuwatch snapshot` one.
COMMANDS: dict[str, tuple[str, str]] = {
    "top": ("dashboard", "the live dashboard (the default: `gpuwatch` alone runs it)"),
    "demo": ("demo", "simulator + gate + bursty load + dashboard, all on this machine"),
    "snapshot": ("snapshot", "read GPUs, host and /metrics endpoints once; print a table or JSON"),
    "watch": ("watch", "the dashboard's numbers without the screen: a line (or JSON) per interval"),
    "record": (
        "record",
        "record what the dashboard would show into a file, headless (run it as a service)",
    ),
    "replay": (
        "replay",
        "a recording in the dashboard, read-only; or a range of it to a file or a report",
    ),
    "rules": (
        "rules",
        "Prometheus alerting rules for the [slo]: burn rates, saturation, faults",
    ),
    "sim": ("sim", "a simulated GPU inference node (OpenAI API, vLLM /metrics, virtual GPU)"),
    "gate": (
        "gate",
        "admission-control proxy in front of an OpenAI-compatible server, with an admin API",
    ),
    "limits": (
        "limits",
        "a gate's limits: get | set LANE.KEY=VALUE ... | pause | resume | audit | status "
        "(a tenant's: set tenants.ID.paused=true, tenants.ID.max_inflight=2, tenants.ID=none); "
        "a stack's own knobs: --ray / --dynamo / --litellm / --sglang / --vllm URL",
    ),
    "load": ("load", "bursty load generator: TTFT, TPOT, ITL, E2E, goodput"),
    "plan": (
        "plan",
        "capacity planning: KV arithmetic (kv) and the knee under bursty load (sweep)",
    ),
}


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked (importlib.metadata
    costs a third of what `gpuwatch --help` may take)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        import gpuwatch

        print(f"gpuwatch {gpuwatch.__version__}")
        parser.exit()


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the arguments of ``commands`` (every command when None); the others
    are there by name and help line only."""
    parser = argparse.ArgumentParser(
        prog="gpuwatch",
        description="htop for LLM serving on a GPU node: VRAM, KV cache, queues, tail latency.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, line) in COMMANDS.items():
        command = sub.add_parser(name, help=line)
        if commands is None or name in commands:
            importlib.import_module(f"gpuwatch.cli.{module}").register(command)
    return parser


def parse(parser: argparse.ArgumentParser, args_list: list[str]) -> argparse.Namespace:
    """``args_list`` parsed, a command's positionals allowed after its options
    (``limits set --admin URL chat.max_inflight=4``): plain argparse takes every positional at
    its first chance and calls the later ones unrecognized. A command with subcommands of its
    own (``plan``) cannot be parsed intermixed, and is parsed the usual way."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command: argparse.ArgumentParser | None
    command = commands.choices.get(args_list[0]) if args_list else None
    if command is None or any(
        a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in command._actions
    ):
        return parser.parse_args(args_list)
    args: argparse.Namespace = command.parse_intermixed_args(args_list[1:])
    args.command = args_list[0]
    return args


def prog(args: argparse.Namespace) -> str:
    """``gpuwatch``, ``gpuwatch record``, ``gpuwatch plan kv``: who says the failure."""
    words = [args.command, getattr(args, "plan_command", None)]
    return " ".join(["gpuwatch", *(w for w in words if w and w != "top")])


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `gpuwatch` alone, or with dashboard options only, is the dashboard.
    if not args_list or (
        args_list[0] not in COMMANDS and args_list[0] not in ("-h", "--help", "--version")
    ):
        args_list.insert(0, "top")
    args = parse(build_parser(args_list[:1]), args_list)
    try:
        code: int = args.func(args)
        return code
    except GpuwatchError as exc:
        kind = "config error: " if isinstance(exc, ConfigError) else ""
        return fail(prog(args), f"{kind}{exc}", exc.exit_code)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Output piped into `head` that closed early: not an error worth a traceback.
        sys.stderr.close()
        return EXIT_OK
