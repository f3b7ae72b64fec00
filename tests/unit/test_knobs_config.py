"""``[[knobs]]`` in the config (its refusals are with the others' in test_config.py)."""

from __future__ import annotations

from pathlib import Path

from gpuwatch import config
from gpuwatch.config import KnobConfig


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_knobs_entries_are_read_in_order(tmp_path: Path) -> None:
    settings = config.load(
        write(
            tmp_path,
            'knob_audit = "/var/lib/gw/knobs.jsonl"\n'
            '[[knobs]]\nstack = "ray"\nurl = "http://127.0.0.1:8265"\n'
            '[[knobs]]\nstack = "litellm"\nurl = "http://p:4000"\n'
            'credential_file = "~/.litellm-key"\nengine = "http://h:8000/metrics"\n'
            "timeout_s = 5\n",
        )
    )
    assert settings.knobs == [
        KnobConfig("ray", "http://127.0.0.1:8265"),
        KnobConfig("litellm", "http://p:4000", "~/.litellm-key", "http://h:8000/metrics", 5.0),
    ]
    assert settings.knob_audit == "/var/lib/gw/knobs.jsonl"
    assert config.load(write(tmp_path, "")).knobs == []
