"""A stack's own knobs steered from the dashboard (Pilot), with no gate: Dynamo's busy thresholds,
vLLM's pause, a LiteLLM deployment's and SGLang's caps, over HTTP to the fakes written from those stacks' sources
(tests/functional/stackfakes/). The real Ray Serve is in tests/realstack/test_ray_knobs_tui.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from textual.pilot import Pilot
from textual.widgets import Button, DataTable
from textual.widgets._footer import FooterKey

from gpuwatch.config import KnobConfig
from gpuwatch.control.knobs.apply import open_audit
from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.screens.confirm import ConfirmationModal
from gpuwatch.tui.screens.edit_knobs import EditKnobs
from tests.conftest import fixture_text
from tests.functional.stackfakes.dynamo import DynamoFake
from tests.functional.stackfakes.vllm import VLLMFake
from tests.functional.test_tui import text
from tests.functional.test_tui_control import audit_shown, confirm_shown
from tests.helpers import eventually, refusing_port

DECODE = "active_decode_blocks_threshold"


@dataclass
class Stacks:
    dynamo: DynamoFake
    vllm: VLLMFake
    audit: Path

    def app(self, **kw: Any) -> GpuwatchApp:
        return GpuwatchApp(
            live_session(
                DashboardOptions(
                    urls=[],
                    interval_s=0.25,
                    local=False,
                    knobs=[
                        KnobConfig("dynamo", self.dynamo_url),
                        KnobConfig("vllm", self.vllm_url),
                    ],
                    knob_audit=str(self.audit),
                    knob_interval_s=0.25,
                    **kw,
                )
            )
        )

    @property
    def dynamo_url(self) -> str:
        assert self.dynamo.served is not None
        return self.dynamo.served.url

    @property
    def vllm_url(self) -> str:
        assert self.vllm.served is not None
        return self.vllm.served.url

    def decode(self) -> float | int | None:
        return self.dynamo.models["llama-8b"][DECODE]


@pytest.fixture
async def stacks(tmp_path: Path) -> AsyncIterator[Stacks]:
    dynamo = DynamoFake()
    dynamo.add(
        "llama-8b", active_decode_blocks_threshold=0.85, active_prefill_tokens_threshold=8192
    )
    vllm = VLLMFake()
    await dynamo.start()
    await vllm.start()
    yield Stacks(dynamo, vllm, tmp_path / "knobs-audit.jsonl")
    await dynamo.stop()
    await vllm.stop()


async def shown(pilot: Pilot[None], app: GpuwatchApp) -> None:
    """Both stacks read and their rows on screen."""
    await eventually(
        pause=pilot.pause,
        condition=lambda: (
            "decode blocks 0.85" in text(app, "#admission")
            and "paused false" in text(app, "#admission")
        ),
    )


async def settled(pilot: Pilot[None], app: GpuwatchApp) -> None:
    """No knob key waits to be sent and no change is in flight (a condition, not a sleep)."""
    await pilot.pause()
    await eventually(pause=pilot.pause, condition=lambda: app.session.knobs.idle)


def row_of(app: GpuwatchApp, stack: str) -> int:
    """The index of ``stack``'s first knob row among the knob rows."""
    return next(i for i, r in enumerate(app.session.knobs.rows()) if r.key[0] == stack)


def footer(app: GpuwatchApp) -> dict[str, tuple[str, bool]]:
    """What the footer shows: each key's label, and whether it is live (False: greyed)."""
    return {
        k.key: (k.description, not k.has_class("-disabled")) for k in app.screen.query(FooterKey)
    }


