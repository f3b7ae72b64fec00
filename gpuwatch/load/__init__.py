"""The bursty load generator, usable as a library (``gpuwatch demo`` drives it in-process).

The names below load their module on first use (PEP 562): the runner brings aiohttp, httpx and
prometheus_client, which ``gpuwatch --help`` and ``gpuwatch plan kv`` (reading ``load.spec``
only) must not pay for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuwatch.load.report import build as build_report
    from gpuwatch.load.runner import LoadRun, NothingListening, Result
    from gpuwatch.load.spec import Dist, LoadSpec, Pattern, SpecError

_HOMES = {
    "build_report": ("gpuwatch.load.report", "build"),
    "LoadRun": ("gpuwatch.load.runner", "LoadRun"),
    "NothingListening": ("gpuwatch.load.runner", "NothingListening"),
    "Result": ("gpuwatch.load.runner", "Result"),
    "Dist": ("gpuwatch.load.spec", "Dist"),
    "LoadSpec": ("gpuwatch.load.spec", "LoadSpec"),
    "Pattern": ("gpuwatch.load.spec", "Pattern"),
    "SpecError": ("gpuwatch.load.spec", "SpecError"),
}

__all__ = [
    "Dist",
    "LoadRun",
    "LoadSpec",
    "NothingListening",
    "Pattern",
    "Result",
    "SpecError",
    "build_report",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home[0]), home[1])
