"""One node's engines read from Prometheus, behind the scrape source's interface.

Each refresh asks for the raw samples of the node's dialect families that arrived since the
last one (an instant query of a range selector, which answers every sample with the time
Prometheus scraped it), and maps each scrape's samples with the dialect code a ``/metrics``
scrape uses, into ``ScrapeResult``s stamped with that scrape time. The node dashboard's
``Monitor`` then holds exactly the samples Prometheus holds, so its windows (``rate``,
``histogram_quantile`` over ``(t - 1m, t]``) are what the same PromQL answers at ``t``.

``backfill`` fills the charts' hour at once with ``query_range``: the same signals, the same
windows, one query a series.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence

from prometheus_client.samples import Sample

from gpuwatch.model import ScrapeResult
from gpuwatch.series import RECENT_RATE_WINDOW_S, Point, window_label
from gpuwatch.sources import promql
from gpuwatch.sources.dialects import (
    MODEL_LABELS,
    Dialect,
    index_samples,
    map_samples,
    sample_names,
)
from gpuwatch.sources.prometheus import PrometheusError, PrometheusSource, Series

# Asked for beyond the monitor's window on the first read, so its first numbers are whole.
MARGIN_S = 5.0
HOUR_S = 3600.0
STEP_S = 15.0  # 240 points an hour: more than a chart has columns


class NodeSamples:
    """One instance's engines through Prometheus, as the scrapes Prometheus made of it."""

    def __init__(
        self,
        source: PrometheusSource,
        url: str,
        instance: str,
        dialects: Sequence[Dialect],
        window_s: float = promql.WINDOW_S,
    ) -> None:
        self.source = source
        self.url = url  # the name the monitor knows this endpoint by
        self.instance = instance
        self.names = set().union(*(sample_names(d) for d in dialects))
        self.window_s = window_s
        self.newest: float | None = None  # the newest scrape time fed (Unix seconds)

    async def read(self, at: float) -> list[ScrapeResult]:
        """The scrapes since the last read (the first: a window's worth), oldest first."""
        span = self.window_s + MARGIN_S
        if self.newest is not None:
            span = min(span, max(2.0, at - self.newest + 1.0))
        query = promql.raw_samples_query(self.names, self.instance, span)
        try:
            series = await self.source.query_samples(query, at)
        except PrometheusError as exc:
            return [ScrapeResult(self.url, error=str(exc), unreachable=True)]
        # Mapping is CPU work (the first read: a minute of scrapes): off the caller's loop,
        # as a scrape's parse is. Reads never overlap, so ``newest`` has one writer.
        return await asyncio.to_thread(self.results, series)

    def results(self, series: Series) -> list[ScrapeResult]:
        if not series:
            return [
                ScrapeResult(
                    self.url,
                    error=f"Prometheus holds no recent sample of {self.instance}'s engine",
                )
            ]
        # Every series of one target is scraped at the same instant: one group a scrape.
        scrapes: dict[float, list[Sample]] = defaultdict(list)
        dropped = ("__name__", "instance", "job", self.source.node_label)
        for labels, points in series:
            name = labels.get("__name__", "")
            own = {k: v for k, v in labels.items() if k not in dropped}
            for t, value in points:
                if self.newest is None or t > self.newest:
                    scrapes[t].append(Sample(name, own, value))
        if not scrapes:
            return [ScrapeResult(self.url)]  # Prometheus answers; nothing scraped since
        out = []
        for t in sorted(scrapes):
            mapped = map_samples(self.url, index_samples(scrapes[t]))
            if mapped.engines:
                out.append(ScrapeResult(self.url, mapped.engines, warnings=mapped.warnings, at=t))
        self.newest = max(scrapes)
        return out or [ScrapeResult(self.url, error="no known serving metrics in Prometheus")]


# The dashboard's chart series, each as the PromQL signal and window it is computed with.
_BY_KEY = {s.key: s for s in (*promql.SIGNALS, *promql.CHART_SIGNALS)}
CHART_SERIES: dict[str, tuple[promql.FleetSignal, float | None]] = {
    "running": (_BY_KEY["running"], None),
    "waiting": (_BY_KEY["waiting"], None),
    "kv_cache_usage": (_BY_KEY["kv"], None),
    "ttft_p50": (_BY_KEY["ttft_p50"], None),  # None: the monitor's window
    "ttft_p99": (_BY_KEY["ttft_p99"], None),
    "gen_tps": (_BY_KEY["gen_tps"], RECENT_RATE_WINDOW_S),
    "prompt_tps": (_BY_KEY["prompt_tps"], RECENT_RATE_WINDOW_S),
}


History = dict[tuple[str, str], dict[str, list[Point]]]


async def read_history(
    source: PrometheusSource,
    instance: str,
    dialects: Sequence[Dialect],
    end: float,
    window_s: float = promql.WINDOW_S,
) -> History:
    """The hour before ``end`` of every chart series of ``instance``'s engines, from
    ``query_range``, each with the window the dashboard computes it over (``window_s`` for
    the quantiles): {(dialect, model): {series: points}}."""
    out: History = {}
    for name, (signal, rate_s) in CHART_SERIES.items():
        window = window_label(rate_s if rate_s is not None else window_s)
        query = promql.signal_query(signal, dialects, source.node_label, instance, window)
        if query is None:
            continue
        for labels, points in await source.query_range(query, end - HOUR_S, end, STEP_S):
            model = next((labels[m] for m in MODEL_LABELS if labels.get(m)), "")
            engine = out.setdefault((labels.get(promql.DIALECT_LABEL, ""), model), {})
            engine[name] = [Point(t, v) for t, v in points]
    return out
