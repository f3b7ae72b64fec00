"""The code before a change, beside the code after it, in one benchmark run.

``checkout(rev)`` adds a detached ``git worktree`` of ``rev`` under a temporary folder and gives
its root, to put on ``PYTHONPATH`` of the process that runs the old code (the benchmark's own
driver stays this checkout's, so both sides are measured the same way). ``BEFORE`` is main as
it was before issue 19's dashboard and gate work (points 1, 2, 4).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

BEFORE = "6f6b737"
REPO = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="gwbase-"))
    tree = tmp / "tree"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), rev], check=True
    )
    try:
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
            capture_output=True,
        )
        shutil.rmtree(tmp, ignore_errors=True)


def trees(stack: contextlib.ExitStack, description: str) -> dict[str, Path]:
    """``--baseline REV`` (default 8ebca5e) and ``--skip-before`` parsed: {"before": a checkout
    of REV (unless skipped), "after": this checkout}, the checkout removed with ``stack``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--baseline", default="8ebca5e")
    parser.add_argument("--skip-before", action="store_true")
    args = parser.parse_args()
    out = {} if args.skip_before else {"before": stack.enter_context(checkout(args.baseline))}
    out["after"] = REPO
    return out


def run_on(tree: Path, argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """``python argv...`` on the code of ``tree``: first on PYTHONPATH, and the working folder
    (``python -m`` and ``-c`` put the working folder first on sys.path)."""
    return subprocess.run(
        [sys.executable, *argv],
        env={**os.environ, "PYTHONPATH": str(tree), **env},
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
