"""Compressed answers are inflated a bounded piece at a time, in the codings we ask for only."""

from __future__ import annotations

import itertools
import zlib

import httpx
import pytest

from gpuwatch.httpclient import _PIECE, BodyRefused, _codings, _Inflater


def packed(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


def test_a_bomb_given_whole_inflates_one_bounded_piece_at_a_time() -> None:
    """Regression: httpx inflated each network chunk whole (a 64 KiB chunk of a bomb is 64 MiB)
    before the size limit was checked."""
    size = 64 * 1024 * 1024
    bomb = packed(b"\n" * size, zlib.MAX_WBITS | 16)
    pieces = _Inflater("gzip").feed(bomb)  # the whole bomb as one chunk
    first = list(itertools.islice(pieces, 8))
    assert all(0 < len(p) <= _PIECE for p in first)
    # Read to the end, nothing is lost: output zlib held back after a full piece comes out too.
    assert sum(map(len, first)) + sum(map(len, pieces)) == size


@pytest.mark.parametrize("wbits", [zlib.MAX_WBITS, -zlib.MAX_WBITS], ids=["zlib", "raw"])
def test_deflate_is_read_zlib_wrapped_or_raw(wbits: int) -> None:
    page = b"vllm:num_requests_running 1\n" * 1000
    inflater = _Inflater("deflate")
    data = packed(page, wbits)
    assert b"".join([*inflater.feed(data[:10]), *inflater.feed(data[10:])]) == page


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("br", "unsupported Content-Encoding 'br'"),
        ("gzip, zstd", "unsupported Content-Encoding 'zstd'"),
        ("gzip, gzip, gzip", "Content-Encoding with 3 codings"),
    ],
)
def test_codings_we_cannot_bound_are_refused(header: str, reason: str) -> None:
    response = httpx.Response(200, headers={"Content-Encoding": header})
    with pytest.raises(BodyRefused, match=reason):
        _codings(response)


def test_stacked_codings_are_undone_last_first() -> None:
    response = httpx.Response(200, headers={"Content-Encoding": "deflate, identity, gzip"})
    assert [i.coding for i in _codings(response)] == ["gzip", "deflate"]
