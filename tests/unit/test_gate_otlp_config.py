"""The gate's ``[otlp]`` table and ``--otlp-endpoint``: off by default, every key checked, a
hostile value one line naming the key; gRPC without its extra one clear line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuwatch.cli.main import main
from gpuwatch.config import ConfigError
from gpuwatch.gate.config import GateConfig, load_gate_config
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.otlp import GRPC_MISSING, Exporting, OtlpConfig, OtlpError, signal_url


def test_off_by_default(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text("extra_paths = []\n")
    assert not load_gate_config(path).otlp.enabled
    assert not GateConfig(DEFAULT_LANES).otlp.enabled


def test_every_key_read(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(
        '[otlp]\nendpoint = "http://collector:4318/"\nprotocol = "grpc"\n'
        "schedule_delay_s = 0.5\nmax_queue = 100\ntimeout_s = 2\nmetrics_interval_s = 15\n"
        "sample_ratio = 0.25\n"
    )
    assert load_gate_config(path).otlp == OtlpConfig(
        "http://collector:4318", "grpc", 0.5, 100, 2.0, 15.0, 0.25
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("otlp = 1\n", "'otlp' must be a table"),
        ('[otlp]\nendpoint = "collector:4318"\n', "key 'otlp.endpoint' must be an http://"),
        ('[otlp]\nendpoint = "ftp://c"\n', "key 'otlp.endpoint' must be an http://"),
        ('[otlp]\nendpoint = "http://c:99999"\n', "key 'otlp.endpoint' not a URL"),
        ('[otlp]\nendpoint = "http://c/?a=1"\n', "key 'otlp.endpoint' must have no query"),
        ("[otlp]\nendpoint = 4318\n", "key 'otlp.endpoint' must be a URL string"),
        ('[otlp]\nprotocol = "zipkin"\n', "key 'otlp.protocol' must be one of"),
        ("[otlp]\nmax_queue = 1.5\n", "key 'otlp.max_queue' must be an integer"),
        ("[otlp]\nmax_queue = 10000000\n", "key 'otlp.max_queue' must be an integer in"),
        ("[otlp]\ntimeout_s = true\n", "key 'otlp.timeout_s' must be a number"),
        ("[otlp]\nschedule_delay_s = 0\n", "key 'otlp.schedule_delay_s' must be a number"),
        ("[otlp]\nheaders = {}\n", "unknown key 'otlp.headers'"),
        ("[otlp]\nsample_ratio = 1.5\n", "key 'otlp.sample_ratio' must be a number in [0, 1]"),
    ],
)
def test_hostile_values_refused_naming_the_key(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_gate_config(path)
    assert reason in str(info.value) and str(path) in str(info.value)


def test_signal_urls_from_either_form() -> None:
    for given in ("http://c:4318", "http://c:4318/", "http://c:4318/v1/traces"):
        assert signal_url(given, "metrics") == "http://c:4318/v1/metrics"
    assert signal_url("https://c/otlp", "traces") == "https://c/otlp/v1/traces"


@pytest.mark.parametrize("command", [["gate", "--upstream", "http://127.0.0.1:1"], ["sim"]])
def test_a_bad_flag_is_a_usage_error(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([*command, "--otlp-endpoint", "collector:4318"])
    assert info.value.code == 2
    assert "argument --otlp-endpoint: must be an http://" in capsys.readouterr().err


GRPC_EXPORTER = "opentelemetry.exporter.otlp.proto.grpc"


def test_grpc_without_its_extra_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # The dev install has the extra (tests/functional/test_gate_otel.py exports over gRPC):
    # a None in sys.modules makes its import fail as it does where it is not installed.
    for module in ("", ".trace_exporter", ".metric_exporter"):
        monkeypatch.setitem(sys.modules, GRPC_EXPORTER + module, None)
    with pytest.raises(OtlpError) as info:
        Exporting(OtlpConfig("http://127.0.0.1:4317", protocol="grpc"), "t")
    assert str(info.value) == GRPC_MISSING and "\n" not in GRPC_MISSING
