"""The knob rows of the admission panel (pure markup), and the session's knob reader over stacks
held in memory: what a failure says, and how often."""

from __future__ import annotations

from gpuwatch.control.knobs.base import Knob, KnobEndpoint, KnobError
from gpuwatch.control.knobs.steer import KnobRef, KnobSource
from gpuwatch.monitor.state import Monitor
from gpuwatch.session.knobs import KnobReader
from gpuwatch.tui.markup import content
from gpuwatch.tui.widgets.knobs import knob_lines
from tests.unit.memoryknobs import MemoryKnobs


def source(stack: str, url: str, *knobs: Knob) -> KnobSource:
    adapter = MemoryKnobs(knobs, stack)
    adapter.endpoint = KnobEndpoint(stack, url)
    found = KnobSource(adapter)
    found.shown(list(knobs))
    return found


DYNAMO = source(
    "dynamo",
    "http://127.0.0.1:8080",
    Knob("dynamo", "llama-8b", "active_decode_blocks_threshold", 0.85, "float", 0, 1),
    Knob("dynamo", "llama-8b", "active_prefill_tokens_threshold", 8192, "int", 0),
)
RAY = source(
    "ray", "http://127.0.0.1:8265", Knob("ray", "app1/LLM", "max_ongoing_requests", 8, "int", 1)
)


def plain(lines: list[str]) -> list[str]:
    return [content(line).plain for line in lines]


def test_a_row_per_target_with_the_names_in_one_column() -> None:
    assert plain(knob_lines([DYNAMO, RAY], None, compact=False)) == [
        " dynamo llama-8b  decode blocks 0.85  prefill tokens 8192",
        " ray app1/LLM     max_ongoing 8",
    ]


def test_the_selected_knob_is_reversed_and_a_narrow_panel_wraps_under_the_name() -> None:
    ref = KnobRef.of(DYNAMO, DYNAMO.knobs[1])
    lines = knob_lines([DYNAMO], ref, compact=True, width=40)
    assert plain(lines) == [
        " dynamo llama-8b  decode blocks 0.85",
        "                  prefill tokens 8192",
    ]
    assert "[reverse]prefill tokens 8192[/reverse]" in lines[1]


def test_a_stack_that_failed_is_one_na_row_and_hostile_names_stay_text() -> None:
    hostile = source(
        "ray", "http://127.0.0.1:1", Knob("ray", "[b]x[/b]", "max_ongoing_requests", 1, "int")
    )
    failed = source("vllm", "http://127.0.0.1:8001")
    failed.failed("connection refused [red]")
    lines = plain(knob_lines([hostile, failed], None, compact=False))
    assert lines == [
        " ray [b]x[/b]  max_ongoing 1",
        " vllm 127.0.0.1:8001  N/A connection refused [red]",
    ]


class Broken(MemoryKnobs):
    """A stack whose reads fail with ``reason`` while it is set."""

    reason: str | None = None

    async def read(self) -> list[Knob]:
        if self.reason is not None:
            raise KnobError(self.reason)
        return await super().read()


async def test_a_configured_stack_that_fails_is_said_once_per_reason_and_when_it_is_back() -> None:
    monitor = Monitor([])
    repaints: list[int] = []
    reader = KnobReader(lambda: monitor, [], monitor.event, lambda: repaints.append(1))
    stack = Broken([Knob("ray", "a/B", "max_ongoing_requests", 8, "int")])
    reader.sources.append(KnobSource(stack))
    await reader.read_all()
    assert reader.sources[0].knobs and repaints == [1]
    stack.reason = "connection refused"
    await reader.read_all()
    await reader.read_all()  # the same reason: no second line
    stack.reason = "HTTP 502"
    await reader.read_all()
    stack.reason = None
    await reader.read_all()
    said = [(e.level, e.text) for e in monitor.events]
    assert said == [
        ("warn", "knobs of ray http://127.0.0.1:1: N/A: connection refused"),
        ("warn", "knobs of ray http://127.0.0.1:1: N/A: HTTP 502"),
        ("info", "knobs of ray http://127.0.0.1:1 read again"),
    ]
    assert reader.sources[0].error is None and len(repaints) == 4  # each change, not each read


async def test_a_guessed_stack_that_never_answered_is_dropped_without_a_word() -> None:
    monitor = Monitor([])
    reader = KnobReader(lambda: monitor, [], monitor.event, lambda: None)
    stack = Broken([])
    stack.reason = "connection refused"
    reader.sources.append(KnobSource(stack, guessed=True))
    await reader.read_all()
    assert reader.sources == [] and not monitor.events
