"""GET a ``/metrics`` page (httpx), bounded in size and time, read into prometheus_client's
families and samples (``promtext``: its parser's result, plain lines read faster).

Only the families some dialect reads are parsed: a live vLLM page with several models runs to
hundreds of KB and prometheus_client's parser costs about a quarter of a microsecond a byte, so
dropping the other families' lines before parsing is where the time is won.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import httpx
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from gpuwatch.bounds import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENGINES, DEFAULT_TIMEOUT_S
from gpuwatch.errors import GpuwatchError
from gpuwatch.fmt import clip
from gpuwatch.httpclient import BodyRefused, get_stream, read_bounded
from gpuwatch.model import ScrapeResult
from gpuwatch.sources.dialects import MODEL_LABELS, index_samples, map_samples, wanted_sample_names
from gpuwatch.sources.promtext import (
    number,
    parse_block,
    parse_samples,
    parse_text,
    split_blocks,
)

_SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_info", "_gcount", "_gsum")


class ScrapeError(GpuwatchError):
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
# What a recording keeps of the gate's own page: what the dashboard shows of it (in flight,
# queued, its TTFT and queue-wait histograms), not its request-duration histogram, which no
# panel reads and which was a third of the gate page's bytes in a recording (bench/record.py).
RECORDED_FOR_GATE = WANTED - _family_closure(("gpuwatch_gate_request_duration_seconds",))


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
# escaped, so an unescaped `"` right after `=` starts this label's value, not another's. The
# value is matched as runs of plain characters between escapes: ``(?:[^"\\]|\\.)*`` kept a
# backtracking frame per character (~140 bytes each, 600 MiB for a 4 MiB label); a run of one
# character class keeps none, and only escapes still cost a frame (bounded by MAX_LINE_CHARS).
_MODEL_LABEL_RES = tuple(
    re.compile(r"[{,]\s*" + re.escape(key) + r'\s*=\s*"([^"\\\n]*(?:\\.[^"\\\n]*)*)"')
    for key in MODEL_LABELS
)
# Longer lines of a wanted family are dropped before any regex or parser sees them, and said
# once per page: a real exporter's longest lines (histogram buckets with a handful of labels,
# a LoRA adapter list) are a few KB; 4 MiB of one label is a broken exporter or an attack.
MAX_LINE_CHARS = 64 * 1024


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
    # Lines of wanted families dropped for being longer than MAX_LINE_CHARS.
    long_lines: int = 0
    # Where each line of ``text`` was on the page (its index in ``page.split("\n")``), and the
    # wanted sample lines dropped for their model (past ``max_models``): a ``PagePlan``'s map.
    kept_at: list[int] = field(default_factory=list)
    capped_at: list[int] = field(default_factory=list)


_UNSEEN = "\x00unseen"  # compared by identity: no label read from a page is this object


def prefilter(
    text: str,
    wanted: frozenset[str] = WANTED,
    max_models: int | None = None,
    cache: ParseCache | None = None,
) -> Prefiltered:
    """Keep the lines of wanted families; the parse of the result equals the full parse
    restricted to those families. With ``max_models``, samples of models after the first
    ``max_models`` (in page order) are dropped here, before the parse, so that a page with
    100,000 models costs a line scan, not 100,000 engines' worth of parsing and mapping.
    A source's ``cache`` remembers each series' model label from its last page."""
    keep: list[str] = []
    kept_at: list[int] = []
    capped_at: list[int] = []
    models: dict[str, int] = {}
    known = cache.model_labels if cache is not None and max_models is not None else None
    seen: dict[str, str | None] = {}
    long_lines = 0
    for at, line in enumerate(text.split("\n")):
        if not line:
            continue
        if line[0] == "#":
            if _line_name(line) in wanted:
                if len(line) > MAX_LINE_CHARS:
                    long_lines += 1
                    continue
                keep.append(line)
                kept_at.append(at)
            continue
        name = line.partition("{")[0]
        if " " in name or "\t" in name:
            name = _line_name(line)  # type: ignore[assignment]
        if name not in wanted:
            continue
        if len(line) > MAX_LINE_CHARS:
            long_lines += 1
            continue
        if max_models is not None:
            if known is None:
                model = _model_label(line)
            else:
                # A model label ends with a quote: with none in the value, it lies in the head.
                head, _, value = line.rpartition(" ")
                if '"' in value:
                    model = _model_label(line)
                else:
                    model = known.get(head, _UNSEEN)
                    if model is _UNSEEN:
                        model = _model_label(line)
                    seen[head] = model
            if model is not None and models.setdefault(model, len(models)) >= max_models:
                capped_at.append(at)
                continue
        keep.append(line)
        kept_at.append(at)
    if known is not None and cache is not None:
        cache.model_labels = seen
    keep.append("")
    kept = min(len(models), max_models or 0)
    return Prefiltered("\n".join(keep), len(models), kept, long_lines, kept_at, capped_at)


def long_lines_dropped(count: int) -> str:
    return (
        f"{count} line(s) over {MAX_LINE_CHARS // 1024} KiB dropped unread "
        "(a label that long is a broken exporter)"
    )


# The parse cache for live polling.
#
# prometheus_client's parser reads a sample line in about 20 µs, most of it in its label parser,
# and a live page changes little from one scrape to the next: its series stay, their numbers
# move. A ``ParseCache`` (one per polled source) cuts the (prefiltered) text into blocks where
# prometheus_client's parser starts a new family whatever came before, and
#  - reuses the families of a block whose text has not changed;
#  - for a block whose lines have not changed but for their values (its "skeleton": each sample
#    line with its trailing number cut off), reuses the parsed samples, names and labels, and
#    reads only the numbers that changed, with ``int`` then ``float`` as prometheus_client does;
#  - parses anything else (a new series or family, an odd value) block by block
#    (``promtext.parse_block``: the parser's result, plain lines read faster).
# The result equals a full parse of the text (tests/unit/test_parse_cache.py).


def _same_value(a: float, b: float) -> bool:
    return type(a) is type(b) and (a == b or (a != a and b != b))


def _skeleton(block: list[str]) -> tuple[str, list[str], list[int]]:
    """The block with its readable values cut off, those values, and the index of each one's
    sample (sample lines and samples correspond one to one, in order)."""
    parts: list[str] = []
    values: list[str] = []
    slots: list[int] = []
    index = 0
    for line in block:
        if line[0] == "#":
            parts.append(line)
            continue
        head, _, value = line.rpartition(" ")
        if head and number(value) is not None:
            parts.append(head + " ")  # a stripped line never ends with " ": no clash with lines
            values.append(value)
            slots.append(index)
        else:
            parts.append(line)
        index += 1
    return "\n".join(parts), values, slots


def _with_samples(metric: Metric, samples: list[Sample]) -> Metric:
    """A copy of ``metric`` with other samples (as ``copy.copy`` would, in a fifth the time)."""
    new = object.__new__(Metric)
    new.__dict__.update(metric.__dict__)
    new.samples = samples
    return new


@dataclass
class _Template:
    """The families of a block's last version, and where its values go."""

    families: list[Metric]
    ranges: list[tuple[int, int]]  # each family's span in ``samples``
    samples: list[Sample]
    slots: list[int]  # each value's sample
    family_of: list[int]  # each value's family
    values: list[str]

    def refill(self, values: list[str]) -> int | None:
        """The families with ``values`` read in (new objects where a value changed, never
        changed in place); returns how many values changed, or None (and changes nothing)
        where a changed value is not a plain number (``number``)."""
        old = self.values
        samples = self.samples
        changed: dict[int, None] = {}
        count = 0
        for k, text in enumerate(values):
            if text != old[k]:
                value = number(text)
                if value is None:
                    return None
                if not count:
                    samples = list(samples)
                i = self.slots[k]
                s = samples[i]
                samples[i] = Sample(s.name, s.labels, value)
                changed[self.family_of[k]] = None
                count += 1
        if count:
            families = list(self.families)
            for f in changed:
                a, b = self.ranges[f]
                families[f] = _with_samples(families[f], samples[a:b])
            self.families, self.samples, self.values = families, samples, values
        return count


