"""A real Alertmanager for tests: Debian's ``prometheus-alertmanager`` on a free port, with a
temporary storage folder and a receiver that sends nowhere (its defaults otherwise)."""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import eventually_sync

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
def alertmanager(root: Path) -> Iterator[Alertmanager]:
    """Alertmanager cannot report a port it picked itself; try ports until one is ours."""
    if shutil.which(BINARY) is None:
        pytest.skip("prometheus-alertmanager not installed (Debian; .ci/run installs it)")
    config = root / "alertmanager.yml"
    config.write_text("route:\n  receiver: nowhere\nreceivers:\n  - name: nowhere\n")
    rng = random.Random()
    for _ in range(20):
        port = rng.randint(20000, 60000)
        proc = subprocess.Popen(
            [BINARY, f"--config.file={config}", f"--storage.path={root / 'am-data'}",
             f"--web.listen-address=127.0.0.1:{port}",
             "--cluster.listen-address="],  # no gossip: a single instance, no second port
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"

        def ready(url: str = url, proc: subprocess.Popen[str] = proc) -> bool:
            if proc.poll() is not None:
                return True
            try:
                return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        eventually_sync(ready, 30, message="alertmanager did not become ready")
        if proc.poll() is None:
            try:
                yield Alertmanager(url)
            finally:
                proc.terminate()
                proc.wait(10)
            return
        err = proc.stderr.read() if proc.stderr else ""
        assert "address already in use" in err, err[-2000:]
    pytest.fail("no free port for alertmanager after 20 tries")
