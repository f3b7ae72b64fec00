"""The Dynamo, LiteLLM, SGLang and vLLM knob adapters over real HTTP on 127.0.0.1, each against
a fake written from that stack's own handler (tests/functional/stackfakes), through the one
apply path: read, change and read back, bounds refused before sending, the stack's refusal as
one KnobError in its own words, a value moved behind our back refused with nothing written,
read-only sending nothing, hostile answers refused."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gpuwatch.control.guard import Guard, ReadOnlyError
from gpuwatch.control.knobs.apply import apply_changes, find
from gpuwatch.control.knobs.base import (
    Knob,
    KnobAdapter,
    KnobChange,
    KnobConflict,
    KnobEndpoint,
    KnobError,
    KnobValue,
)
from gpuwatch.control.knobs.registry import adapter_for
from gpuwatch.gate.audit import AuditLog
from tests.functional.stackfakes.common import StackFake
from tests.functional.stackfakes.dynamo import DynamoFake
from tests.functional.stackfakes.litellm import LiteLLMFake
from tests.functional.stackfakes.sglang import SGLangFake
from tests.functional.stackfakes.vllm import VLLMFake

MASTER = "sk-master-fake-0123456789"


def dynamo() -> StackFake:
    fake = DynamoFake()
    fake.add("llama-8b", active_decode_blocks_threshold=0.85, active_prefill_tokens_threshold=8192)
    fake.add("qwen-7b")
    return fake


def litellm() -> StackFake:
    fake = LiteLLMFake(master_key=MASTER)
    fake.add_model("dep-1", "llama-8b", rpm=100, tpm=50000, max_parallel_requests=8)
    fake.add_model("dep-cfg", "from-config", db_model=False, rpm=10)
    fake.add_key("hashed-aaa", "ci", rpm_limit=60)
    fake.add_key("hashed-bbb", None, tpm_limit=1000)
    fake.add_team("team-a", rpm_limit=500)
    return fake


@dataclass(frozen=True)
class Case:
    stack: str
    make: Callable[[], StackFake]
    target: str
    name: str
    new: KnobValue  # what the operator sets the knob to
    too_far: KnobValue  # outside the knob's bounds
    # Changes the knob's value on the server, behind gpuwatch's back.
    behind: Callable[[StackFake], None]
    credential: str | None = None

    def __str__(self) -> str:
        return self.stack


def _dynamo_behind(fake: StackFake) -> None:
    assert isinstance(fake, DynamoFake)
    fake.models["llama-8b"]["active_decode_blocks_threshold"] = 0.9


def _litellm_behind(fake: StackFake) -> None:
    assert isinstance(fake, LiteLLMFake)
    fake.deployments["dep-1"]["litellm_params"]["rpm"] = 250


def _sglang_behind(fake: StackFake) -> None:
    assert isinstance(fake, SGLangFake)
    fake.overrides["pp_max_micro_batch_size"] = 48


def _vllm_behind(fake: StackFake) -> None:
    assert isinstance(fake, VLLMFake)
    fake.paused = True


CASES = [
    Case("dynamo", dynamo, "llama-8b", "active_decode_blocks_threshold", 0.6, 1.5, _dynamo_behind),
    Case("litellm", litellm, "model:dep-1", "rpm", 40, -1, _litellm_behind, MASTER),
    Case("sglang", SGLangFake, "server", "pp_max_micro_batch_size", 16, 65, _sglang_behind),
    Case("vllm", VLLMFake, "server", "paused", True, 1, _vllm_behind),
]


@dataclass
class Running:
    case: Case
    fake: StackFake
    adapter: KnobAdapter

    async def knob(self, target: str | None = None, name: str | None = None) -> Knob:
        target = target or self.case.target
        name = name or self.case.name
        knobs = await self.adapter.read()
        found = [k for k in knobs if k.target == target and k.name == name]
        assert len(found) == 1, [k.label for k in knobs]
        return found[0]


@pytest.fixture(params=CASES, ids=str)
async def running(request: pytest.FixtureRequest) -> AsyncIterator[Running]:
    case: Case = request.param
    fake = case.make()
    url = await fake.start()
    adapter = adapter_for(KnobEndpoint(case.stack, url, case.credential))
    try:
        yield Running(case, fake, adapter)
    finally:
        await adapter.close()
        await fake.stop()


@pytest.fixture
def audit(tmp_path: Path) -> AuditLog:
    return AuditLog(tmp_path / "knobs-audit.jsonl")


async def test_a_knob_is_read_set_through_the_apply_path_and_read_back(
    running: Running, audit: AuditLog
) -> None:
    case = running.case
    shown = await running.knob()
    assert shown.stack == case.stack
    after = await apply_changes(running.adapter, [KnobChange(shown, case.new)], Guard(), audit, "t")
    back = find(after, shown)
    assert back is not None and back.value == case.new
    # The stack itself holds it: a fresh read (a new adapter) sees it too.
    assert (await running.knob()).value == case.new
    assert len(running.fake.writes) == 1
    assert len(audit.path.read_text().splitlines()) == 1


async def test_a_value_outside_the_knobs_bounds_is_refused_before_sending(
    running: Running, audit: AuditLog
) -> None:
    shown = await running.knob()
    with pytest.raises(KnobError) as refused:
        await apply_changes(
            running.adapter, [KnobChange(shown, running.case.too_far)], Guard(), audit, "t"
        )
    assert running.case.name in str(refused.value)
    assert running.fake.writes == []
    assert not audit.path.exists()


async def test_a_value_changed_on_the_stack_since_it_was_shown_is_a_conflict(
    running: Running, audit: AuditLog
) -> None:
    shown = await running.knob()
    running.case.behind(running.fake)
    with pytest.raises(KnobConflict) as conflict:
        await apply_changes(
            running.adapter, [KnobChange(shown, running.case.new)], Guard(), audit, "t"
        )
    assert conflict.value.shown == shown.value
    assert running.fake.writes == []


async def test_read_only_sends_nothing(running: Running, audit: AuditLog) -> None:
    shown = await running.knob()
    before = len(running.fake.requests)
    with pytest.raises(ReadOnlyError):
        await apply_changes(
            running.adapter,
            [KnobChange(shown, running.case.new)],
            Guard(read_only=True),
            audit,
            "t",
        )
    assert len(running.fake.requests) == before


@pytest.mark.parametrize("hostile", ["not-json", "wrong-shape", "huge", "nan"])
async def test_a_hostile_answer_is_one_knob_error(running: Running, hostile: str) -> None:
    running.fake.hostile = hostile
    with pytest.raises(KnobError) as refused:
        await running.adapter.read()
    message = str(refused.value)
    assert running.case.stack in message and "\n" not in message and len(message) < 400


async def test_an_unreachable_stack_is_one_knob_error(running: Running) -> None:
    await running.fake.stop()
    with pytest.raises(KnobError, match="unreachable"):
        await running.adapter.read()


async def test_a_stack_that_never_answers_is_one_knob_error_within_its_timeout(
    running: Running,
) -> None:
    running.fake.stalled = True
    endpoint = replace(running.adapter.endpoint, timeout_s=0.3)
    adapter = adapter_for(endpoint)
    try:
        with pytest.raises(KnobError, match="unreachable: ReadTimeout"):
            await adapter.read()
    finally:
        await adapter.close()


# -- each stack's own refusals, in its own words ---------------------------------------------


async def _refused(running: Running, change: KnobChange, audit: AuditLog) -> str:
    with pytest.raises(KnobError) as refused:
        await apply_changes(running.adapter, [change], Guard(), audit, "t")
    return str(refused.value)


def _unbounded(knob: Knob) -> Knob:
    # A knob as an adapter that did not know the stack's bounds would have shown it.
    return replace(knob, minimum=None, maximum=None)


@pytest.fixture
async def dynamo_stack() -> AsyncIterator[Running]:
    case = CASES[0]
    fake = case.make()
    adapter = adapter_for(KnobEndpoint("dynamo", await fake.start()))
    yield Running(case, fake, adapter)
    await adapter.close()
    await fake.stop()


async def test_dynamo_shows_three_thresholds_per_model_and_its_refusals(
    dynamo_stack: Running, audit: AuditLog
) -> None:
    knobs = await dynamo_stack.adapter.read()
    assert {(k.target, k.name, k.value) for k in knobs} == {
        ("llama-8b", "active_decode_blocks_threshold", 0.85),
        ("llama-8b", "active_prefill_tokens_threshold", 8192),
        ("llama-8b", "active_prefill_tokens_threshold_frac", None),
        ("qwen-7b", "active_decode_blocks_threshold", None),
        ("qwen-7b", "active_prefill_tokens_threshold", None),
        ("qwen-7b", "active_prefill_tokens_threshold_frac", None),
    }
    decode = await dynamo_stack.knob()
    message = await _refused(dynamo_stack, KnobChange(_unbounded(decode), 1.5), audit)
    assert "HTTP 400: active_decode_blocks_threshold must be between 0.0 and 1.0" in message
    prefill = await dynamo_stack.knob(name="active_prefill_tokens_threshold")
    message = await _refused(dynamo_stack, KnobChange(_unbounded(prefill), -1), audit)
    assert "HTTP 422" in message and "u64" in message


async def test_dynamo_sets_two_thresholds_of_a_model_in_one_call_leaving_the_third(
    dynamo_stack: Running, audit: AuditLog
) -> None:
    decode = await dynamo_stack.knob()
    prefill = await dynamo_stack.knob(name="active_prefill_tokens_threshold")
    changes = [KnobChange(decode, 0.7), KnobChange(prefill, 4096)]
    await apply_changes(dynamo_stack.adapter, changes, Guard(), audit, "t")
    assert len(dynamo_stack.fake.writes) == 1
    assert isinstance(dynamo_stack.fake, DynamoFake)
    assert dynamo_stack.fake.models["llama-8b"] == {
        "active_decode_blocks_threshold": 0.7,
        "active_prefill_tokens_threshold": 4096,
        "active_prefill_tokens_threshold_frac": None,
    }


@pytest.fixture
async def litellm_stack() -> AsyncIterator[Running]:
    case = CASES[1]
    fake = case.make()
    adapter = adapter_for(KnobEndpoint("litellm", await fake.start(), MASTER))
    yield Running(case, fake, adapter)
    await adapter.close()
    await fake.stop()


async def test_litellm_shows_db_deployments_keys_and_teams_with_the_master_key(
    litellm_stack: Running,
) -> None:
    knobs = await litellm_stack.adapter.read()
    assert {(k.target, k.name, k.value, k.nullable) for k in knobs} == {
        ("model:dep-1", "rpm", 100, False),
        ("model:dep-1", "tpm", 50000, False),
        ("model:dep-1", "max_parallel_requests", 8, False),
        ("key:ci", "rpm_limit", 60, True),
        ("key:ci", "tpm_limit", None, True),
        ("key:ci", "max_parallel_requests", None, True),
        ("key:hashed-bbb", "rpm_limit", None, True),
        ("key:hashed-bbb", "tpm_limit", 1000, True),
        ("key:hashed-bbb", "max_parallel_requests", None, True),
        ("team:team-a", "rpm_limit", 500, True),
        ("team:team-a", "tpm_limit", None, True),
    }
    assert set(litellm_stack.fake.authorizations) == {f"Bearer {MASTER}"}


async def test_litellm_a_key_and_a_team_limit_are_set_and_cleared(
    litellm_stack: Running, audit: AuditLog
) -> None:
    fake = litellm_stack.fake
    assert isinstance(fake, LiteLLMFake)
    key = await litellm_stack.knob("key:ci", "rpm_limit")
    team = await litellm_stack.knob("team:team-a", "tpm_limit")
    await apply_changes(
        litellm_stack.adapter, [KnobChange(key, None), KnobChange(team, 9000)], Guard(), audit, "t"
    )
    assert fake.keys["hashed-aaa"]["rpm_limit"] is None  # no limit: the key was found by alias
    assert fake.teams["team-a"]["tpm_limit"] == 9000
    assert fake.teams["team-a"]["rpm_limit"] == 500  # not named: kept


async def test_litellm_refusals_keep_the_master_key_out_of_errors_and_logs(
    litellm_stack: Running, audit: AuditLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake = litellm_stack.fake
    assert isinstance(fake, LiteLLMFake)
    # The raw write, as the apply path makes it: the proxy's own refusals, in its words.
    for model_id, said in [
        ("dep-cfg", "HTTP 400: Cannot edit config-based model"),
        ("gone", "HTTP 404: Model gone not found on proxy."),
    ]:
        knob = Knob("litellm", f"model:{model_id}", "rpm", 10, "int", 0)
        with pytest.raises(KnobError, match=said):
            await litellm_stack.adapter.write([KnobChange(knob, 5)])
    # A wrong master key: the proxy quotes the key it got; gpuwatch blots it out.
    wrong = "sk-wrong-key-that-must-not-leak"
    stranger = adapter_for(KnobEndpoint("litellm", litellm_stack.adapter.endpoint.url, wrong))
    try:
        with pytest.raises(KnobError) as refused:
            await stranger.read()
    finally:
        await stranger.close()
    message = str(refused.value)
    assert "HTTP 401: Authentication Error, Invalid proxy server token passed" in message
    assert wrong not in message and "***" in message
    assert wrong not in caplog.text and MASTER not in caplog.text


async def test_sglang_shows_the_micro_batch_cap_with_its_bounds_and_its_refusal(
    audit: AuditLog,
) -> None:
    fake = SGLangFake(max_running_requests=64, pp_size=2, speculative_algorithm="EAGLE")
    adapter = adapter_for(KnobEndpoint("sglang", await fake.start()))
    try:
        knobs = {k.name: k for k in await adapter.read()}
        cap = knobs["pp_max_micro_batch_size"]
        assert (cap.value, cap.minimum, cap.maximum) == (32, 1, 32)  # 64 running // 2 stages
        single = knobs["speculative_accept_threshold_single"]
        assert (single.value, single.kind, single.maximum) == (1.0, "float", 1.0)
        # Past the scheduler's range: it answers updated=false, its reason only in its log.
        with pytest.raises(KnobError) as refused:
            await apply_changes(adapter, [KnobChange(_unbounded(cap), 40)], Guard(), audit, "t")
        assert "the scheduler refused pp_max_micro_batch_size" in str(refused.value)
        assert fake.log == [
            "Updating pp_max_micro_batch_size to 40 is rejected because it is out of the "
            "valid range [1, 32]."
        ]
        assert fake.overrides == {}
        # Both thresholds in one update.
        acc = knobs["speculative_accept_threshold_acc"]
        await apply_changes(
            adapter, [KnobChange(single, 0.5), KnobChange(acc, 0.25)], Guard(), audit, "t"
        )
        assert fake.overrides == {
            "speculative_accept_threshold_single": 0.5,
            "speculative_accept_threshold_acc": 0.25,
        }
        assert [r for r in fake.writes] == [("POST", "/set_internal_state")] * 2
    finally:
        await adapter.close()
        await fake.stop()


async def test_vllm_pauses_keeping_requests_and_resumes(audit: AuditLog) -> None:
    fake = VLLMFake()
    adapter = adapter_for(KnobEndpoint("vllm", await fake.start()))
    try:
        paused = (await adapter.read())[0]
        assert (paused.name, paused.value, paused.kind) == ("paused", False, "bool")
        after = await apply_changes(adapter, [KnobChange(paused, True)], Guard(), audit, "t")
        assert fake.paused and fake.modes == ["keep"]  # in-flight requests frozen, not aborted
        await apply_changes(adapter, [KnobChange(after[0], False)], Guard(), audit, "t")
        assert not fake.paused
        assert fake.writes == [("POST", "/pause?mode=keep"), ("POST", "/resume")]
    finally:
        await adapter.close()
        await fake.stop()


async def test_vllm_without_dev_mode_has_no_knob_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = VLLMFake(dev_mode=False)
    adapter = adapter_for(KnobEndpoint("vllm", await fake.start()))
    try:
        assert await adapter.read() == []
        assert await adapter.read() == []
        said = [r.getMessage() for r in caplog.records if "VLLM_SERVER_DEV_MODE" in r.getMessage()]
        assert len(said) == 1 and said[0].endswith("no knob")
        assert getattr(adapter, "absent", None) == said[0]
        # The raw write to such a server is its 404, not a pause that did not happen.
        knob = Knob("vllm", "server", "paused", False, "bool")
        with pytest.raises(KnobError, match="HTTP 404: Not Found"):
            await adapter.write([KnobChange(knob, True)])
    finally:
        await adapter.close()
        await fake.stop()
