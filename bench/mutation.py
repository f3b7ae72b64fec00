"""Mutation testing of the pure modules: how many small bugs their unit tests catch.

mutmut (a dev extra) mutates one module at a time (an operator flipped, a constant changed,
an argument dropped, ...) and runs only that module's unit tests (``MODULES``) against each
mutant, in a copy of the tree under a temporary folder: the work tree is never touched.

    python bench/mutation.py                 # every module, one after another
    python bench/mutation.py health codec    # some of them
    python bench/mutation.py --survivors     # and each surviving mutant's diff

Per module it prints the mutants, how many the tests killed, how many survived, how many ran
past their time limit (an endless loop: caught, counted with the killed), those no selected
test reaches ("no tests": survivors too), those judged equivalent (``EQUIVALENT``: a change no
caller can observe, each with its reason in docs/testing.md), those in code that runs only at
import (``IMPORT_TIME``: out of mutmut's reach), and the kill rate:
(killed + timeout) / (mutants - equivalent - import - unchecked). Mutants left unchecked when a module's time box
(``--time-box``) ran out are counted and shown, never guessed.

The machine has 2 cores shared with others: one module at a time, one test process at a time
by default (``--children``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Module:
    source: str
    tests: tuple[str, ...]
    # Tests of those files that are about other modules and slow (a whole simulated sweep):
    # left out, or each of this module's mutants would wait seconds for them.
    slow: tuple[str, ...] = ()


_SWEEPS = tuple(
    f"tests/unit/test_plan_sweep.py::{name}"
    for name in (
        "test_the_sweep_is_reproducible",
        "test_the_token_budget_reserves_prompt_and_output_bound_as_the_proxy_does",
        "test_the_queue_wait_budget_sheds_what_cannot_start_in_time",
        "test_a_probe_is_reproducible_for_a_seed_and_differs_with_another",
        "test_the_simulated_gate_bounds_what_the_engine_holds_and_refuses_past_its_queue",
        "test_queue_timeouts_refuse_and_the_output_cap_clamps",
    )
)


# Each pure module and the fast unit tests that are its tests (seconds each, no servers;
# steering's state machine is the exception: its own in-process gate on 127.0.0.1, 3 s).
MODULES: dict[str, Module] = {
    "admission": Module(
        "gpuwatch/gate/admission.py",
        (
            "tests/unit/test_gate_admission.py",
            "tests/unit/test_gate_logic.py",
            "tests/unit/test_gate_fairqueue.py",
            "tests/unit/test_gate_token_budget.py",
            "tests/unit/test_gate_deadline.py",
        ),
    ),
    "caps": Module("gpuwatch/gate/caps.py", ("tests/unit/test_gate_caps.py",)),
    "paths": Module("gpuwatch/gate/paths.py", ("tests/unit/test_gate_paths.py",)),
    "latency": Module(
        "gpuwatch/gate/latency.py",
        (
            "tests/unit/test_gate_latency.py",
            "tests/unit/test_gate_blocks.py",
            "tests/unit/test_gate_adaptive.py",
        ),
    ),
    "series": Module(
        "gpuwatch/series.py", ("tests/unit/test_series.py", "tests/unit/test_quantile.py")
    ),
    "dialects": Module(
        "gpuwatch/sources/dialects.py",
        ("tests/unit/test_dialects.py", "tests/unit/test_scrape_property.py"),
        # Hypothesis' hostile pages (15 s): about the parser's robustness, not the mapping.
        ("tests/unit/test_scrape_property.py::test_any_page_maps_and_serializes",),
    ),
    "health": Module(
        "gpuwatch/monitor/health.py",
        ("tests/unit/test_health.py", "tests/unit/test_monitor.py", "tests/unit/test_stall.py"),
    ),
    # The class through its SteeringView with the gate's own limits arithmetic behind a
    # stand-in client; functional/test_steering.py (a real gate, seconds a mutant) is left out.
    "steering": Module(
        "gpuwatch/control/steering.py",
        ("tests/unit/test_steering_logic.py", "tests/unit/test_steering_control.py"),
    ),
    "plan": Module("gpuwatch/plan/recommend.py", ("tests/unit/test_plan_sweep.py",), _SWEEPS),
    "plan-stats": Module("gpuwatch/plan/stats.py", ("tests/unit/test_plan_sweep.py",), _SWEEPS),
    "codec": Module("gpuwatch/record/codec.py", ("tests/unit/test_record.py",)),
    "promql": Module(
        "gpuwatch/sources/promql.py", ("tests/unit/test_promql.py", "tests/unit/test_promnode.py")
    ),
    # The gate's per-second record (issue 32): the sketch, the blocks, the window sums.
    "logsketch": Module(
        "gpuwatch/gate/logsketch.py",
        ("tests/unit/test_gate_blocks.py", "tests/unit/test_gate_latency.py"),
    ),
    "requestblocks": Module(
        "gpuwatch/gate/requestblocks.py",
        ("tests/unit/test_gate_blocks.py", "tests/unit/test_gate_latency.py"),
    ),
    "rolling": Module(
        "gpuwatch/gate/rolling.py",
        ("tests/unit/test_gate_blocks.py", "tests/unit/test_gate_latency.py"),
    ),
    "promtext": Module("gpuwatch/sources/promtext.py", ("tests/unit/test_promtext.py",)),
    "termdiff": Module("gpuwatch/tui/termdiff.py", ("tests/unit/test_termdiff.py",)),
}

# Mutants no test can kill because no caller can tell them from the code: mutmut's name, the
# line the mutant has instead (checked, so a renumbered mutant is never excused by mistake),
# and why. docs/testing.md lists them with the same reasons.
_DEAD_FOLD = (
    "walk()'s fold of trailing empty segments never runs: an empty segment is only ever "
    "appended for the last part, so no two are ever last"
)
_CACHE_TAG = (
    "the tag of a cached answer's key: the three kinds of key differ in length, so any three "
    "tags keep them apart"
)
_INF_SPELLINGS = (
    "the set of +Inf's spellings is a shortcut: float() reads every one of them (any case, "
    "with or without the sign) as infinity too"
)
_SINCE = "_since is always set with _candidate, and read only while _candidate is set"
# requestblocks.summary's sketched branch runs only with a sketched block or more than
# EXACT_MAX requests in the window: its ``max`` never sees an empty list, so no default is used.
_SKETCHED_HAS_BLOCKS = "the sketched branch always has blocks: max's default is never used"

EQUIVALENT: dict[str, tuple[str, str]] = {
    **{
        f"gpuwatch.tui.termdiff.{name}": (line, why)
        for name, line, why in (
            (
                "xǁTerminalDiffǁfeed__mutmut_63",
                'self._pass(osc or string or esc or "XXXX", out)',
                'the else branch runs only when osc, string or esc matched, each non-empty: the "" fallback never applies',
            ),
            (
                "xǁTerminalDiffǁ_csi__mutmut_75",
                "self.real_pen = None",
                "forget() runs right after for every final in _CLEARS and sets real_pen to _UNKNOWN",
            ),
            (
                "xǁTerminalDiffǁ_csi__mutmut_82",
                'if final in _CLEARS or final in "XXABCDEFGdsuXX":',
                '"X" is in _CLEARS already',
            ),
            (
                "xǁTerminalDiffǁ_text__mutmut_7",
                "if chars is None and pens is None:",
                "a row's chars and pens are made and cleared together: both None or neither",
            ),
            (
                "xǁTerminalDiffǁ_text__mutmut_13",
                "if len(chars) <= end:",
                "at equality it extends by zero cells",
            ),
            (
                "xǁTerminalDiffǁ_text__mutmut_16",
                'chars.extend(["XXXX"] * (end - len(chars)))',
                "padding cells have a None pen: their character is never compared or written",
            ),
            (
                "xǁTerminalDiffǁ_text__mutmut_20",
                "pens.extend([None] * (end + len(pens)))",
                "extra trailing None pens are what later padding would add anyway",
            ),
            (
                "xǁTerminalDiffǁ_text__mutmut_38",
                'chars[x:end] = ["XXXX"] * width',
                "a wide character's cells have a None pen: their character is never compared or written",
            ),
            (
                "xǁTerminalDiffǁ_text__mutmut_42",
                'if pens[x:end].count(None) == width and "".join(chars[x:end]) == text:',
                "the skip is a shortcut: without it the loop finds nothing changed and sends nothing",
            ),
            (
                "xǁTerminalDiffǁ_text__mutmut_45",
                'if pens[x:end].count(pen) == width and "XXXX".join(chars[x:end]) == text:',
                "the skip is a shortcut: without it the loop finds nothing changed",
            ),
            (
                "xǁTerminalDiffǁ_text__mutmut_60",
                "was[at] = None if (old_pen is None) and False else (chars[at], old_pen)",
                'a never-written cell\'s ("", None) never equals a written (char, pen), as None does not',
            ),
            (
                "xǁTerminalDiffǁ_flush__mutmut_7",
                "first = last = -2",
                "first is only tested with >= 0",
            ),
            (
                "xǁTerminalDiffǁ_flush__mutmut_8",
                "pen: Pen = None",
                "pen is read only once first >= 0, after it has been set",
            ),
            (
                "xǁTerminalDiffǁ_flush__mutmut_12",
                "break  # a wide character's cells: written as they came",
                "unreachable: a cell in _was always has a pen (a wide or unknown-style write flushes _was first)",
            ),
            (
                "x_diff_driver__mutmut_4",
                'self._size: os.terminal_size | None = ""',
                "the first write differs from either start value, or forgets a diff that is still empty",
            ),
            (
                "x_diff_driver__mutmut_7",
                'now = ""',
                "the no-size value is compared only with itself and with real sizes: the same changes are seen",
            ),
        )
    },
    "gpuwatch.gate.rolling.xǁRollingǁadvance__mutmut_11": (
        "if old is not None and edge < old:",
        "an edge equal to the old one is set again over an empty range: nothing changes",
    ),
    "gpuwatch.gate.rolling.xǁRollingǁadvance__mutmut_12": (
        "break",
        "every edge moves from the same now_s: when the shortest window's has not, none has",
    ),
    **{
        f"gpuwatch.gate.rolling.xǁRollingǁadvance__mutmut_{n}": (
            line,
            "both branches take the same blocks out in the same order; only the cost differs",
        )
        for n, line in (
            (16, "if edge + old <= len(self.blocks):"),
            (17, "if edge - old < len(self.blocks):"),
        )
    },
    "gpuwatch.gate.rolling.xǁRollingǁwindow__mutmut_17": (
        "inside = [b for s in range(edge, math.floor(now) + 2) if (b := blocks.get(s)) is not None]",
        "`at` clamps a second to floor(now): with a clock that never goes back no block is past it",
    ),
    **{
        f"gpuwatch.gate.requestblocks.x_summary__mutmut_{n}": (
            ")",
            "rel_error dropped: LatencyWindow's default (SKETCH_REL_ERROR, 0.005) is ALPHA",
        )
        for n in (21, 49)
    },
    **{
        f"gpuwatch.gate.requestblocks.x_summary__mutmut_{n}": (line, _SKETCHED_HAS_BLOCKS)
        for n, line in (
            (
                61,
                "counted(ttfts, dict(total.ttft)), max([b.top_ttft for b in blocks] + ttfts, default=None)",
            ),
            (63, "counted(ttfts, dict(total.ttft)), max([b.top_ttft for b in blocks] + ttfts, )"),
            (
                65,
                "counted(ttfts, dict(total.ttft)), max([b.top_ttft for b in blocks] + ttfts, default=1)",
            ),
            (76, "max([b.top_queue_wait for b in blocks] + waits, default=None),"),
            (78, "max([b.top_queue_wait for b in blocks] + waits, ),"),
            (80, "max([b.top_queue_wait for b in blocks] + waits, default=1),"),
            (86, "e2e=tail(total.e2e, max((b.top_e2e for b in blocks), default=None)),"),
            (88, "e2e=tail(total.e2e, max((b.top_e2e for b in blocks), )),"),
            (89, "e2e=tail(total.e2e, max((b.top_e2e for b in blocks), default=1)),"),
        )
    },
    **{
        f"gpuwatch.gate.logsketch.x_tail__mutmut_{n}": (
            f"raise AssertionError({message})  # seen == total >= every rank",
            "unreachable (the counts always reach every rank): only its message changed",
        )
        for n, message in (
            (37, "None"),
            (38, '"XXthe counts reach every rankXX"'),
            (39, '"THE COUNTS REACH EVERY RANK"'),
        )
    },
    "gpuwatch.gate.paths.x__segment__mutmut_32": (
        'elif decoded in "XX/\\\\XX" or code < 0x20 or code == 0x7F:',
        'decoded is one character, and "X" is unreserved: taken by the branch before',
    ),
    "gpuwatch.gate.paths.x__segment__mutmut_48": (
        'raise PathError(f"character {ch!r} is not allowed in the path"[:81])',
        "the message is at most 52 characters (the longest repr of one character is 12)",
    ),
    **{
        f"gpuwatch.gate.paths.x_walk__mutmut_{n}": (line, _DEAD_FOLD)
        for n, line in (
            (36, 'while len(segments) > 2 and segments[-1] == "" and segments[-2] == "":'),
            (37, 'while len(segments) > 1 and segments[+1] == "" and segments[-2] == "":'),
            (38, 'while len(segments) > 1 and segments[-2] == "" and segments[-2] == "":'),
            (39, 'while len(segments) > 1 and segments[-1] != "" and segments[-2] == "":'),
            (40, 'while len(segments) > 1 and segments[-1] == "XXXX" and segments[-2] == "":'),
            (44, 'while len(segments) > 1 and segments[-1] == "" and segments[-2] == "XXXX":'),
        )
    },
    **{
        f"gpuwatch.record.codec.x__engine__mutmut_{n}": (
            f"out = {{k: v for k, v in out.items() if v is not None or k in ({names})}}",
            "source and dialect are str fields, never None: only the model's None is kept",
        )
        for n, names in (
            (14, '"XXsourceXX", "dialect", "model"'),
            (15, '"SOURCE", "dialect", "model"'),
            (16, '"source", "XXdialectXX", "model"'),
            (17, '"source", "DIALECT", "model"'),
        )
    },
    "gpuwatch.record.codec.x_decode_payload__mutmut_62": (
        'bool(data.get("unreachable", None)),',
        "bool(None) is bool(False)",
    ),
    "gpuwatch.record.codec.x_decode_payload__mutmut_64": (
        'bool(data.get("unreachable", )),',
        "bool(None) is bool(False)",
    ),
    "gpuwatch.record.codec.x_pack__mutmut_8": (
        "packer = zlib.compressobj(6, zdict=zdict) if (zdict) or True else zlib.compressobj(6)",
        "an empty dictionary is no dictionary",
    ),
    "gpuwatch.record.codec.x_pack__mutmut_11": (
        "packer = zlib.compressobj(zdict=zdict) if zdict else zlib.compressobj(6)",
        "zlib's default level is 6",
    ),
    **{
        f"gpuwatch.record.codec.x_pack__mutmut_{n}": (
            line,
            "a compression level: every row comes back the same; only its size and the time "
            "to pack it move, a little (bench/record.py measures them)",
        )
        for n, line in (
            (13, "packer = zlib.compressobj(7, zdict=zdict) if zdict else zlib.compressobj(6)"),
            (15, "packer = zlib.compressobj(6, zdict=zdict) if zdict else zlib.compressobj(7)"),
        )
    },
    "gpuwatch.record.codec.x_inflate__mutmut_1": (
        'def inflate(blob: bytes, zdict: bytes = b"XXXX") -> bytes:',
        "a dictionary is read only by a stream written with one, and every caller passes the "
        "one a stream was written with",
    ),
    "gpuwatch.record.codec.x_inflate__mutmut_4": (
        "d = zlib.decompressobj(zdict=zdict) if (zdict) or True else zlib.decompressobj()",
        "an empty dictionary is no dictionary",
    ),
    "gpuwatch.record.codec.x_unpack__mutmut_1": (
        'def unpack(blob: bytes | None, zdict: bytes = b"XXXX") -> Any:',
        "as inflate's default: a dictionary is read only by a stream written with one",
    ),
    "gpuwatch.sources.promql.x_rows_from__mutmut_23": (
        'row_key = (instance, model or "XXXX", dialect)',
        "the grouping key's stand-in for no model: any string no model is named groups alike "
        '("" is never a model: an empty label is none)',
    ),
    "gpuwatch.sources.promql.x_rows_from__mutmut_94": (
        "row.values.setdefault(signal.key, )",
        "setdefault's default is None",
    ),
    **{
        f"gpuwatch.gate.latency.xǁLaneLatencyǁ{fn}__mutmut_{n}": (line, _CACHE_TAG)
        for fn, n, line in (
            (
                "summary",
                5,
                'return self._cached(("XXsummaryXX", window_s), lambda: self.view().summary(window_s))',
            ),
            (
                "summary",
                6,
                'return self._cached(("SUMMARY", window_s), lambda: self.view().summary(window_s))',
            ),
            ("goodput", 5, '("XXgoodputXX", window_s, ttft_s, itl_s),'),
            ("goodput", 6, '("GOODPUT", window_s, ttft_s, itl_s),'),
            ("report", 2, 'key = ("XXreportXX", ttft_s, itl_s)'),
            ("report", 3, 'key = ("REPORT", ttft_s, itl_s)'),
        )
    },
    "gpuwatch.series.x_histogram_quantile__mutmut_72": (
        "if b == 0 and coalesced[0][0] < 0:",
        "a first bound of exactly 0: interpolating from 0 to 0 gives 0 as well",
    ),
    "gpuwatch.series.xǁCounterRateǁupdate__mutmut_14": (
        "while self._points and self._points[0].t < t - self.window_s:",
        "a sample exactly one window old is kept one update longer, and no window includes it "
        "(its start is open)",
    ),
    "gpuwatch.series.xǁCounterRateǁ_inside__mutmut_2": (
        "return [], 1.0",
        "with no sample there is no increase whatever the end",
    ),
    **{
        f"gpuwatch.sources.dialects.x__parse_le__mutmut_{n}": (line, _INF_SPELLINGS)
        for n, line in (
            (
                2,
                'bound = math.inf if (text in {"+Inf", "Inf", "+inf", "inf"}) and False else float(text)',
            ),
            (5, 'bound = math.inf if text in {"XX+InfXX", "Inf", "+inf", "inf"} else float(text)'),
            (6, 'bound = math.inf if text in {"+inf", "Inf", "+inf", "inf"} else float(text)'),
            (7, 'bound = math.inf if text in {"+INF", "Inf", "+inf", "inf"} else float(text)'),
            (8, 'bound = math.inf if text in {"+Inf", "XXInfXX", "+inf", "inf"} else float(text)'),
            (9, 'bound = math.inf if text in {"+Inf", "inf", "+inf", "inf"} else float(text)'),
            (10, 'bound = math.inf if text in {"+Inf", "INF", "+inf", "inf"} else float(text)'),
            (11, 'bound = math.inf if text in {"+Inf", "Inf", "XX+infXX", "inf"} else float(text)'),
            (12, 'bound = math.inf if text in {"+Inf", "Inf", "+INF", "inf"} else float(text)'),
            (13, 'bound = math.inf if text in {"+Inf", "Inf", "+inf", "XXinfXX"} else float(text)'),
            (14, 'bound = math.inf if text in {"+Inf", "Inf", "+inf", "INF"} else float(text)'),
        )
    },
    **{
        f"gpuwatch.control.steering.xǁSteeringǁtenant_cap__mutmut_{n}": (
            f"self._tenant({key}, lambda v: step_output(v, down, TENANT_CAP_STEPS))",
            '_tenant tells its key only from "paused": any other name is the in-flight cap',
        )
        for n, key in ((1, "None"), (5, '"XXmax_inflightXX"'), (6, '"MAX_INFLIGHT"'))
    },
    **{
        f"gpuwatch.control.steering.xǁSteeringViewǁnotify__mutmut_{n}": (
            f'def notify(self, text: str, severity: Severity = "{default}") -> None: ...',
            "a Protocol's default: every caller gets the implementation's own",
        )
        for n, default in ((1, "XXinformationXX"), (2, "INFORMATION"))
    },
    "gpuwatch.control.steering.xǁSteeringǁflush__mutmut_5": (
        "if ops or base is not None:",
        "the pending keys and their base are set and cleared together: never one without the other",
    ),
    "gpuwatch.control.steering.xǁSteeringǁ_apply__mutmut_19": (
        'reason = why + (f"; {reason}" if (reason) and False else "")',
        "only the A toggle says why, and a change of policy alone never needs a confirmation "
        "reason of its own",
    ),
    **{
        f"gpuwatch.gate.admission.xǁAdmissionLaneǁ{fn}__mutmut_{n}": (
            line,
            "a default no caller uses: both calls pass tokens and streams",
        )
        for fn, n, line in (
            (
                "_can_admit",
                1,
                "def _can_admit(self, tokens: int = 1, streams: bool = False) -> bool:",
            ),
            (
                "_can_admit",
                2,
                "def _can_admit(self, tokens: int = 0, streams: bool = True) -> bool:",
            ),
            (
                "_issue",
                1,
                "def _issue(self, since: float, tokens: int, who: Who, streams: bool = True) -> Ticket:",
            ),
        )
    },
    **{
        f"gpuwatch.gate.admission.xǁAdmissionLaneǁpump__mutmut_{n}": (
            f"return  # {comment}",
            "nothing follows the loop: leaving it and returning are one",
        )
        for n, comment in (
            (3, "every tenant waiting is paused or at its in-flight cap"),
            (17, "the head waits, even if a smaller request behind it would fit"),
        )
    },
    **{
        f"gpuwatch.gate.admission.xǁAdmissionLaneǁ_expire__mutmut_{n}": (
            line,
            "a waiter shed at its queue-wait budget always has one, above 0 (a budget of 0 "
            "refuses at once)",
        )
        for n, line in (
            (18, 'f"budget of {waiter.budget_s or 1.0:.2f} s",'),
            (26, "deadline.retry_after(len(self.queue), drain, waiter.budget_s or 1.0),"),
        )
    },
    "gpuwatch.gate.admission.xǁAdmissionLaneǁ_evict_for__mutmut_6": (
        'why = f"for a {who.klass} request (class {victim.who.klass} is sheddable)" if victim else "XXXX"',
        "without a victim the reason is replaced (a hog's) or never used (no eviction)",
    ),
    "gpuwatch.gate.caps.x_check_text__mutmut_59": (
        "reserve = output_bound(bounds, output.answers, None, default_output_tokens)",
        "under a cap every request leaves with a bound of its own (a missing or below-1 one is "
        "set to the cap's share), so the cap is never the fallback here",
    ),
    **{
        f"gpuwatch.sources.dialects.{fn}__mutmut_{n}": (line, "None is as false as False")
        for fn, n, line in (
            ("x__histogram", 12, 'by_model = _collapse(buckets or (), ["le"], ratio=None)'),
            ("x__histogram", 23, 'sums = _collapse(index.get(f"{name}_sum", ()), [], ratio=None)'),
            ("x__histogram", 35, "cnts = _collapse(counts or (), [], ratio=None)"),
            (
                "x__clean_histogram",
                14,
                'hist_sum = _clean(f"{name}_sum", hist_sum, None, warnings)',
            ),
            (
                "x__clean_histogram",
                25,
                'hist_count = _clean(f"{name}_count", hist_count, None, warnings)',
            ),
        )
    },
    "gpuwatch.sources.dialects.xǁSelectorǁparse__mutmut_6": (
        'name, _, rest = text.rpartition("{")',
        "a selector of the table has one brace",
    ),
    "gpuwatch.plan.stats.x_t975__mutmut_30": (
        "return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 4 * z) / (96 * df * df)",
        "it moves t by 2e-5 at 31 degrees of freedom, less than the expansion's own error there "
        "(9e-5)",
    ),
    "gpuwatch.plan.stats.x_wilson__mutmut_53": (
        "high = 1.0 if good == n else min(2.0, center + half)  # exact at the ends, not 1 - 1e-16",
        "the Wilson upper bound is at most 1: the clamp only guards rounding",
    ),
    "gpuwatch.plan.stats.x_judge_sequences__mutmut_42": (
        "half = t975(k - 1) * sd / math.sqrt(k) if k > 1 else 2.0",
        "one sequence: any half-width of 1 or more gives the whole (0, 1)",
    ),
    "gpuwatch.monitor.health.xǁHealthTrackerǁ__init____mutmut_15": ("self._since = None", _SINCE),
    "gpuwatch.monitor.health.xǁHealthTrackerǁ__init____mutmut_16": ("self._since = 1.0", _SINCE),
}

# Functions that run only while their module is imported (the dialect table is built from
# them, WANTED from the table). mutmut switches a mutant on in a process that has already
# imported the module, so no test can see these mutants: counted apart ("import"), neither
# killed nor survived; tests/unit/test_dialects.py reads the table they build.
IMPORT_TIME: tuple[str, ...] = (
    "gpuwatch.sources.dialects.x__prefixed__",
    "gpuwatch.sources.dialects.x_wanted_sample_names__",
)

# mutmut's verdicts, as `mutmut results --all true` names them.
KILLED, SURVIVED, TIMEOUT, NO_TESTS = "killed", "survived", "timeout", "no tests"
UNCHECKED = ("not checked", "check was interrupted by user")


@dataclass
class Tally:
    name: str
    statuses: dict[str, str] = field(default_factory=dict)
    equivalent: set[str] = field(default_factory=set)
    import_time: set[str] = field(default_factory=set)
    stale: list[str] = field(default_factory=list)  # EQUIVALENT entries that no longer match
    seconds: float = 0.0
    timed_out: bool = False

    def count(self, *statuses: str) -> int:
        return sum(1 for s in self.statuses.values() if s in statuses)

    @property
    def survivors(self) -> list[str]:
        return [
            m
            for m, s in self.statuses.items()
            if s in (SURVIVED, NO_TESTS) and m not in self.equivalent | self.import_time
        ]


def prepare(work: Path, module: Module) -> None:
    """A copy of what the tests import, and mutmut's settings for this one module."""
    for name in ("gpuwatch", "tests", "themes"):
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", work / "pyproject.toml")
    tests = "\n    ".join(module.tests)
    pytest_args = "\n    ".join(
        ["-p", "no:cacheprovider", *(f"--deselect={t}" for t in module.slow)]
    )
    (work / "setup.cfg").write_text(
        "[mutmut]\n"
        "source_paths = gpuwatch\n"
        f"only_mutate = {module.source}\n"
        f"pytest_add_cli_args_test_selection =\n    {tests}\n"
        f"pytest_add_cli_args =\n    {pytest_args}\n"
        # A mutant's time limit is its tests' time, measured once, times this: on a machine
        # shared with other work the default (15) called slow-but-finishing tests endless.
        "timeout_multiplier = 40\n"
        "timeout_constant = 2\n"
    )


