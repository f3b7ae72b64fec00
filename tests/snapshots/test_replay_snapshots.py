"""SVG snapshots of the replay: the seeded story (a spike, then the operator tightens the gate)
recorded through the real recorder and opened as ``gpuwatch replay`` shows it.

Update after an intended change: pytest tests/snapshots --snapshot-update
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import scenario
from tests.snapshots.test_dashboard_snapshots import utc  # noqa: F401  (times in UTC)


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_replay_at_the_tightening(snap_compare, size: tuple[int, int], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    app = scenario.replay_for(tmp_path / "story.db", 160, seconds=235, spike_at=100, tighten_at=150)
    try:
        assert snap_compare(app, terminal_size=size)
    finally:
        assert app.session.replay is not None
        app.session.replay.close()
