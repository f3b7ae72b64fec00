"""``gpuwatch rules``: the SLO's Prometheus rules (or a Kubernetes PrometheusRule) on stdout or
into a file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuwatch.cli.common import EXIT_FAILED, EXIT_OK, fail
from gpuwatch.cli.sources import add_config_arg


def register(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Recording rules for the SLIs, the SRE workbook's multi-window burn-rate alerts, and "
        "saturation and fault alerts, from the config's [slo] and [alerts] (docs/alerts.md). "
        "Check them with `promtool check rules`."
    )
    add_config_arg(p)
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write here (default stdout)")
    p.add_argument(
        "--kubernetes",
        metavar="NAME",
        help="write a prometheus-operator PrometheusRule object of this name instead",
    )
    p.add_argument("--namespace", default="monitoring", help="the PrometheusRule's namespace")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpuwatch import config
    from gpuwatch.alerts.rules import render

    settings = config.load(args.config)  # ConfigError: one line, exit 2 (cli/main.py)
    text = render(settings.slo, settings.alerts, args.kubernetes, args.namespace)
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as exc:
        return fail("gpuwatch rules", f"{args.output}: cannot write: {exc}", EXIT_FAILED)
    return EXIT_OK
