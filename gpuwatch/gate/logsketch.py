"""A log-bucketed sketch: counts of values by bucket, with a stated relative error.

Bucket ``i`` holds the values in ``(GAMMA**(i-1), GAMMA**i]``; its value, the point within
``ALPHA`` of every value in it, stands for all of them. So a quantile read from the counts is
within ``ALPHA`` (0.5%) of a value of the right rank (DDSketch's relative-accuracy guarantee),
at a fixed cost per value, and counts of two sketches add: a window's sketch is the sum of its
seconds'. The gate's ITL sketch and its per-second request blocks both count this way.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

from gpuwatch.adminapi import Tail

K = TypeVar("K", bound=Hashable)

ALPHA = 0.005
GAMMA = (1 + ALPHA) / (1 - ALPHA)
_LOG_GAMMA = math.log(GAMMA)
FLOOR_S = 1e-6  # values under a microsecond share the lowest bucket
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def bucket(value: float) -> int:
    return math.ceil(math.log(max(value, FLOOR_S)) / _LOG_GAMMA)


def bucket_value(index: int) -> float:
    # The point that is within ALPHA of every value in (GAMMA**(i-1), GAMMA**i].
    return 2 * GAMMA**index / (GAMMA + 1)


def merge(into: dict[K, int], counts: Mapping[K, int], sign: int = 1) -> None:
    """Add (``sign`` 1) or take away (-1) ``counts``; a key that reaches 0 goes, so a running
    sum holds only the buckets its window has values in."""
    for key, n in counts.items():
        left = into.get(key, 0) + sign * n
        if left:
            into[key] = left
        else:
            into.pop(key, None)


def tail(counts: Mapping[int, int], biggest: float) -> Tail:
    """Quantiles by rank from the counts: the value of the bucket that reaches each rank,
    never above ``biggest`` (the exact largest value, kept beside the counts). One pass over
    the buckets in order for all three ranks."""
    total = sum(counts.values())
    if not total:
        return Tail()
    ranks = [max(1, math.ceil(q * total)) for _, q in QUANTILES]
    found: list[float] = []
    seen = 0
    for b, n in sorted(counts.items()):
        seen += n
        while seen >= ranks[len(found)]:
            found.append(min(bucket_value(b), biggest))
            if len(found) == len(ranks):
                p50, p90, p99 = found
                return Tail(total, p50, p90, p99, biggest)
    raise AssertionError("the counts reach every rank")  # seen == total >= every rank


def counted(values: Iterable[float], into: dict[int, int] | None = None) -> dict[int, int]:
    """``values`` bucketed, added to ``into`` (a new dict if None)."""
    out = {} if into is None else into
    for value in values:
        b = bucket(value)
        out[b] = out.get(b, 0) + 1
    return out
