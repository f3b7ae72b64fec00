"""``gpuwatch rules``: the file passes ``promtool check rules``, and the repo's ``promtool test
rules`` files (tests/promtool/) fire and resolve every alert on synthetic series."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpuwatch.alerts.rules import BURN_ALERTS, Rules, render
from gpuwatch.alerts.sli import ttft_sources
from gpuwatch.alerts.slo import tiers, window_text
from gpuwatch.cli.main import main
from gpuwatch.config import AlertSettings, Slo

PROMTOOL_TESTS = Path(__file__).parent.parent / "promtool"

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian's prometheus)"
)


def gpuwatch_rules(tmp_path: Path, *args: str, config: str = "") -> Path:
    """``gpuwatch rules --config FILE -o rules.yml`` (the command's own entry point)."""
    cfg = tmp_path / "config.toml"
    cfg.write_text(config)
    out = tmp_path / "rules.yml"
    assert main(["rules", "--config", str(cfg), "-o", str(out), *args]) == 0
    return out


@needs_promtool
def test_the_generated_rules_pass_promtool_check(tmp_path: Path) -> None:
    rules = gpuwatch_rules(tmp_path, config='[alerts]\nrunbook_url = "https://runbooks/llm"\n')
    result = subprocess.run(
        ["promtool", "check", "rules", str(rules)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
@pytest.mark.parametrize("case", sorted(p.name for p in PROMTOOL_TESTS.glob("*_test.yml")))
def test_promtool_unit_tests_fire_and_resolve_each_alert(tmp_path: Path, case: str) -> None:
    gpuwatch_rules(tmp_path)  # the default [slo] and [alerts], as the test files expect
    shutil.copy(PROMTOOL_TESTS / case, tmp_path / case)
    result = subprocess.run(
        ["promtool", "test", "rules", case], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_in_the_promtool_tests() -> None:
    """Each alert the rules hold is named by a test file (so each is seen to fire)."""
    body = Rules(Slo()).groups()
    names = {r["alert"] for r in body["groups"][0]["rules"] if "alert" in r}
    tested = "".join(p.read_text() for p in PROMTOOL_TESTS.glob("*_test.yml"))
    assert names == {
        *BURN_ALERTS.values(), "LLMKVCacheHigh", "LLMPreemptions", "LLMEngineQueueGrowing",
        "LLMTargetDown", "LLMEngineStalled", "LLMGateRefusing",
    }  # fmt: skip
    assert [n for n in names if n not in tested] == []


def test_every_ttft_histogram_a_dialect_reads_has_its_sli_with_its_bound_stated() -> None:
    records = [r for r in Rules(Slo()).sli_records() if r["labels"]["sli"] == "ttft"]
    histograms = {r["labels"]["histogram"] for r in records}
    assert histograms == {s.histogram for s in ttft_sources()}
    assert {"vllm", "sglang", "trtllm", "lmdeploy", "dynamo", "ray"} <= {
        r["labels"]["dialect"] for r in records
    }
    # 2 s is not a bound of vLLM's TTFT buckets: the largest one under it is, and it is said.
    assert {r["labels"]["ttft_bound"] for r in records} == {"1"}
    burn = next(r for r in Rules(Slo()).burn_alerts() if r["alert"] == BURN_ALERTS["ttft"])
    assert "{{ $labels.ttft_bound }}s for this histogram" in burn["annotations"]["description"]


def test_the_windows_are_the_workbooks_and_scale_with_the_period() -> None:
    shown = [(t.severity, t.factor, window_text(t.long_s), window_text(t.short_s))
             for t in tiers(30 * 86400)]  # fmt: skip
    assert shown == [
        ("critical", 14.4, "1h", "5m"),
        ("critical", 6.0, "6h", "30m"),
        ("warning", 1.0, "3d", "6h"),
    ]
    fast = tiers(30 * 86400 / 60)[0]  # a period 60 times shorter: 1 minute and 5 seconds
    assert (window_text(fast.long_s), window_text(fast.short_s)) == ("1m", "5s")


def test_runbook_url_is_there_only_when_configured() -> None:
    with_url = Rules(Slo(), AlertSettings(runbook_url="https://wiki/llm")).burn_alerts()
    assert with_url[0]["annotations"]["runbook_url"] == "https://wiki/llm#llmttfterrorbudgetburn"
    assert "runbook_url" not in Rules(Slo()).burn_alerts()[0]["annotations"]


def test_a_switched_off_slo_has_no_rules() -> None:
    rules = Rules(Slo(ttft_p99_s=0, goodput_min=0, kv_usage_high=0)).groups()["groups"][0]
    names = {r.get("alert") or r["record"] for r in rules["rules"]}
    assert not names & {*BURN_ALERTS.values(), "LLMKVCacheHigh", "LLMGateRefusing"}
    assert not any("record" in r for r in rules["rules"])


def test_the_kubernetes_object_holds_the_same_groups() -> None:
    plain = render(Slo(), AlertSettings())
    k8s = render(Slo(), AlertSettings(), "llm-slo", "serving")
    assert 'kind: "PrometheusRule"' in k8s and 'namespace: "serving"' in k8s
    body = plain.split("\n", 1)[1]  # the groups, after the comment line
    indented = "".join(f"  {line}\n" for line in body.splitlines())
    assert "spec:\n" + indented in k8s


def test_the_watched_targets_can_be_scoped() -> None:
    rules = Rules(Slo(), AlertSettings(target_selector='job=~"vllm|gate"')).fault_alerts()
    (down,) = [r for r in rules if r["alert"] == "LLMTargetDown"]
    assert down["expr"] == 'up{job=~"vllm|gate"} == 0'


def test_an_unwritable_output_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.toml").write_text("")
    out = tmp_path / "no-such-folder" / "rules.yml"
    assert main(["rules", "--config", str(tmp_path / "config.toml"), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"gpuwatch rules: {out}: cannot write: ") and err.count("\n") == 1


def test_an_unknown_alerts_key_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.toml").write_text("[alerts]\nwebhook = 'http://x'\n")
    assert main(["rules", "--config", str(tmp_path / "config.toml")]) == 2
    assert "unknown key 'alerts.webhook'" in capsys.readouterr().err


def test_the_rules_go_to_stdout_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.toml").write_text("")
    assert main(["rules", "--config", str(tmp_path / "config.toml")]) == 0
    assert capsys.readouterr().out.startswith("# Generated by `gpuwatch rules`")
