"""``gpuwatch plan kv`` as a user runs it: a real process, its table, JSON, explanation and
exit codes; ``--gpu N`` through a fake GPU source over real HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.functional.servers import ThreadedServer
from tests.helpers import refusing_port
from tests.unit.test_plan_kv import DEEPSEEK_V2_LITE, GEMMA2_9B, LLAMA3_8B, MISTRAL_7B, OPT_125M

H100_TOTAL = 81_559 * 2**20  # what NVML says an H100 80GB HBM3 has


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", "plan", "kv", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def write(tmp_path: Path, cfg: dict[str, Any]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


async def _gpus(_: web.Request) -> web.Response:
    gpu = {"name": "NVIDIA H100 80GB HBM3", "memory_total": H100_TOTAL, "memory_used": 0}
    return web.json_response({"gpus": [gpu]})


@pytest.fixture(scope="module")
def gpu_server() -> Iterator[ThreadedServer]:
    with ThreadedServer({"/sim/gpu": _gpus}) as srv:
        yield srv


def test_table_for_llama3_8b(tmp_path: Path) -> None:
    proc = run("--config", write(tmp_path, LLAMA3_8B), "--gpu-memory", "81559MiB")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "KV bytes per token  131,072 B (128 KiB)" in out
    assert "KV tokens that fit  456,496" in out
    assert "p50 sessions        713" in out


def test_float32_gemma2_and_mla_from_the_command_line(tmp_path: Path) -> None:
    proc = run("--config", write(tmp_path, GEMMA2_9B), "--gpu-memory", "81559MiB")
    assert proc.returncode == 0, proc.stderr
    assert "KV bytes per token  344,064 B (336 KiB)" in proc.stdout
    assert "runs in bfloat16, vLLM's downcast" in proc.stdout
    proc = run("--config", write(tmp_path, GEMMA2_9B), "--gpu-memory", "80", "--no-bf16")
    assert "KV bytes per token  688,128 B" in proc.stdout  # float32 kept: no bf16, no fp16
    proc = run("--config", write(tmp_path, DEEPSEEK_V2_LITE), "--gpu-memory", "81559MiB", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["kv_lora_rank"], data["kv_bytes_per_token"], data["dtype"]) == (
        512,
        31_104,
        "bfloat16",
    )


def test_json_for_scripts(tmp_path: Path) -> None:
    proc = run(
        "--config",
        write(tmp_path, MISTRAL_7B),
        "--gpu-memory",
        "24",
        "--prompt-tokens",
        "6000",
        "--output-tokens",
        "2000",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["kv_bytes_per_token"], data["kv_blocks"], data["kv_tokens"]) == (
        131_072,
        3_640,
        58_240,
    )
    assert data["sliding_window"] == 4096 and data["sliding_layers"] == 32
    assert data["sessions"]["p50"] == {
        "prompt_tokens": 6000,
        "output_tokens": 2000,
        "tokens": 8000,
        "blocks": 500,
        "sliding_blocks": 257,
        "sessions": 14,
    }
    assert data["weight_bytes"] == 14_483_464_192 and data["warnings"] == []


def test_explain_and_no_sliding_window(tmp_path: Path) -> None:
    cfg = write(tmp_path, MISTRAL_7B)
    common = ("--config", cfg, "--gpu-memory", "24GiB", "--prompt-tokens", "6000")
    proc = run(*common, "--output-tokens", "2000", "--explain", "--no-sliding-window")
    assert proc.returncode == 0, proc.stderr
    assert "4,096 ignored (--no-sliding-window)" in proc.stdout
    assert "floor(3,640 blocks / 500 blocks per session) = 7" in proc.stdout


def test_the_fixture_figure_from_the_command_line(tmp_path: Path) -> None:
    # vllm-1.prom's num_gpu_blocks 7281 x 16: a 4 GiB CPU KV space, no weights inside it
    proc = run(
        "--config",
        write(tmp_path, OPT_125M),
        "--gpu-memory",
        "4294967296B",
        "--gpu-memory-utilization",
        "1",
        "--weights",
        "0",
        "--reserve",
        "0",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["kv_blocks"], data["kv_tokens"]) == (7_281, 116_496)


def test_a_profile_by_name() -> None:
    proc = run("--profile", "h100-llama3-70b-fp8", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    # 80 GB x 0.95 = 76,000,000,000 - 72,700,000,000 - 536,870,912 (0.5 GiB) = 2,763,129,088 B
    # / (16 x 163,840 = 2,621,440) = 1,054.05 -> 1,054 blocks = 16,864 tokens
    assert (data["kv_bytes_per_token"], data["kv_blocks"], data["kv_tokens"]) == (
        163_840,
        1_054,
        16_864,
    )


def test_gpu_memory_read_through_nvml(tmp_path: Path, gpu_server: ThreadedServer) -> None:
    fake = gpu_server.url("/sim/gpu")
    cfg = write(tmp_path, LLAMA3_8B)
    proc = run("--config", cfg, "--gpu", "0", "--fake-gpu-from", fake, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["gpu_memory_bytes"] == H100_TOTAL and data["kv_tokens"] == 456_496
    assert data["gpu_memory_from"] == "NVML GPU 0: NVIDIA H100 80GB HBM3"
    proc = run("--config", cfg, "--gpu", "3", "--fake-gpu-from", fake)
    assert proc.returncode == 1
    assert one_line(proc.stderr) == "gpuwatch plan kv: --gpu 3: no such GPU (1 found)"
    with refusing_port() as port:
        proc = run("--config", cfg, "--gpu", "0", "--fake-gpu-from", f"http://127.0.0.1:{port}/")
    assert proc.returncode == 1 and one_line(proc.stderr).startswith("gpuwatch plan kv: --gpu 0:")
    proc = run("--config", cfg, "--gpu", "0", "--fake-gpu-from", "http://127.0.0.1:x/")
    assert proc.returncode == 1 and one_line(proc.stderr).startswith("gpuwatch plan kv: --gpu 0:")


def test_gpu_without_a_driver_is_one_line(tmp_path: Path) -> None:
    proc = run("--config", write(tmp_path, LLAMA3_8B), "--gpu", "0")
    if proc.returncode == 0:  # a machine with a GPU: its total was read
        assert "NVML GPU 0:" in proc.stdout
        return
    assert proc.returncode == 1
    assert one_line(proc.stderr).startswith("gpuwatch plan kv: --gpu 0: NVML unavailable")


@pytest.mark.parametrize(
    ("cfg", "args", "message"),
    [
        (
            {k: v for k, v in LLAMA3_8B.items() if k != "num_hidden_layers"},
            ("--gpu-memory", "80"),
            "gpuwatch plan kv: config.json: missing num_hidden_layers (the number of layers)",
        ),
        (
            OPT_125M,
            ("--gpu-memory", "80"),
            "gpuwatch plan kv: --weights is needed: config.json lacks hidden_size, "
            "intermediate_size or vocab_size to estimate them",
        ),
        (LLAMA3_8B, (), "gpuwatch plan kv: give the GPU's memory: --gpu-memory SIZE or --gpu N"),
        (
            LLAMA3_8B,
            ("--gpu-memory", "80", "--prompt-tokens", "0"),
            "gpuwatch plan kv: --prompt-tokens: must be at least 1, got 0",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, cfg: dict[str, Any], args: tuple[str, ...], message: str
) -> None:
    proc = run("--config", write(tmp_path, cfg), *args)
    assert proc.returncode == 2
    assert one_line(proc.stderr) == message


def test_usage_errors() -> None:
    assert run("--profile", "nope").returncode == 2
    proc = run("--profile", "rtx4090-llama3-8b-awq", "--gpu-memory", "lots")
    assert proc.returncode == 2 and "not a size: 'lots'" in proc.stderr
    assert run("--gpu-memory", "80").returncode == 2  # no model
    proc = run("--profile", "rtx4090-llama3-8b-awq", "--fake-gpu-from", "http://127.0.0.1:1/")
    assert proc.returncode == 2
    assert one_line(proc.stderr) == "gpuwatch plan kv: --fake-gpu-from needs --gpu N"
