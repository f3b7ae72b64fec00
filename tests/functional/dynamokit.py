"""A real NVIDIA Dynamo frontend on CPU: ``python -m dynamo.frontend`` with one
``python -m dynamo.mocker`` worker (ai-dynamo 1.6.1, in a venv of its own made by
scripts/dynamo-venv.sh), discovering each other through a directory (``--discovery-backend
file``), requests over TCP, events over ZMQ: no etcd, no NATS, no GPU, no model weights (the
mocker only needs a tokenizer; a word-level one is written here)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import eventually_sync, stop_process

ENV_PYTHON = "GPUWATCH_DYNAMO_PYTHON"
DEFAULT_VENV = Path.home() / ".cache" / "gpuwatch" / "dynamo-venv"
MODEL = "tiny"
PLANES = ["--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq"]


def dynamo_python() -> str:
    """The interpreter that has ai-dynamo, or a skip saying how to make one."""
    python = os.environ.get(ENV_PYTHON) or str(DEFAULT_VENV / "bin" / "python")
    if not Path(python).exists():
        pytest.skip(f"no Dynamo venv at {python}: run scripts/dynamo-venv.sh (or set {ENV_PYTHON})")
    return python


def write_tokenizer_model(path: Path) -> Path:
    """A model directory with a word-level tokenizer and a config: all the mocker reads."""
    path.mkdir(parents=True, exist_ok=True)
    words = ["hello", "world", "the", "a", "an", "is", "of", "to", "and", "user", "assistant"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    special = [
        {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for c, i in [("<unk>", 0), ("<s>", 1), ("</s>", 2)]
    ]  # fmt: skip
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }  # fmt: skip
    config = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "max_position_embeddings": 2048, "vocab_size": len(vocab), "bos_token_id": 1,
        "eos_token_id": 2, "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
        "num_key_value_heads": 4, "intermediate_size": 128, "torch_dtype": "float16",
    }  # fmt: skip
    tokenizer_config = {
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 2048,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}",
    }  # fmt: skip
    (path / "tokenizer.json").write_text(json.dumps(tokenizer))
    (path / "config.json").write_text(json.dumps(config))
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    (path / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    return path


def _free_port() -> int:
    # The frontend does not log the port it got for --http-port 0, so one is picked here; the
    # window between closing this socket and the frontend binding it is a few milliseconds.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def running_dynamo(root: Path, *frontend_args: str) -> Iterator[str]:
    """A frontend and a mocker worker serving ``tiny``; the frontend's URL once it lists the
    model's busy thresholds (the worker has been discovered). Both ended on the way out."""
    python = dynamo_python()
    model = write_tokenizer_model(root / "model")
    # The discovery directory and the model-card cache (under HOME) stay inside the test's dir.
    env = {**os.environ, "DYN_FILE_KV": str(root / "discovery"), "HOME": str(root / "home")}
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    logs = {name: root / f"{name}.log" for name in ("mocker", "frontend")}
    procs: list[subprocess.Popen[bytes]] = []

    def tail() -> str:
        return "\n".join(f"{n}:\n{p.read_text()[-1500:]}" for n, p in logs.items() if p.exists())

    try:
        commands = {
            "mocker": ["dynamo.mocker", "--model-path", str(model), "--model-name", MODEL],
            "frontend": ["dynamo.frontend", "--http-host", "127.0.0.1", "--http-port", str(port),
                         *frontend_args],
        }  # fmt: skip
        for name, command in commands.items():
            with open(logs[name], "wb") as out:
                argv = [python, "-m", *command, *PLANES]
                procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env))

        def discovered() -> bool:
            if any(p.poll() is not None for p in procs):
                pytest.fail(f"a Dynamo process exited:\n{tail()}")
            try:
                body = httpx.get(f"{url}/busy_threshold", timeout=1).json()
            except (httpx.HTTPError, ValueError):
                return False
            return any(row.get("model") == MODEL for row in body.get("thresholds", []))

        eventually_sync(discovered, 60, message=lambda: f"Dynamo did not start:\n{tail()}")
        yield url
    finally:
        for proc in reversed(procs):
            stop_process(proc)
