"""The code before a change, beside the code after it, in one benchmark run.

``checkout(rev)`` adds a detached ``git worktree`` of ``rev`` under a temporary folder and gives
its root, to put on ``PYTHONPATH`` of the process that runs the old code (the benchmark's own
driver stays this checkout's, so both sides are measured the same way). ``BEFORE`` is main as
it was before issue 19's dashboard and gate work (points 1, 2, 4).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
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