def _make_template(
    families: list[Metric], block: list[str], values: list[str], slots: list[int]
) -> _Template | None:
    """The template of a block just parsed, or None where the cache's reading of a value would
    not be the parser's (then the block is parsed again whenever its text changes)."""
    samples: list[Sample] = []
    ranges: list[tuple[int, int]] = []
    family_of_sample: list[int] = []
    for f, metric in enumerate(families):
        ranges.append((len(samples), len(samples) + len(metric.samples)))
        family_of_sample += [f] * len(metric.samples)
        samples += metric.samples
    if len(samples) != sum(line[0] != "#" for line in block):
        return None
    for text, i in zip(values, slots, strict=True):
        s = samples[i]
        value = number(text)
        if value is None or not _same_value(s.value, value):
            return None
        if (s.timestamp, s.exemplar, s.native_histogram) != (None, None, None):
            return None
    family_of = [family_of_sample[i] for i in slots]
    return _Template(families, ranges, samples, slots, family_of, values)


@dataclass
class CacheStats:
    """What the last ``ParseCache.parse`` did."""

    blocks: int = 0
    blocks_same: int = 0  # text unchanged: families reused
    blocks_refilled: int = 0  # only values changed: samples reused, changed values read
    blocks_parsed: int = 0  # parsed by prometheus_client
    lines: int = 0  # non-blank lines
    lines_parsed: int = 0  # in blocks parsed by prometheus_client
    values_read: int = 0  # values read in refilled blocks
    page_reused: bool = False  # the page but its values was the last one (``PagePlan``)


