"""The notifier against real HTTP receivers: Alertmanager's v4 payload arrives, a failing
receiver is retried with backoff and then told in one line (and its return in another), and
a receiver that hangs never holds more than the bounded queue."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

from gpuwatch.alerts.notify import QUEUE_SIZE, TRIES, Notifier
from gpuwatch.alerts.payload import Alert, webhook
from tests.functional.alertmanagerkit import alertmanager
from tests.functional.servers import ThreadedServer
from tests.helpers import eventually, refusing_port


def alert(ends_at: float | None = None) -> Alert:
    return Alert(
        {"alertname": "LLMTTFTErrorBudgetBurn", "severity": "critical", "long": "1h"},
        {"summary": "TTFT under 2s: the error budget burns 14.4x too fast over 1h and 5m."},
        starts_at=1_700_000_000.0,
        ends_at=ends_at,
    )


class Receiver:
    """Answers each POST with the next status of ``statuses`` (the last one repeats)."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.bodies: list[Any] = []
        self.tries = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.tries += 1
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        if status == 200:
            self.bodies.append(json.loads(await request.read()))
        return web.Response(status=status)


@asynccontextmanager
async def notifying(receiver: Receiver, lines: list[str]) -> AsyncIterator[Notifier]:
    """A notifier sending to ``receiver`` over real HTTP, its failures into ``lines``."""
    with ThreadedServer({"/hook": receiver.handle}) as server:
        notifier = Notifier([server.url("/hook")], lines.append, backoff_s=0.01)
        task = asyncio.create_task(notifier.run())
        try:
            yield notifier
        finally:
            task.cancel()


async def test_the_webhook_gets_alertmanagers_payload_firing_then_resolved() -> None:
    receiver = Receiver(200)
    lines: list[str] = []
    async with notifying(receiver, lines) as notifier:
        notifier.send([alert()])
        notifier.send([alert(ends_at=1_700_000_300.0)])
        await eventually(lambda: len(receiver.bodies) == 2)
    firing, resolved = receiver.bodies
    assert firing["version"] == "4" and firing["status"] == "firing"
    assert firing["alerts"][0]["labels"]["alertname"] == "LLMTTFTErrorBudgetBurn"
    assert resolved["status"] == "resolved"
    assert resolved["alerts"][0]["endsAt"] == "2023-11-14T22:18:20Z"
    assert lines == []


async def test_a_receiver_that_fails_then_answers_is_retried_without_a_line() -> None:
    receiver = Receiver(500, 503, 200)
    lines: list[str] = []
    async with notifying(receiver, lines) as notifier:
        notifier.send([alert()])
        await eventually(lambda: receiver.bodies)
    assert receiver.tries == 3 and lines == []


async def test_a_failing_receiver_is_one_line_and_its_return_another() -> None:
    receiver = Receiver(500)
    lines: list[str] = []
    async with notifying(receiver, lines) as notifier:
        notifier.send([alert()])
        notifier.send([alert()])
        await eventually(lambda: receiver.tries == 2 * TRIES)
        await notifier.flush()
        assert len(lines) == 1, lines  # two notifications lost, one line
        assert "failed 4 tries: HTTP 500" in lines[0]
        assert notifier.receivers[0].url in lines[0]
        receiver.statuses = [200]
        notifier.send([alert()])
        await eventually(lambda: len(lines) == 2)
    assert "answers again" in lines[1]


async def test_a_dead_receiver_is_one_line_naming_why() -> None:
    lines: list[str] = []
    with refusing_port() as port:
        notifier = Notifier([f"http://127.0.0.1:{port}/hook"], lines.append, backoff_s=0.01)
        task = asyncio.create_task(notifier.run())
        notifier.send([alert()])
        await eventually(lambda: lines)
        task.cancel()
    assert "ConnectError" in lines[0] and "1 alert(s) not delivered" in lines[0]


async def test_a_hanging_receiver_holds_no_more_than_the_queue() -> None:
    got: list[int] = []

    async def hang(request: web.Request) -> web.Response:
        got.append(1)
        await asyncio.sleep(30)
        return web.Response(status=200)

    with ThreadedServer({"/hook": hang}) as server:
        notifier = Notifier([server.url("/hook")], lambda _: None, timeout_s=30)
        task = asyncio.create_task(notifier.run())
        for _ in range(QUEUE_SIZE * 3):
            notifier.send([alert()])
            await asyncio.sleep(0)
        await eventually(lambda: got)
        (r,) = notifier.receivers
        assert r.queue.qsize() <= QUEUE_SIZE
        assert r.dropped >= QUEUE_SIZE * 3 - QUEUE_SIZE - 1
        task.cancel()


async def test_the_webhook_payload_has_what_alertmanagers_own_has(tmp_path: Path) -> None:
    """Alertmanager itself, given our alert on its API, sends its receivers its own payload:
    ours has the same fields, the same version, the same fields per alert."""
    receiver = Receiver(200)
    lines: list[str] = []
    hook = ThreadedServer({"/hook": receiver.handle})
    with hook as server, alertmanager(tmp_path, webhook=server.url("/hook")) as am:
        notifier = Notifier([f"{am.url}/api/v2/alerts"], lines.append, backoff_s=0.01)
        task = asyncio.create_task(notifier.run())
        try:
            notifier.send([alert()])
            await eventually(lambda: receiver.bodies, 30, message="alertmanager sent nothing")
        finally:
            task.cancel()
    assert lines == []
    theirs, mine = receiver.bodies[0], webhook([alert()])
    assert theirs["version"] == mine["version"] == "4"
    assert set(theirs) == set(mine)
    assert set(theirs["alerts"][0]) == set(mine["alerts"][0])
    assert theirs["alerts"][0]["labels"] == mine["alerts"][0]["labels"]
    assert theirs["groupLabels"] == mine["groupLabels"] == {"alertname": "LLMTTFTErrorBudgetBurn"}
