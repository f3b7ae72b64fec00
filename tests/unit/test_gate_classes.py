"""Classes and tenants from headers, and the [fairness] config."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.config import ConfigError
from gpuwatch.gate.classes import (
    FAIRNESS_HEADER,
    OBJECTIVE_HEADER,
    Fairness,
    Who,
    key_hash,
    parse_fairness,
)
from gpuwatch.gate.config import load_gate_config

FAIR = Fairness(objectives={"chat": "critical"}, names={"acme": "Acme"})


def test_mapped_objectives_only_and_plain_tenant_ids() -> None:
    assert FAIR.who({OBJECTIVE_HEADER: "chat", FAIRNESS_HEADER: "acme"}) == Who(
        "acme", "critical", 10
    )
    assert FAIR.who({OBJECTIVE_HEADER: "critical"}).klass == "standard"
    assert FAIR.who({}) == Who("-", "standard", 0)
    assert FAIR.shown("acme") == "Acme"


@pytest.mark.parametrize("hostile", ["a" * 65, "evil\u202eid", "x\ny", "💥", "a b"])
def test_odd_fairness_ids_become_bounded_hashes(hostile: str) -> None:
    tenant = FAIR.who({FAIRNESS_HEADER: hostile}).tenant
    assert tenant.startswith("id:") and len(tenant) == 19 and tenant.isascii()


def test_api_keys_win_over_the_fairness_header() -> None:
    fair = Fairness(api_keys=True, keys={key_hash("k1"): "sheddable"})
    who = fair.who({"Authorization": "Bearer k1", FAIRNESS_HEADER: "other"})
    assert who == Who(key_hash("k1"), "sheddable", -10)
    assert "k1" not in who.tenant.removeprefix("key:")  # a hash, not the key
    assert fair.who({FAIRNESS_HEADER: "other"}).tenant == "other"  # no key: the header
    # ... which cannot name a key's tenant (nor its class).
    forged = fair.who({FAIRNESS_HEADER: key_hash("k1")})
    assert forged.tenant != key_hash("k1") and forged.tenant.startswith("id:")
    assert forged.klass == "standard"


def test_config_file(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(
        '[fairness]\ndefault_class = "low"\n[fairness.classes]\nhigh = 5\nlow = -1\n'
        '[fairness.objectives]\nchat = "high"\n'
    )
    fair = load_gate_config(path).fairness
    assert fair.classes == {"high": 5, "low": -1}
    assert fair.who({OBJECTIVE_HEADER: "chat"}).priority == 5
    assert fair.who({}).sheddable


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"objectives": {"x": "gold"}}, "fairness.objectives.x' names no class"),
        ({"default_class": "gold"}, "fairness.default_class"),
        ({"classes": {"a": True}}, "fairness.classes.a' must be an integer"),
        ({"classes": {}}, "needs 1 to 16 classes"),
        ({"api_keys": "yes"}, "fairness.api_keys"),
        ({"names": {"x": "bad name"}}, "fairness.names.x"),
        ({"colour": 1}, "unknown key 'fairness.colour'"),
    ],
)
def test_config_errors_name_the_key(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse_fairness(Path("gate.toml"), data)


def test_tenant_limits_are_validated_bounded_and_audited_as_changes() -> None:
    from gpuwatch.gate.limits import Limits, LimitsError, apply_patch, changed, from_json

    base = Limits(1, False, {})
    after = apply_patch(base, {"tenants": {"acme": {"max_inflight": 2}}})
    assert changed(base, after).to_json() == {
        "tenants": {"acme": {"paused": False, "max_inflight": 2}}
    }
    assert from_json(after.to_json(), {}).tenants == after.tenants  # survives a restart
    cleared = apply_patch(after, {"tenants": {"acme": {"max_inflight": None}}})
    assert cleared.tenants == {}  # back at the defaults: no entry
    for bad, field in (
        ({"tenants": {"a b": {}}}, "tenants.a b"),
        ({"tenants": {"acme": {"max_inflight": -1}}}, "tenants.acme.max_inflight"),
        ({"tenants": {"acme": {"paused": 1}}}, "tenants.acme.paused"),
        ({"tenants": {"acme": 3}}, "tenants.acme"),
        ({"tenants": []}, "tenants"),
        ({"tenants": {f"t{i}": {"paused": True} for i in range(1025)}}, "tenants"),
    ):
        with pytest.raises(LimitsError) as caught:
            apply_patch(base, bad)
        assert caught.value.field == field


def test_the_new_header_names_first_and_the_old_ones_as_aliases() -> None:
    new, old = "x-llm-d-inference-objective", "x-gateway-inference-objective"
    tenant_new, tenant_old = "x-llm-d-inference-fairness-id", "x-gateway-inference-fairness-id"
    assert FAIR.who({new: "chat", tenant_new: "acme"}) == Who("acme", "critical", 10)
    assert FAIR.who({old: "chat", tenant_old: "acme"}) == Who("acme", "critical", 10)
    both = FAIR.who({new: "none", old: "chat", tenant_new: "bob", tenant_old: "acme"})
    assert both == Who("bob", "standard", 0)  # one value each: the new name's
    assert FAIR.who({new: "  ", old: "chat"}).klass == "critical"  # blank is absent
