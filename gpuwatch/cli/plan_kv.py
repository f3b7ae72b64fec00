"""``gpuwatch plan kv``."""

from __future__ import annotations

import argparse
from typing import Any

from gpuwatch.cli.common import fail


def register(sub: Any) -> None:
    p = sub.add_parser("kv", help="(being built)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return fail("gpuwatch plan kv", "not built yet")
