"""SGLang's server: the few server arguments its scheduler lets change while it runs.

``POST /set_internal_state`` with ``{"server_args": {name: value}}`` reaches every data
parallel rank's scheduler, which takes the update only when every name is on its allow-list
and every value passes its check; the answer is one ``updated`` bool per rank, and the reason
for a ``false`` is only in the server's log. ``GET /get_server_info`` reads them back: its
``internal_states`` (one per rank) hold the arguments as overridden at run time, while the
top-level ones stay as started.

Shown here: ``pp_max_micro_batch_size``, the most requests one micro-batch runs (the scheduler
admits no more than it minus those running, so it is a live cap on the running batch), in
[1, max running requests per rank // pipeline stages]; and, on a server that decodes
speculatively, the two acceptance thresholds, fractions in [0, 1].
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwatch.adminapi import Json
from gpuwatch.control.knobs.base import Knob, KnobChange, KnobEndpoint, KnobError
from gpuwatch.control.knobs.http import Doc, KnobHttp

INFO = "/get_server_info"
SET = "/set_internal_state"
TARGET = "server"
MICRO_BATCH = "pp_max_micro_batch_size"
ACCEPT_THRESHOLDS = ("speculative_accept_threshold_single", "speculative_accept_threshold_acc")


class SGLangKnobs:
    """The run-time server arguments of an SGLang server at ``endpoint.url``."""

    def __init__(self, endpoint: KnobEndpoint) -> None:
        self.endpoint = endpoint
        self._http = KnobHttp(endpoint)

    @staticmethod
    def _count(field: Doc) -> int:
        value = field.integer()
        if value < 1:
            raise field.fail(f"{value} is below 1")
        return value

    async def read(self) -> list[Knob]:
        answer = Doc(await self._http.call("GET", INFO), self._http.where("GET", INFO))
        states = answer.get("internal_states").array()
        if not states:
            raise answer.fail("internal_states is empty")
        # Every rank got the same updates; the first speaks for them.
        state = states[0]
        # The scheduler's own bound: its running requests per rank (the name newer builds
        # report), split over the pipeline stages.
        running = "effective_max_running_requests_per_dp"
        if running not in state.object():
            running = "max_running_requests"
        per_rank = self._count(state.get(running))
        stages = self._count(state.get("pp_size")) if state.get("pp_size").present else 1
        # Null until set: the scheduler then runs its default (the per-rank maximum).
        field = state.get(MICRO_BATCH)
        micro = self._count(field) if field.present else None
        knobs = [Knob("sglang", TARGET, MICRO_BATCH, micro, "int", 1, per_rank // stages)]
        if state.get("speculative_algorithm").present:
            for name in ACCEPT_THRESHOLDS:
                value = float(state.get(name).number())
                knobs.append(Knob("sglang", TARGET, name, value, "float", 0.0, 1.0))
        return knobs

    async def write(self, changes: Sequence[KnobChange]) -> None:
        args: dict[str, Json] = {c.knob.name: c.value for c in changes}
        answer = Doc(
            await self._http.call("POST", SET, body={"server_args": args}),
            self._http.where("POST", SET),
        )
        # One flag per rank; a single-rank build answers the scheduler's object instead.
        flags = answer.get("updated") if isinstance(answer.value, dict) else answer
        ranks = (
            [f.flag() for f in flags.array()] if isinstance(flags.value, list) else [flags.flag()]
        )
        if not ranks:
            raise answer.fail("no updated flags")
        if not all(ranks):
            names = ", ".join(sorted(args))
            raise KnobError(
                f"{answer.where}: the scheduler refused {names} (updated=false on "
                f"{ranks.count(False)} of {len(ranks)} ranks; its log says why)"
            )

    async def close(self) -> None:
        await self._http.close()
