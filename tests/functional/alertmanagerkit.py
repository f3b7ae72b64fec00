"""A real Alertmanager for tests: Debian's ``prometheus-alertmanager`` on a free port, with a
temporary storage folder and a receiver that sends nowhere (its defaults otherwise)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.functional.fleetkit import start_on_a_free_port
from tests.helpers import stop_process

BINARY = "prometheus-alertmanager"


class Alertmanager:
    def __init__(self, url: str) -> None:
        self.url = url

    def alerts(self, **labels: str) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds as active, of these labels."""
        r = httpx.get(f"{self.url}/api/v2/alerts", params={"active": "true"}, timeout=5)
        r.raise_for_status()
        return [a for a in r.json() if all(a["labels"].get(k) == v for k, v in labels.items())]


@contextmanager
def alertmanager(root: Path, webhook: str | None = None) -> Iterator[Alertmanager]:
    """With ``webhook``, Alertmanager sends its notifications there at once (no group wait)."""
    if shutil.which(BINARY) is None:
        pytest.skip("prometheus-alertmanager not installed (Debian; .ci/run installs it)")
    config = root / "alertmanager.yml"
    if webhook is None:
        config.write_text("route:\n  receiver: nowhere\nreceivers:\n  - name: nowhere\n")
    else:
        config.write_text(
            "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n"
            f"receivers:\n  - name: hook\n    webhook_configs:\n      - url: '{webhook}'\n"
        )
    proc, url = start_on_a_free_port(
        "alertmanager",
        lambda port: [
            BINARY, f"--config.file={config}", f"--storage.path={root / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no gossip: a single instance, no second port
        ],
    )  # fmt: skip
    try:
        yield Alertmanager(url)
    finally:
        stop_process(proc)