class ParseCache:
    """One source's parsed blocks, kept from one scrape to the next; ``parse`` equals
    ``list(text_string_to_metric_families(text))``. Blocks and skeletons absent from the last
    page are dropped, so it holds about one page's worth. Not thread-safe: one per source, used
    by one scrape at a time. The families it returns are shared with later calls' results: read
    them, never change them."""

    def __init__(self, refill: bool = True) -> None:
        """``refill=False`` reuses unchanged blocks only and parses every changed one (what the
        benchmark compares against)."""
        self.refill = refill
        # A block's text -> its families, skeleton and template (None where it has none).
        self._blocks: dict[str, tuple[list[Metric], str, _Template | None]] = {}
        self._templates: dict[str, _Template] = {}
        self.stats = CacheStats()
        # For ``prefilter``: the model label of each series (a sample line but its value).
        self.model_labels: dict[str, str | None] = {}
        # The last parse's blocks in order: their lines and templates (None: parsed whole).
        self.last_blocks: list[tuple[int, _Template | None]] = []
        # For ``map_page``: the last page's lines but their values, and where each value goes.
        self.page: PagePlan | None = None

    def parse(self, text: str) -> list[Metric]:
        stats = CacheStats()
        blocks: dict[str, tuple[list[Metric], str, _Template | None]] = {}
        templates: dict[str, _Template] = {}
        out: list[Metric] = []
        last_blocks: list[tuple[int, _Template | None]] = []
        for block in split_blocks(text):
            stats.blocks += 1
            stats.lines += len(block)
            body = "\n".join(block)
            entry = self._blocks.get(body) or blocks.get(body)
            if entry is not None:
                stats.blocks_same += 1
                families, skeleton, template = entry
            elif not self.refill:
                families = parse_block(block)
                skeleton, template = "", None
                stats.blocks_parsed += 1
                stats.lines_parsed += len(block)
            else:
                skeleton, values, slots = _skeleton(block)
                template = templates.get(skeleton) or self._templates.get(skeleton)
                # The skeleton holds every value that is not a plain number: these all are.
                read = None if template is None else template.refill(values)
                if template is not None and read is not None:
                    stats.values_read += read
                    stats.blocks_refilled += 1
                    families = template.families
                else:
                    families = parse_block(block)
                    template = _make_template(families, block, values, slots)
                    stats.blocks_parsed += 1
                    stats.lines_parsed += len(block)
            if template is not None:
                templates.setdefault(skeleton, template)
            blocks[body] = (families, skeleton, template)
            last_blocks.append((len(block), template))
            out += families
        self._blocks, self._templates, self.stats = blocks, templates, stats
        self.last_blocks = last_blocks
        return out


# The page plan: a live page is the last one with other numbers.
#
# Scrape after scrape, a serving stack's page keeps its lines and moves their values (most of
# them, every second, under load). The parse cache still had to find that out line by line:
# the prefilter's name test, the blocks cut and joined, each block's skeleton. A ``PagePlan``
# keeps the last page's lines with their last word cut off (``rpartition(" ")``: a sample
# line's value), and for each line what a change of that word may do:
#  - _IGNORED: a sample line of a family no dialect reads (its name lies before the cut);
#  - _NUMBER: a wanted sample line dropped for its model: any plain number keeps it dropped;
#  - _VALUE: a value of a kept line, read into its block's template (``_Template.refill``);
#  - _FIXED: anything else (a comment, a line with no space, a value the parser reads itself):
#    a change there is a new page, prefiltered and parsed as one.
# A page whose lines but their last words are the plan's, and whose changed words are all
# allowed, is the plan's page with new values: its prefilter and parse are the plan's, with
# the changed values read into the same templates. The result equals ``prefilter`` then
# ``ParseCache.parse`` (tests/unit/test_page_plan.py).
_IGNORED, _NUMBER, _VALUE, _FIXED = 0, 1, 2, 3


