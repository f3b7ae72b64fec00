"""The gate's TOML config: hostile files stop the gate with one line naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.config import ConfigError
from gpuwatch.gate.config import load_gate_config


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("x = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deep"),
        ("[lanes.chat]\nmax_queue = 1" + "0" * 5000 + "\n", "invalid TOML"),
        (
            "[lanes.chat]\nmax_queue = 10000000000\n",
            "key 'lanes.chat.max_queue' must be <= 1000000",
        ),
        (
            '[lanes.chat]\nmax_body = "4 lots"\n',
            "key 'lanes.chat.max_body' must be bytes or a size",
        ),
        ("[lanes.chat]\nmax_body = 0\n", "must be between 1 byte and 1GiB"),
        ("client_header_timeout_s = -1\n", "key 'client_header_timeout_s' must be a number"),
        ("default_output_tokens = 0\n", "key 'default_output_tokens' must be an integer"),
        ('default_output_tokens = "512"\n', "key 'default_output_tokens' must be an integer"),
        (
            "[lanes.chat]\nmax_inflight_tokens = 0\n",
            "key 'lanes.chat.max_inflight_tokens' must be >= 1",
        ),
        ("slo = 2\n", "'slo' must be a table"),
        ("[slo]\nttft_p99_s = 0\n", "key 'slo.ttft_p99_s' must be a number of seconds"),
        ("[slo]\nkv_usage_high = 1.5\n", "key 'slo.kv_usage_high' must be a share in (0, 1]"),
        ("[slo]\nkv_usage_high = true\n", "key 'slo.kv_usage_high' must be a share"),
        ("[slo]\nitl = 1\n", "unknown key 'slo.itl'"),
        ("[lanes.chat]\nmax_queue_wait_s = -1\n", "key 'lanes.chat.max_queue_wait_s' must be >= 0"),
        (
            "[lanes.chat]\nupstream_idle_timeout_s = 0\n",
            "key 'lanes.chat.upstream_idle_timeout_s' must be > 0",
        ),
        (
            "[lanes.chat]\nupstream_first_byte_timeout_s = 'soon'\n",
            "key 'lanes.chat.upstream_first_byte_timeout_s' must be a number",
        ),
    ],
)
def test_bad_config_is_one_line_naming_the_file(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_gate_config(path)
    assert str(path) in str(info.value) and reason in str(info.value)
    assert "\n" not in str(info.value)


def test_sizes_and_timeouts(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(
        'client_body_timeout_s = 5\n[lanes.chat]\nmax_body = "2MiB"\n[lanes.image]\nmax_body = 1024\n'
    )
    config = load_gate_config(path)
    lanes = {lane.name: lane for lane in config.lanes}
    assert lanes["chat"].max_body == 2 * 1024 * 1024 and lanes["image"].max_body == 1024
    assert lanes["embed"].max_body == 4 * 1024 * 1024  # untouched lanes keep their default
    assert config.client_body_timeout_s == 5.0


def test_token_budget_and_default_output(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text("default_output_tokens = 256\n[lanes.chat]\nmax_inflight_tokens = 96000\n")
    config = load_gate_config(path)
    lanes = {lane.name: lane for lane in config.lanes}
    assert config.default_output_tokens == 256
    assert lanes["chat"].limits.max_inflight_tokens == 96_000
    assert lanes["embed"].limits.max_inflight_tokens is None
    assert load_gate_config(None).default_output_tokens == 512


def test_the_slo_the_gate_holds(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(
        "[slo]\nttft_p99_s = 1.5\nkv_usage_high = 0.9\n[lanes.chat]\nmax_queue_wait_s = 0\n"
    )
    config = load_gate_config(path)
    assert config.slo_ttft_s == 1.5 and config.kv_usage_high == 0.9
    assert {lane.name: lane for lane in config.lanes}["chat"].limits.max_queue_wait_s == 0.0
    plain = load_gate_config(None)
    assert plain.slo_ttft_s is None and plain.kv_usage_high == 0.95
    assert plain.slo_lanes == ("chat",)  # images and embeddings have no first token to bound
