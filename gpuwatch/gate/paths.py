"""One normal form for a request path: the lane, the caps and the upstream URL all use it.

A path that two parsers could read differently is a way around the lanes: ``/v1/x/%2e%2e/
completions`` is the default lane to a prefix match and ``/v1/completions`` to the upstream
once dot segments are resolved. So the gate resolves everything itself, once (RFC 3986
section 6.2.2: percent-decoding of unreserved characters, uppercase escapes, dot segments),
also folds duplicate slashes, and refuses what has no single meaning: an encoded ``/`` or
``\\``, a control character (NUL included), a ``..`` above the root, a malformed escape.
"""

from __future__ import annotations

import re

from gpuwatch.errors import EXIT_USAGE, GpuwatchError

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# pchar (RFC 3986) less "%", which is checked escape by escape.
_PCHAR = _UNRESERVED | frozenset("!$&'()*+,;=:@")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
# Already normal: segments of plain pchars, none empty, none starting with "." (so no "." or
# ".." segment), no escapes. Most paths are like this and skip the walk below.
_NORMAL = re.compile(r"(?:/[A-Za-z0-9\-_~!$&'()*+,;=:@][A-Za-z0-9\-._~!$&'()*+,;=:@]*)+/?")
MAX_PATH = 4096


class PathError(GpuwatchError, ValueError, exit_code=EXIT_USAGE):
    """A path with no single meaning; ``str()`` says why (bounded, printable)."""


def _segment(raw: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "%":
            match = _ESCAPE.match(raw, i)
            if match is None:
                raise PathError("malformed percent-escape in the path")
            code = int(match.group(1), 16)
            decoded = chr(code)
            if decoded in _UNRESERVED:
                out.append(decoded)
            elif decoded in "/\\" or code < 0x20 or code == 0x7F:
                raise PathError(f"encoded %{code:02X} is not allowed in the path")
            else:
                out.append(f"%{code:02X}")
            i += 3
        elif ch in _PCHAR:
            out.append(ch)
            i += 1
        else:
            raise PathError(f"character {ch!r} is not allowed in the path"[:80])
    return "".join(out)


def normalise(raw_path: str) -> str:
    """The normal form of a request target's path (no query); PathError when there is none."""
    if len(raw_path) > MAX_PATH:
        raise PathError(f"path is longer than {MAX_PATH} characters")
    if _NORMAL.fullmatch(raw_path):
        return raw_path
    return walk(raw_path)


def walk(raw_path: str) -> str:
    """``normalise`` without its shortcut for paths already normal (tests compare the two)."""
    if not raw_path.startswith("/"):
        raise PathError("path must start with /")
    segments: list[str] = []
    parts = raw_path[1:].split("/")
    for n, part in enumerate(parts):
        segment = _segment(part)
        last = n == len(parts) - 1
        if segment == "..":
            if not segments:
                raise PathError("'..' climbs above the root")
            segments.pop()
            if last:
                segments.append("")  # "/a/b/.." is "/a/": a directory
        elif segment == ".":
            if last:
                segments.append("")
        elif segment or last:
            # Empty segments are folded ("//"), except a trailing one: "/v1/x/" stays a
            # directory. Only the last part can add an empty segment, so there is never more
            # than one at the end.
            segments.append(segment)
    return "/" + "/".join(segments)


def split_target(raw_target: str) -> tuple[str, str]:
    """``/p?q`` -> (normal path, raw query without "?"); the query is passed on as sent."""
    path, _, query = raw_target.partition("?")
    if any(ord(c) < 0x21 or ord(c) > 0x7E for c in query):
        raise PathError("the query has a character that must be percent-encoded")
    return normalise(path), query