async def test_the_footer_names_what_the_keys_do_on_the_row_selected(stacks: Stacks) -> None:
    """On a lane row the footer offers the gate's keys (greyed: this gate does not answer);
    on a knob row the same keys say what they do to the knob, `p` only where the stack can
    pause, and none of the gate's labels is left there."""
    with refusing_port() as port:
        app = stacks.app(admin_url=f"http://127.0.0.1:{port}")
        async with app.run_test(size=(160, 48)) as pilot:
            await shown(pilot, app)
            await eventually(
                pause=pilot.pause, condition=lambda: footer(app).get("plus") is not None
            )
            shown_keys = footer(app)
            assert shown_keys["plus"] == ("+in-flight", False)
            assert shown_keys["e"] == ("edit lane", False)
            await pilot.press("tab")  # the gate has no lanes to show: the first knob row
            assert app.session.on_knob is not None and app.session.on_knob.key[0] == "dynamo"
            dynamo = {
                "tab": ("next row", True),
                "plus": ("+knob", True),
                "minus": ("-knob", True),
                "e": ("edit knob", True),
                "u": ("undo knob", True),
            }
            await eventually(
                pause=pilot.pause,
                condition=lambda: dynamo.items() <= footer(app).items(),
                message=lambda: str(footer(app)),
            )
            assert "p" not in footer(app)  # Dynamo has no pause: nothing to offer
            labels = " ".join(label for label, _ in footer(app).values())
            assert "lane" not in labels and "in-flight" not in labels
            await pilot.press(str(row_of(app, "vllm") + 1))
            await eventually(
                pause=pilot.pause,
                condition=lambda: footer(app).get("p") == ("pause stack", True),
                message=lambda: str(footer(app)),
            )
            rows = len(app.session.knobs.rows())
            await pilot.press(*["tab"] * (rows - row_of(app, "vllm")))  # past the last knob
            assert app.session.on_knob is None
            await eventually(
                pause=pilot.pause,
                condition=lambda: footer(app).get("plus") == ("+in-flight", False),
                message=lambda: str(footer(app)),
            )


async def test_keys_step_a_dynamo_threshold_audited_and_undone(stacks: Stacks) -> None:
    app = stacks.app()
    app.session.knobs.coalesce_s = 2.0  # the keys below land in one window on a loaded machine
    async with app.run_test(size=(160, 48)) as pilot:
        await shown(pilot, app)
        await pilot.press("tab")  # no gate: the first knob row
        assert app.session.on_knob is not None and app.session.on_knob.key[2] == DECODE
        await pilot.press("plus", "plus")
        assert "sending: dynamo llama-8b active_decode_blocks_threshold 0.85 -> 0.95" in text(
            app, "#admission"
        )
        await eventually(lambda: stacks.decode() == 0.95, pause=pilot.pause)
        posts = [r for r in stacks.dynamo.writes if r[1] == "/busy_threshold"]
        assert len(posts) == 1  # two keys, one change
        await eventually(
            pause=pilot.pause, condition=lambda: "decode blocks 0.95" in text(app, "#admission")
        )
        await pilot.press("u")
        await eventually(lambda: stacks.decode() == 0.85, pause=pilot.pause)
        await settled(pilot, app)
        entries = list(open_audit(stacks.audit).recent)
        assert [e.change.to_json() for e in entries] == [
            {"lanes": {"dynamo llama-8b": {DECODE: 0.85}}},  # newest first: the undo
            {"lanes": {"dynamo llama-8b": {DECODE: 0.95}}},
        ]
        assert all("@" in e.actor for e in entries)
        # `a` shows the local knob audit (no gate here).
        await pilot.press("a")
        screen = await audit_shown(pilot, app)
        assert screen.query_one(DataTable).row_count == 2


async def test_p_pauses_vllm_after_asking_and_resumes_without(stacks: Stacks) -> None:
    app = stacks.app()
    async with app.run_test(size=(160, 48)) as pilot:
        await shown(pilot, app)
        await pilot.press(str(row_of(app, "vllm") + 1))  # no gate: the keys count knob rows
        await pilot.press("p")
        modal = await confirm_shown(pilot, app)
        assert "vllm server paused false -> true" in str(modal.query_one("#details").render())
        await pilot.click("#apply")
        await eventually(lambda: stacks.vllm.paused, pause=pilot.pause)
        assert stacks.vllm.modes == ["keep"]  # requests in flight wait, none is aborted
        await eventually(
            pause=pilot.pause, condition=lambda: "paused true" in text(app, "#admission")
        )
        await settled(pilot, app)
        await pilot.press("p")  # resuming does not ask
        await eventually(lambda: not stacks.vllm.paused, pause=pilot.pause)
        assert not isinstance(app.screen, ConfirmationModal)


