"""``gpuwatch plan kv`` and ``gpuwatch plan sweep``: capacity before users find its edge."""

from __future__ import annotations

import argparse

from gpuwatch.cli import plan_kv, plan_sweep


def register(plan: argparse.ArgumentParser) -> None:
    plan.description = "Find the boring zone before users do, and say where the limits should be."
    verbs = plan.add_subparsers(dest="plan_command", metavar="VERB", required=True)
    plan_kv.register(verbs)
    plan_sweep.register(verbs)