def _cut(lines: list[str]) -> tuple[list[str], list[str]]:
    """Each line but its last word, and that word."""
    heads: list[str] = []
    words: list[str] = []
    for line in lines:
        head, _, word = line.rpartition(" ")
        heads.append(head)
        words.append(word)
    return heads, words


@dataclass
class PagePlan:
    heads: list[str]
    words: list[str]
    kinds: list[int]  # per line, what a change of its word may do
    kept_at: list[int]  # the kept lines, in order
    # Per block of the kept text: its template and the page's lines of its values, in order.
    blocks: list[tuple[_Template, list[int]]]
    kept: Prefiltered
    max_models: int | None

    @classmethod
    def build(
        cls, text: str, kept: Prefiltered, cache: ParseCache, max_models: int | None
    ) -> PagePlan | None:
        """The plan of a page just prefiltered and parsed with ``cache``; None where its kept
        lines are not the parser's lines as they stand (surrounding blanks), or a block has
        no template."""
        lines = text.split("\n")
        heads, words = _cut(lines)
        kinds = [_FIXED] * len(lines)
        for i, line in enumerate(lines):
            if heads[i] and line[0] != "#" and _line_name(line) not in WANTED:
                kinds[i] = _IGNORED
        for i in kept.capped_at:
            # A number has no quote: the model label the prefilter reads stays the head's.
            if number(words[i]) is not None:
                kinds[i] = _NUMBER
        blocks: list[tuple[_Template, list[int]]] = []
        position = 0
        for count, template in cache.last_blocks:
            at = kept.kept_at[position : position + count]
            position += count
            if template is None or any(lines[i].strip() != lines[i] for i in at):
                return None
            slots = [
                i for i in at if lines[i][0] != "#" and heads[i] and number(words[i]) is not None
            ]
            if [words[i] for i in slots] != template.values:
                return None  # not the template's reading of these lines
            for i in slots:
                kinds[i] = _VALUE
            blocks.append((template, slots))
        if position != len(kept.kept_at):
            return None
        return cls(heads, words, kinds, kept.kept_at, blocks, kept, max_models)

    def reuse(
        self, text: str, cache: ParseCache, max_models: int | None
    ) -> tuple[Prefiltered, list[Sample]] | None:
        """``text`` prefiltered and its samples, read by this plan; None when it is another
        page (then it is prefiltered and parsed as one, and a new plan made)."""
        if max_models != self.max_models:
            return None
        lines = text.split("\n")
        if len(lines) != len(self.heads):
            return None
        heads, words = _cut(lines)
        if heads != self.heads:
            return None
        kinds, old = self.kinds, self.words
        for i, word in enumerate(words):
            if word != old[i]:
                kind = kinds[i]
                if kind == _IGNORED:
                    continue
                if kind == _FIXED or len(lines[i]) > MAX_LINE_CHARS:
                    return None  # another page (or a line the prefilter now drops as long)
                if kind == _NUMBER and number(word) is None:
                    return None  # (a value is read, and refused if not a number, below)
        stats = CacheStats(page_reused=True)
        samples: list[Sample] = []
        for template, slots in self.blocks:
            changed = template.refill([words[i] for i in slots])
            if changed is None:
                return None  # a value that is not a plain number: parsed as a new page
            stats.blocks += 1
            stats.values_read += changed
            if changed:
                stats.blocks_refilled += 1
            else:
                stats.blocks_same += 1
            for family in template.families:
                samples += family.samples
        self.words = words
        keep = [lines[i] for i in self.kept_at]
        keep.append("")
        kept = self.kept
        cache.stats = stats
        return (
            Prefiltered("\n".join(keep), kept.models_seen, kept.models_kept, kept.long_lines,
                        kept.kept_at, kept.capped_at),
            samples,
        )  # fmt: skip


# The largest page mapped on the caller's loop when its plan read the page before: about a
# millisecond to read by the plan, a few to parse whole on the scrape its lines change.
INLINE_MAX_CHARS = 128 * 1024

_HTML = re.compile(r"^\s*<(!doctype|html|head|body|\?xml)", re.IGNORECASE)


def _refuse_html(text: str) -> None:
    if _HTML.match(text):
        raise ScrapeError("not a Prometheus metrics page (got HTML)")


def parse_families(
    text: str, *, filtered: bool = True, cache: ParseCache | None = None
) -> list[Metric]:
    """The families on a page (of the wanted ones only, if ``filtered``); with a ``cache``,
    kept from the same source's last page, only what changed since is parsed again."""
    _refuse_html(text)
    body = prefilter(text).text if filtered else text
    with _malformed():
        if cache is not None:
            return cache.parse(body)
        return parse_text(body)


