from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("GPUWATCH_SHARED", ROOT.parent / "shared"))
FIXTURES = SHARED / "fixtures" / "metrics"


def fixture_text(name: str) -> str:
    path = FIXTURES / name
    if not path.exists():
        pytest.fail(f"fixture {path} missing: set GPUWATCH_SHARED to the shared/ folder")
    return path.read_text()
