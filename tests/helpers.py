"""The one way tests wait: for a condition, with a deadline; never for a fixed time."""

from __future__ import annotations

import asyncio
import inspect
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

Condition = Callable[[], Any]


async def eventually(
    condition: Condition,
    timeout: float = 10.0,
    *,
    message: str | Callable[[], str] = "condition not met",
    pause: Callable[[], Awaitable[Any]] | None = None,
) -> Any:
    """Poll ``condition`` (sync or async) until it is truthy; return that value.

    ``pause`` is awaited between polls (a Textual pilot's ``pause`` lets the screen refresh);
    by default a short asyncio sleep. Fails with ``message`` (or what it returns) at the deadline.
    """
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(
                f"after {timeout:g}s: {message() if callable(message) else message}"
            )
        await (pause() if pause is not None else asyncio.sleep(0.02))


def eventually_sync(
    condition: Condition,
    timeout: float = 10.0,
    *,
    message: str | Callable[[], str] = "condition not met",
) -> Any:
    """``eventually`` for code without an event loop (subprocesses, tmux)."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(
                f"after {timeout:g}s: {message() if callable(message) else message}"
            )
        time.sleep(0.05)


@contextmanager
def refusing_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections while the block runs: bound, never
    listening, so nothing else can take it meanwhile (no guess about which ports are free)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def stop_process(proc: subprocess.Popen[Any] | None) -> None:
    """A child ended, whatever state it is in: asked first, killed if it does not go."""
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
