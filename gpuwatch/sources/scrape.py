"""GET a ``/metrics`` page (httpx), bounded in size and time, parsed with prometheus_client.

Only the families some dialect reads are parsed: a live vLLM page with several models runs to
hundreds of KB and prometheus_client's parser costs about a quarter of a microsecond a byte, so
dropping the other families' lines before parsing is where the time is won.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass

import httpx
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.fmt import clip
from gpuwatch.httpclient import DEFAULT_TIMEOUT_S
from gpuwatch.model import ScrapeResult
from gpuwatch.sources.dialects import MODEL_LABELS, index_samples, map_samples, wanted_sample_names

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
# Like Prometheus' sample_limit: a page with 100,000 model label values is a broken exporter
# (or an attack), and showing all of them costs seconds and megabytes for nobody's benefit.
DEFAULT_MAX_ENGINES = 256
_SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_info", "_gcount", "_gsum")


class ScrapeError(Exception):
    """A one-line reason why a source gave nothing usable."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(clip(message))
        self.unreachable = unreachable


def _family_closure(names: Iterable[str]) -> frozenset[str]:
    """Every sample and metadata name of the families that contain ``names``."""
    bases = set()
    for name in names:
        bases.add(name)
        for suffix in _SUFFIXES:
            if name.endswith(suffix):
                bases.add(name[: -len(suffix)])
    return frozenset({*bases, *(b + s for b in bases for s in _SUFFIXES)})


WANTED = _family_closure(wanted_sample_names())


def _line_name(line: str) -> str | None:
    """The metric name a line is about, or None for a plain comment or a blank line."""
    if not line:
        return None
    if line[0] == "#":
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
            return parts[2]
        return None
    end = len(line)
    for stop in ("{", " ", "\t"):
        i = line.find(stop, 0, end)
        if i != -1:
            end = i
    return line[:end]


# A model label inside a sample line's label set. Quotes inside a label value are always
# escaped, so an unescaped `"` right after `=` starts this label's value, not another's.
_MODEL_LABEL_RES = tuple(
    re.compile(r"[{,]\s*" + re.escape(key) + r'\s*=\s*"((?:[^"\\\n]|\\.)*)"')
    for key in MODEL_LABELS
)


def _model_label(line: str) -> str | None:
    """The (still escaped) model label value of a sample line, with dialects' precedence."""
    if "model" not in line:
        return None
    for pattern in _MODEL_LABEL_RES:
        found = pattern.search(line)
        if found:
            return found.group(1)
    return None


@dataclass
class Prefiltered:
    text: str
    # Distinct model label values among the wanted samples, and how many of them were kept.
    models_seen: int = 0
    models_kept: int = 0


def prefilter(
    text: str, wanted: frozenset[str] = WANTED, max_models: int | None = None
) -> Prefiltered:
    """Keep the lines of wanted families; the parse of the result equals the full parse
    restricted to those families. With ``max_models``, samples of models after the first
    ``max_models`` (in page order) are dropped here, before the parse, so that a page with
    100,000 models costs a line scan, not 100,000 engines' worth of parsing and mapping."""
    keep: list[str] = []
    models: dict[str, int] = {}
    for line in text.split("\n"):
        if _line_name(line) not in wanted:
            continue
        if max_models is not None and line[0] != "#":
            model = _model_label(line)
            if model is not None and models.setdefault(model, len(models)) >= max_models:
                continue
        keep.append(line)
    keep.append("")
    return Prefiltered("\n".join(keep), len(models), min(len(models), max_models or 0))


_HTML = re.compile(r"^\s*<(!doctype|html|head|body|\?xml)", re.IGNORECASE)


def _refuse_html(text: str) -> None:
    if _HTML.match(text):
        raise ScrapeError("not a Prometheus metrics page (got HTML)")


def parse_families(text: str, *, filtered: bool = True) -> list[Metric]:
    _refuse_html(text)
    body = prefilter(text).text if filtered else text
    try:
        return list(text_string_to_metric_families(body))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise ScrapeError(f"malformed metrics page: {exc}") from exc


