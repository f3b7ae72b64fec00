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

from gpuwatch.control.knobs.base import Knob, KnobChange, KnobEndpoint, KnobError
from gpuwatch.control.knobs.wire import AdminApi, number, shape_error

INFO = "/get_server_info"
SET = "/set_internal_state"
TARGET = "server"
MICRO_BATCH = "pp_max_micro_batch_size"
ACCEPT_THRESHOLDS = ("speculative_accept_threshold_single", "speculative_accept_threshold_acc")


class SGLangKnobs:
    """The run-time server arguments of an SGLang server at ``endpoint.url``."""

    def __init__(self, endpoint: KnobEndpoint) -> None:
        self.endpoint = endpoint
        self._api = AdminApi(endpoint)

    def _int(self, state: dict[str, object], name: str) -> int:
        value = state.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise shape_error(self._api, INFO, f"{name} is {value!r}")
        return value

    async def read(self) -> list[Knob]:
        body = await self._api.call("GET", INFO)
        states = body.get("internal_states") if isinstance(body, dict) else None
        if not isinstance(states, list) or not states or not isinstance(states[0], dict):
            raise shape_error(self._api, INFO, "no internal_states")
        # Every rank got the same updates; the first speaks for them.
        state: dict[str, object] = states[0]
        # The scheduler's own bound: its running requests per rank (the name newer builds
        # report), split over the pipeline stages.
        running = "effective_max_running_requests_per_dp"
        per_rank = self._int(state, running if running in state else "max_running_requests")
        stages = self._int(state, "pp_size") if "pp_size" in state else 1
        # Null until set: the scheduler then runs its default (the per-rank maximum).
        micro = None if state.get(MICRO_BATCH) is None else self._int(state, MICRO_BATCH)
        knobs = [Knob("sglang", TARGET, MICRO_BATCH, micro, "int", 1, per_rank // stages)]
        if state.get("speculative_algorithm") is not None:
            for name in ACCEPT_THRESHOLDS:
                value = state.get(name)
                if not number(value):
                    raise shape_error(self._api, INFO, f"{name} is {value!r}")
                assert isinstance(value, (int, float))
                knobs.append(Knob("sglang", TARGET, name, float(value), "float", 0.0, 1.0))
        return knobs

    async def write(self, changes: Sequence[KnobChange]) -> None:
        args = {c.knob.name: c.value for c in changes}
        answer = await self._api.call("POST", SET, {"server_args": args})
        # One flag per rank; a single-rank build answers the scheduler's object instead.
        if isinstance(answer, dict):
            answer = answer.get("updated")
        ranks = answer if isinstance(answer, list) else [answer]
        if not ranks or not all(isinstance(r, bool) for r in ranks):
            raise shape_error(self._api, SET, f"answer {answer!r} is not updated flags")
        if not all(ranks):
            names = ", ".join(sorted(args))
            raise KnobError(
                f"{self._api.where}: {SET}: the scheduler refused {names} (updated=false on "
                f"{ranks.count(False)} of {len(ranks)} ranks; its log says why)"
            )

    async def close(self) -> None:
        await self._api.close()