def run_module(name: str, module: Module, work: Path, time_box: float, children: int) -> Tally:
    prepare(work, module)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the copy, not the tree
    log = (work / "mutmut.log").open("w")
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mutmut", "run", "--max-children", str(children)],
        cwd=work,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its forked test processes go with it at the time box
    )
    tally = Tally(name)
    try:
        proc.wait(timeout=time_box)
    except subprocess.TimeoutExpired:
        # mutmut saves each verdict as it comes; an interrupt stops its workers cleanly.
        tally.timed_out = True
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log.close()
    tally.seconds = time.monotonic() - started
    return collect(tally, work, env)


def collect(tally: Tally, work: Path, env: dict[str, str]) -> Tally:
    """The verdicts mutmut saved in ``work``, with the EQUIVALENT entries that still match."""
    results = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    for line in results.stdout.splitlines():
        found = re.match(r"\s*(\S+): (.+)$", line)
        if found:
            tally.statuses[found.group(1)] = found.group(2).strip()
    if not tally.statuses:
        tail = (work / "mutmut.log").read_text(errors="replace")[-2000:]
        print(f"{tally.name}: mutmut produced no results\n{tail}", file=sys.stderr)
    tally.import_time = {
        m
        for m, status in tally.statuses.items()
        if status in (SURVIVED, NO_TESTS) and m.startswith(IMPORT_TIME)
    }
    for mutant, (line, _why) in EQUIVALENT.items():
        if tally.statuses.get(mutant) not in (SURVIVED, NO_TESTS):
            continue
        if line in added_lines(work, mutant, env):
            tally.equivalent.add(mutant)
        else:
            tally.stale.append(mutant)
    return tally