def decode_body(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError(f"body is not valid UTF-8 (byte {exc.start})") from exc


def family_names(text: str, limit: int = 5) -> list[str]:
    """The first metric names on a page, for the "no known serving metrics" message."""
    seen: list[str] = []
    for line in text.split("\n"):
        name = _line_name(line)
        if name and name not in seen:
            seen.append(name)
            if len(seen) >= limit:
                break
    return seen


def _too_many(count: int, limit: int) -> str:
    return f"{count} engines, showing the first {limit} (raise [scrape] max_engines)"


def map_page(source: str, text: str, max_engines: int = DEFAULT_MAX_ENGINES) -> ScrapeResult:
    """Parse a page's text and map it to engines; any problem becomes ``error``."""
    try:
        _refuse_html(text)  # before the prefilter, which would drop every HTML line
        kept = prefilter(text, max_models=max_engines)
        families = parse_families(kept.text, filtered=False)
    except ScrapeError as exc:
        return ScrapeResult(source, error=str(exc))
    index = index_samples(s for fam in families for s in fam.samples)
    mapped = map_samples(source, index)
    engines, warnings = mapped.engines, mapped.warnings
    if not engines:
        shown = ", ".join(clip(name, 60) for name in family_names(text)) or "empty page"
        return ScrapeResult(
            source, error=clip(f"no known serving metrics (first families: {shown})")
        )
    if kept.models_seen > kept.models_kept:
        warnings.insert(0, _too_many(kept.models_seen, max_engines))
    elif len(engines) > max_engines:  # several dialects on one page, each under the cap
        warnings.insert(0, _too_many(len(engines), max_engines))
        engines = engines[:max_engines]
    return ScrapeResult(source, engines, warnings=warnings)


async def fetch(client: httpx.AsyncClient, url: str, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """GET ``url`` and return its text, refusing bodies over ``max_bytes``."""
    try:
        async with client.stream("GET", url) as response:
            if response.status_code != 200:
                raise ScrapeError(f"HTTP {response.status_code} {response.reason_phrase}".strip())
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise ScrapeError(f"body of {int(declared)} bytes exceeds the {_mib(max_bytes)}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise ScrapeError(body_too_big(max_bytes))
                chunks.append(chunk)
    except httpx.ConnectTimeout as exc:
        raise ScrapeError(f"connect timed out ({_host(url)})", unreachable=True) from exc
    except httpx.TimeoutException as exc:
        raise ScrapeError(f"timed out ({_host(url)})") from exc
    except httpx.ConnectError as exc:
        raise ScrapeError(f"connection refused ({_host(url)})", unreachable=True) from exc
    except httpx.RemoteProtocolError as exc:
        raise ScrapeError(f"connection closed mid-response ({_host(url)})") from exc
    except httpx.HTTPError as exc:
        raise ScrapeError(f"{type(exc).__name__}: {exc}") from exc
    return decode_body(b"".join(chunks))


async def scrape(
    client: httpx.AsyncClient,
    url: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    total_timeout_s: float = DEFAULT_TIMEOUT_S,
    max_engines: int = DEFAULT_MAX_ENGINES,
) -> ScrapeResult:
    """Fetch and map one source; never raises for anything the network or the page does."""
    try:
        # httpx's timeouts are per read; a server that trickles bytes needs a bound on the whole.
        text = await asyncio.wait_for(fetch(client, url, max_bytes), total_timeout_s)
    except asyncio.TimeoutError:
        return ScrapeResult(url, error=f"timed out after {total_timeout_s:g} s ({_host(url)})")
    except ScrapeError as exc:
        return ScrapeResult(url, error=str(exc), unreachable=exc.unreachable)
    # Parsing is CPU work (milliseconds for a big page): keep it off the caller's event loop.
    return await asyncio.to_thread(map_page, url, text, max_engines)


def body_too_big(max_bytes: int) -> str:
    return f"body exceeds the {_mib(max_bytes)}"


def _mib(n: int) -> str:
    return f"{n / 1048576:g} MiB limit"


def _host(url: str) -> str:
    return httpx.URL(url).netloc.decode() or url
