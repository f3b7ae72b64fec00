"""``[[knobs]]`` in the config: typed and checked like the rest of it."""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[knobs]]\nstack = "ray"\nurl = "u"\nport = 1\n', "unknown key 'knobs#1.port'"),
        (
            '[[knobs]]\nstack = "ray"\nurl = "u"\n[[knobs]]\nstack = "tgi"\nurl = "u"\n',
            "key 'knobs#2.stack' must be one of ray, dynamo, litellm, sglang, vllm, got 'tgi'",
        ),
        ('[[knobs]]\nstack = "ray"\n', "key 'knobs#1.url' is required"),
        ('[[knobs]]\nurl = "u"\n', "key 'knobs#1.stack' is required"),
        ('[[knobs]]\nstack = "ray"\nurl = 8265\n', "key 'knobs#1.url' must be a string"),
        ('[[knobs]]\nstack = "ray"\nurl = "u"\ntimeout_s = 0\n', "must be above 0"),
        ('knobs = "ray"\n', "'knobs' must be an array of tables ([[knobs]])"),
        ("knobs = [1]\n", "'knobs' must be an array of tables"),
        ("knob_audit = 1\n", "key 'knob_audit' must be a string"),
    ],
)
def test_a_bad_knobs_entry_is_one_line_naming_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(config.ConfigError) as info:
        config.load(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)
