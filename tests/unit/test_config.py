from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch import config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_when_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config.default_path() == tmp_path / "gpuwatch" / "config.toml"
    settings = config.load()
    assert settings.scrape.timeout_s == 3.0
    assert settings.scrape.connect_timeout_s == 1.0
    assert settings.scrape.max_bytes == 16 * 1024 * 1024


def test_precedence_cli_over_file_over_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, 'metrics = ["http://a/metrics"]\n[scrape]\ntimeout_s = 5\n')
    settings = config.load(path)
    assert settings.scrape.timeout_s == 5
    assert settings.scrape.connect_timeout_s == 1.0
    config.apply_cli(settings, {"scrape.timeout_s": 9.0, "metrics": None})
    assert settings.scrape.timeout_s == 9.0
    assert settings.metrics == ["http://a/metrics"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus = 1\n", "unknown key 'bogus'"),
        ("[scrape]\nfoo = 1\n", "unknown key 'scrape.foo'"),
        ('[scrape]\ntimeout_s = "fast"\n', "key 'scrape.timeout_s' must be a number"),
        ("no_gpu = 1\n", "key 'no_gpu' must be true or false"),
        ("[scrape]\nmax_bytes = true\n", "key 'scrape.max_bytes' must be an integer"),
        ("metrics = [1]\n", "key 'metrics' must be a list of str"),
        ("scrape = 3\n", "'scrape' must be a table"),
        ("x = \n", "invalid TOML"),
        ("[scrape]\nmax_engines = 0\n", "key 'scrape.max_engines' must be above 0"),
        ("interval_s = -1\n", "key 'interval_s' must be above 0"),
        ("[slo]\nttft_p99_s = nan\n", "key 'slo.ttft_p99_s' must be a finite number"),
        ("[slo]\ngoodput_min = 99\n", "key 'slo.goodput_min' must be at most 1"),
        ("[slo]\npreemptions_per_min = -1\n", "must be at least 0"),
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
def test_bad_config_is_one_line_naming_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(config.ConfigError) as info:
        config.load(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_slo_table_is_typed_and_zero_switches_a_signal_off(tmp_path: Path) -> None:
    settings = config.load(write(tmp_path, "[slo]\nttft_p99_s = 1\npreemptions_per_min = 0\n"))
    assert settings.slo.ttft_p99_s == 1.0 and isinstance(settings.slo.ttft_p99_s, float)
    thresholds = settings.slo.thresholds()
    assert thresholds["ttft_p99_s"] == 1.0
    assert thresholds["preemptions_per_min"] is None
    assert thresholds["kv_usage_high"] == 0.95  # the default, written once on the field


def test_every_slo_key_is_a_signal_the_badge_knows() -> None:
    from gpuwatch.config import Slo
    from gpuwatch.monitor.health import SIGNALS

    assert set(Slo().thresholds()) == set(SIGNALS)


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("ttft_p99_s=nan", "finite"),
        ("goodput_min=99", "at most 1"),
        ("kv_usage_high=-1", "least 0"),
    ],
)
def test_slo_on_the_command_line_is_checked_like_the_file(arg: str, message: str) -> None:
    """Regression: a NaN threshold hid every other signal (the badge read OK), and 99 meant as
    99% made every miss an overload."""
    from gpuwatch.cli.sources import parse_slo_args

    with pytest.raises(ValueError, match=message):
        parse_slo_args([arg])
    assert parse_slo_args(["goodput_min=0.95"]) == {"goodput_min": 0.95}


def test_prometheus_and_gates_tables_are_typed(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[prometheus]\nurl = "http://p:9090"\nnode_label = "host"\n\n'
        '[gates."10.0.*:9000"]\nadmin = "http://{instance}"\ntoken_file = "/t"\n\n'
        '[gates."*"]\nadmin = "http://gw"\n'
    )
    settings = config.load(path)
    assert settings.prometheus.url == "http://p:9090" and settings.prometheus.node_label == "host"
    assert list(settings.gates) == ["10.0.*:9000", "*"]  # file order: the first match wins
    assert settings.gates["10.0.*:9000"] == config.GateTarget("http://{instance}", "/t")
    for bad, message in (
        ('[gates."a"]\nadmn = "x"\n', """unknown key 'gates."a".admn'"""),
        ('[gates."a"]\nadmin = 3\n', """key 'gates."a".admin' must be a string"""),
        ("gates = 1\n", "'gates' must be a table"),
        ('[prometheus]\ntoken = "s3cret"\n', "unknown key 'prometheus.token'"),
    ):
        path.write_text(bad)
        with pytest.raises(
            config.ConfigError, match=message.replace(".", r"\.").replace("*", r"\*")
        ):
            config.load(path)