async def test_the_form_edits_a_models_thresholds_in_one_change(stacks: Stacks) -> None:
    app = stacks.app()
    async with app.run_test(size=(160, 48)) as pilot:
        await shown(pilot, app)
        await pilot.press("tab", "e")
        form = await eventually(
            pause=pilot.pause,
            condition=lambda: (
                isinstance(app.screen, EditKnobs) and app.screen.query("#apply") and app.screen
            ),
        )
        assert [k.name for k in form.knobs][:2] == [DECODE, "active_prefill_tokens_threshold"]
        form.query_one("#knob0").value = "1.5"  # over the frontend's bound: refused here
        await eventually(
            pause=pilot.pause,
            condition=lambda: "at most 1" in str(form.query_one("#knob0-error").render()),
        )
        assert form.changes() is None
        form.query_one("#knob0").value = "0.7"
        form.query_one("#knob1").value = "4096"
        form.query_one("#apply", Button).scroll_visible(animate=False)
        await pilot.pause()
        await pilot.click("#apply")
        await eventually(lambda: stacks.decode() == 0.7, pause=pilot.pause)
        assert stacks.dynamo.models["llama-8b"]["active_prefill_tokens_threshold"] == 4096
        assert len([r for r in stacks.dynamo.writes if r[1] == "/busy_threshold"]) == 1


async def test_read_only_refuses_on_a_knob_row_and_sends_nothing(stacks: Stacks) -> None:
    app = stacks.app(read_only=True)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await shown(pilot, app)
        await pilot.press("tab", "plus", "asterisk", "e", "u")
        await pilot.press(str(row_of(app, "vllm") + 1), "p")  # p where the stack can pause
        await settled(pilot, app)
        said = [n.message for n in app._notifications]
        assert said and all("read-only" in m for m in said), said
        assert len(said) == 5  # each key refused, and said why
        assert "RO" in text(app, "#header")
    assert stacks.dynamo.writes == [] and stacks.vllm.writes == []
    assert stacks.decode() == 0.85 and not stacks.vllm.paused
    assert not stacks.audit.exists()


async def test_a_stack_that_stops_answering_is_na_and_one_event(stacks: Stacks) -> None:
    app = stacks.app()
    async with app.run_test(size=(160, 48)) as pilot:
        await shown(pilot, app)
        await stacks.vllm.stop()
        await eventually(pause=pilot.pause, condition=lambda: "N/A" in text(app, "#admission"))
        # Three more rounds of reads (Dynamo's fake counts them): the dead stack was read
        # again and again, and said so once.
        reads = len(stacks.dynamo.requests)
        await eventually(
            pause=pilot.pause, condition=lambda: len(stacks.dynamo.requests) > reads + 2
        )
        failures = [e for e in app.session.monitor.events if "N/A" in e.text and "vllm" in e.text]
        assert len(failures) == 1
        # The other stack goes on being read and steered (on a loaded machine one of its reads
        # may time out too: N/A until the next answers).
        await eventually(
            pause=pilot.pause, condition=lambda: "decode blocks 0.85" in text(app, "#admission")
        )
        assert all(r.key[0] == "dynamo" for r in app.session.knobs.rows())


@dataclass
class DynamoWithMetrics(DynamoFake):
    """The Dynamo fake on the frontend's own port with its /metrics too (a page Dynamo
    served), as a dashboard pointed at the frontend scrapes it."""

    def routes(self, app: web.Application) -> None:
        super().routes(app)
        app.router.add_get("/metrics", self.metrics)

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=fixture_text("dynamo-1.prom"), content_type="text/plain")