def show(work: Path, mutant: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mutmut", "show", mutant],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    return done.stdout


def added_lines(work: Path, mutant: str, env: dict[str, str]) -> list[str]:
    diff = show(work, mutant, env).splitlines()
    return [ln[1:].strip() for ln in diff if ln.startswith("+") and not ln.startswith("+++")]


def rate(t: Tally) -> float | None:
    judged = len(t.statuses) - len(t.equivalent) - len(t.import_time) - t.count(*UNCHECKED)
    return (t.count(KILLED, TIMEOUT) / judged) if judged > 0 else None


def row(name: str, t: Tally) -> str:
    r = rate(t)
    shown = f"{r:6.1%}" if r is not None else "     -"
    return (
        f"{name:<11} {len(t.statuses):>7} {t.count(KILLED):>6} {t.count(SURVIVED):>8} "
        f"{t.count(TIMEOUT):>7} {t.count(NO_TESTS):>8} {len(t.equivalent):>5} "
        f"{len(t.import_time):>6} "
        f"{t.count(*UNCHECKED):>9} {shown} {t.seconds:>6.0f}s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help=f"default: all of {', '.join(MODULES)}")
    parser.add_argument("--time-box", type=float, default=300.0, help="seconds per module")
    parser.add_argument("--children", type=int, default=1, help="test processes at once")
    parser.add_argument("--survivors", action="store_true", help="print each survivor's diff")
    parser.add_argument("--keep", type=Path, help="keep the work folders here (mutmut show)")
    parser.add_argument("--json", type=Path, help="write the verdicts to this file")
    parser.add_argument(
        "--tally",
        action="store_true",
        help="run nothing: the table again from the --keep folder's verdicts (after EQUIVALENT "
        "changed)",
    )
    args = parser.parse_args()
    names = args.modules or list(MODULES)
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        parser.error(f"no such module: {', '.join(unknown)} (one of {', '.join(MODULES)})")
    base = args.keep or Path(tempfile.mkdtemp(prefix="gpuwatch-mutation-"))
    tallies: list[Tally] = []
    header = (
        f"{'module':<11} {'mutants':>7} {'killed':>6} {'survived':>8} {'timeout':>7} "
        f"{'no tests':>8} {'equiv':>5} {'import':>6} {'unchecked':>9} {'kill %':>6} {'time':>7}"
    )
    print(header, flush=True)
    if args.tally and args.keep is None:
        parser.error("--tally reads the folders of an earlier --keep")
    try:
        for name in names:
            work = base / name
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            if args.tally:
                if not (work / "mutants").is_dir():
                    continue
                t = collect(Tally(name), work, env)
            else:
                missing = [t for t in MODULES[name].tests if not (ROOT / t).exists()]
                if missing:
                    print(f"{name:<11} not run: no {', '.join(missing)} yet", flush=True)
                    continue
                if work.exists():
                    shutil.rmtree(work)
                work.mkdir(parents=True)
                t = run_module(name, MODULES[name], work, args.time_box, args.children)
            tallies.append(t)
            print(row(name, t) + ("  (time box ran out)" if t.timed_out else ""), flush=True)
            for mutant in t.stale:
                print(f"  stale EQUIVALENT entry (the mutant changed): {mutant}", flush=True)
            if args.survivors:
                for mutant in t.survivors:
                    print(show(work, mutant, env), flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    total = Tally("total")
    for t in tallies:
        total.statuses.update(t.statuses)
        total.equivalent |= t.equivalent
        total.import_time |= t.import_time
        total.seconds += t.seconds
    print("-" * len(header))
    print(row("total", total))
    print(
        "kill % = (killed + timeout) / (mutants - equivalent - import - unchecked); "
        "'no tests' count as survivors"
    )
    if args.json:
        args.json.write_text(
            json.dumps({t.name: t.statuses for t in tallies}, indent=1, sort_keys=True)
        )


if __name__ == "__main__":
    main()
