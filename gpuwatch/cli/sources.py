"""What a node's readers take on the command line, shared by ``top``, ``demo``, ``record``,
``watch``, ``snapshot`` and ``plan``: the config and the SLO, the endpoints and the gate to poll,
the GPUs; and the settings they resolve to (config file < command line)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwatch import config
from gpuwatch.admintoken import read_token
from gpuwatch.cli.common import TOKEN_HELP, positive_float
from gpuwatch.monitor.health import SIGNALS

if TYPE_CHECKING:
    from gpuwatch.sources.nvml import NvmlReader

PROBE_PORTS = (8000, 30000, 8080, 3000, 9000)


def add_config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", type=Path, metavar="FILE", help=f"config file (default {config.default_path()})"
    )


def add_judging_args(p: argparse.ArgumentParser) -> None:
    """The config file and the SLO: what everything that shows the badge takes."""
    add_config_arg(p)
    p.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=", ".join(SIGNALS) + " (0 = off)",
    )


def add_dashboard_args(p: argparse.ArgumentParser) -> None:
    """The options the dashboard and the demo share."""
    add_judging_args(p)
    p.add_argument("--theme", help="gpuwatch-dark (default), gpuwatch-light, high-contrast, ansi")
    p.add_argument("--read-only", action="store_true", default=None, help="refuse every change")
    p.add_argument(
        "--slow-link",
        action="store_true",
        default=None,
        help="for a weak SSH link: charts every 10 s, no animation",
    )


def add_source_args(p: argparse.ArgumentParser, admin_help: str) -> None:
    """What the dashboard and ``watch`` poll: endpoints, a gate, GPUs, and how often."""
    p.add_argument("--metrics", action="append", metavar="URL", help="a /metrics URL (repeatable)")
    p.add_argument("--admin", metavar="URL", help=admin_help)
    p.add_argument("--admin-token-file", type=Path, metavar="FILE", help=TOKEN_HELP)
    p.add_argument("--interval", type=positive_float, metavar="S", help="poll interval (1 s)")
    p.add_argument("--no-gpu", action="store_true", default=None, help="skip NVML")
    p.add_argument("--fake-gpu-from", metavar="URL", help="GPUs from a simulator's /sim/gpu")


def source_settings(args: argparse.Namespace) -> tuple[config.Settings, str | None]:
    """Config file + command line for what is polled, and the admin token; ValueError."""
    settings = dashboard_settings(args)
    config.apply_cli(
        settings, {"metrics": args.metrics, "no_gpu": args.no_gpu, "admin": args.admin}
    )
    return settings, read_token(args.admin_token_file)


def parse_slo_args(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in SIGNALS:
            raise ValueError(f"--slo {item!r}: expected one of {', '.join(SIGNALS)} =VALUE")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"--slo {item!r}: {raw!r} is not a number") from None
        out[key] = config.slo_value(key, value)
    return out


def dashboard_settings(args: argparse.Namespace) -> config.Settings:
    """Config file + command line for the dashboard; ValueError with the reason."""
    settings = config.load(args.config)
    slo = {f"slo.{key}": value for key, value in parse_slo_args(args.slo).items()}
    screen = {
        "theme": getattr(args, "theme", None),
        "read_only": getattr(args, "read_only", None),
        "slow_link": getattr(args, "slow_link", None),
    }
    return config.apply_cli(settings, {**screen, **slo})


async def probe_local(ports: Sequence[int] = PROBE_PORTS) -> list[str]:
    """The localhost /metrics endpoints on ``ports`` that answer with serving metrics."""
    # httpx and the scraper load when a command polls, never for `gpuwatch --help`.
    from gpuwatch.httpclient import async_client
    from gpuwatch.sources.scrape import scrape

    urls = [f"http://127.0.0.1:{port}/metrics" for port in ports]
    async with async_client(connect_timeout_s=0.3, timeout_s=1.0) as client:
        results = await asyncio.gather(*(scrape(client, url, total_timeout_s=1.0) for url in urls))
    return [r.source for r in results if not r.error]


def gpu_reader(fake_gpu_from: str | None, no_gpu: bool) -> NvmlReader | None:
    """NVML, the GPUs of a simulator (``--fake-gpu-from``), or None (``--no-gpu``)."""
    return None if no_gpu and not fake_gpu_from else nvml_reader(fake_gpu_from)


def nvml_reader(fake_gpu_from: str | None) -> NvmlReader:
    """NVML, or the GPUs of a simulator (``--fake-gpu-from``)."""
    # NVML and httpx load when a command reads GPUs, never for `gpuwatch --help`.
    from gpuwatch.sources.nvml import FakeNvml, NvmlReader, SimGpuSource

    if fake_gpu_from:
        return NvmlReader(FakeNvml(SimGpuSource(fake_gpu_from)))
    return NvmlReader()