def page_samples(text: str, cache: ParseCache | None = None) -> list[Sample]:
    """The samples of ``parse_families(text, filtered=False, cache=cache)``, in order; a
    one-shot read (no cache) makes no families where it need not."""
    with _malformed():
        if cache is not None:
            return [s for family in cache.parse(text) for s in family.samples]
        return parse_samples(text)


@contextlib.contextmanager
def _malformed() -> Iterator[None]:
    """What the parser raises for a malformed page, as one ``ScrapeError`` line."""
    try:
        yield
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


def map_page(
    source: str,
    text: str,
    max_engines: int = DEFAULT_MAX_ENGINES,
    cache: ParseCache | None = None,
) -> ScrapeResult:
    """Parse a page's text and map it to engines; any problem becomes ``error``. A poller
    passes the source's ``cache`` (a one-shot reader has none to keep)."""
    try:
        _refuse_html(text)  # before the prefilter, which would drop every HTML line
        plan = cache.page if cache is not None else None
        reused = None
        if plan is not None and cache is not None:
            reused = plan.reuse(text, cache, max_engines)
        if reused is not None:
            kept, samples = reused
        else:
            kept = prefilter(text, max_models=max_engines, cache=cache)
            if cache is not None:
                cache.page = None  # until this page is parsed whole
            samples = page_samples(kept.text, cache)
            if cache is not None:
                cache.page = PagePlan.build(text, kept, cache, max_engines)
    except ScrapeError as exc:
        return ScrapeResult(source, error=str(exc))
    index = index_samples(samples)
    mapped = map_samples(source, index)
    engines, warnings = mapped.engines, mapped.warnings
    if kept.long_lines:
        warnings.insert(0, long_lines_dropped(kept.long_lines))
    if not engines:
        shown = ", ".join(clip(name, 60) for name in family_names(text)) or "empty page"
        dropped = f"; {long_lines_dropped(kept.long_lines)}" if kept.long_lines else ""
        return ScrapeResult(
            source, error=clip(f"no known serving metrics (first families: {shown}){dropped}")
        )
    if kept.models_seen > kept.models_kept:
        warnings.insert(0, _too_many(kept.models_seen, max_engines))
    elif len(engines) > max_engines:  # several dialects on one page, each under the cap
        warnings.insert(0, _too_many(len(engines), max_engines))
        engines = engines[:max_engines]
    return ScrapeResult(source, engines, warnings=warnings, page=kept.text)


async def fetch(client: httpx.AsyncClient, url: str, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """GET ``url`` and return its text, refusing bodies over ``max_bytes``."""
    try:
        async with get_stream(client, url) as response:
            if response.status_code != 200:
                raise ScrapeError(f"HTTP {response.status_code} {response.reason_phrase}".strip())
            body = await read_bounded(response, max_bytes)
    except BodyRefused as exc:
        raise ScrapeError(str(exc)) from None
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
    return decode_body(body)


async def scrape(
    client: httpx.AsyncClient,
    url: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    total_timeout_s: float = DEFAULT_TIMEOUT_S,
    max_engines: int = DEFAULT_MAX_ENGINES,
    cache: ParseCache | None = None,
) -> ScrapeResult:
    """Fetch and map one source; never raises for anything the network or the page does.
    A poller passes the same ``cache`` to each scrape of a source, never to two at once."""
    try:
        # httpx's timeouts are per read; a server that trickles bytes needs a bound on the whole.
        text = await asyncio.wait_for(fetch(client, url, max_bytes), total_timeout_s)
    except asyncio.TimeoutError:
        return ScrapeResult(url, error=f"timed out after {total_timeout_s:g} s ({_host(url)})")
    except ScrapeError as exc:
        return ScrapeResult(url, error=str(exc), unreachable=exc.unreachable)
    # Parsing is CPU work (milliseconds for a big page): keep it off the caller's event loop.
    # A small page its plan read last time is the exception: it is read by the plan again
    # (a line scan, a fraction of a millisecond) or, once, parsed whole, and handing it to a
    # thread and back (two wake-ups) cost as much CPU as reading it.
    if cache is not None and cache.stats.page_reused and len(text) <= INLINE_MAX_CHARS:
        return map_page(url, text, max_engines, cache)
    return await asyncio.to_thread(map_page, url, text, max_engines, cache)


def _host(url: str) -> str:
    return httpx.URL(url).netloc.decode() or url
