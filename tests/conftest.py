from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "metrics"


def fixture_text(name: str) -> str:
    path = FIXTURES / name
    if not path.exists():
        pytest.fail(f"fixture {path} missing")
    return path.read_text()
