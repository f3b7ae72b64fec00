"""``control.steering.Outbox``: the one owner of what a steering has not had answered yet (the
keys waiting out the coalescing window, the changes in flight), held by the gate's
``Steering`` and the knobs' ``KnobSteering`` alike."""

from __future__ import annotations

import asyncio

from gpuwatch.control.steering import Outbox
from tests.helpers import eventually
from tests.operatorview import RecordingOperator


def outbox(sent: list[list[str]]) -> Outbox[list[str]]:
    return Outbox(RecordingOperator(), "test", list, sent.append)


async def test_keys_within_the_window_are_sent_once_after_the_last() -> None:
    sent: list[list[str]] = []
    box = outbox(sent)
    for key in ("+", "+", "-"):
        box.pending.append(key)
        box.wait(0.05)
    assert not box.idle and sent == []
    await eventually(lambda: sent)
    assert sent == [["+", "+", "-"]] and box.pending == [] and box.idle


async def test_a_key_that_leaves_nothing_pending_starts_no_timer() -> None:
    sent: list[list[str]] = []
    box = outbox(sent)
    box.pending.append("+")
    box.wait(60)
    box.pending.clear()  # the next key took it back where it was shown
    box.wait(60)
    assert box.idle
    box.flush()
    assert sent == []  # nothing to send: send is not called


async def test_settle_sends_now_and_waits_for_what_is_in_flight() -> None:
    answered = asyncio.Event()
    box: Outbox[list[str]]

    def send(keys: list[str]) -> None:
        async def change() -> None:
            await asyncio.sleep(0)
            answered.set()

        box.inflight.spawn(change())

    box = Outbox(RecordingOperator(), "test", list, send)
    box.pending.append("+")
    box.wait(60)
    await box.settle()
    assert answered.is_set() and box.idle


async def test_close_drops_the_keys_and_stops_the_changes_in_flight() -> None:
    never = asyncio.Event()
    sent: list[list[str]] = []
    box = outbox(sent)

    async def change() -> None:
        await never.wait()

    box.inflight.spawn(change())
    box.pending.append("+")
    box.wait(0.01)
    box.close()
    assert box.pending == []
    await eventually(lambda: box.idle)  # the task in flight was cancelled, not finished
    assert sent == [] and not never.is_set()