async def test_an_engines_knobs_are_found_from_its_dialect_without_config() -> None:
    """No [[knobs]]: the Dynamo frontend scraped at its port shows its thresholds; the
    simulator (vLLM's dialect, no dev-mode routes) shows no knob row and no event."""
    dynamo = DynamoWithMetrics()
    dynamo.add(
        "llama-8b", active_decode_blocks_threshold=0.85, active_prefill_tokens_threshold=8192
    )
    url = await dynamo.start()
    node, sim = await start_sim(get_profile("rtx4090-llama3-8b-awq"), time_scale=2.0, seed=3)
    app = GpuwatchApp(
        live_session(
            DashboardOptions(
                urls=[f"{url}/metrics", f"{sim.url}/metrics"],
                interval_s=0.25,
                local=False,
                knob_interval_s=0.25,
            )
        )
    )
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await shown_dynamo(pilot, app)
            reader = app.session.knob_reader
            assert reader is not None
            # The simulator was looked at (its dialect says vLLM) and has nothing to steer.
            await eventually(
                pause=pilot.pause,
                condition=lambda: any(s.stack == "vllm" and s.read for s in reader.sources),
            )
            assert "vllm" not in text(app, "#admission")
            assert not [e for e in app.session.monitor.events if "knobs" in e.text]
    finally:
        await sim.close()
        await dynamo.stop()


async def shown_dynamo(pilot: Pilot[None], app: GpuwatchApp) -> None:
    await eventually(
        pause=pilot.pause,
        condition=lambda: "dynamo llama-8b  decode blocks 0.85" in text(app, "#admission"),
    )


@pytest.mark.parametrize("stack", ["litellm", "sglang"])
async def test_a_key_steps_a_litellm_or_sglang_knob_audited(stack: str, tmp_path: Path) -> None:
    """The other two stacks from the keys, over HTTP to their fakes: the first knob row's
    selected knob moves one step, the stack holds the new value, the local audit says so."""
    from tests.functional.stackfakes.common import StackFake
    from tests.functional.stackfakes.litellm import LiteLLMFake
    from tests.functional.stackfakes.sglang import SGLangFake

    master = "sk-master-fake-0123456789"
    fake: StackFake
    if stack == "litellm":
        litellm = LiteLLMFake(master_key=master)
        litellm.add_model("dep-1", "llama-8b", rpm=100, tpm=50000, max_parallel_requests=8)
        fake = litellm
    else:
        fake = SGLangFake()  # pp_max_micro_batch_size 64, its upper bound: - steps it down
    url = await fake.start()
    key = tmp_path / "master.key"
    key.write_text(master)
    audit = tmp_path / "knobs-audit.jsonl"
    config = KnobConfig(stack, url, str(key) if stack == "litellm" else "")
    options = DashboardOptions(
        urls=[],
        interval_s=0.25,
        local=False,
        knobs=[config],
        knob_audit=str(audit),
        knob_interval_s=0.25,
    )
    app = GpuwatchApp(live_session(options))

    def held(name: str) -> Any:
        if isinstance(fake, LiteLLMFake):
            return fake.deployments["dep-1"]["litellm_params"][name]
        assert isinstance(fake, SGLangFake)
        return fake.state()[name]

    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await eventually(pause=pilot.pause, condition=lambda: stack in text(app, "#admission"))
            await pilot.press("tab")  # no gate: the first knob row
            selected = app.session.on_knob
            assert selected is not None
            name = selected.key[2]
            before = held(name)
            await pilot.press("plus" if stack == "litellm" else "minus")
            await settled(pilot, app)
            wanted = before + 1 if stack == "litellm" else before - 1
            await eventually(lambda: held(name) == wanted, pause=pilot.pause)
            entries = open_audit(audit).recent
            assert len(entries) == 1 and (entries[0].reason or "").startswith(f"{stack} admin API")
    finally:
        await fake.stop()
