"""The bursty load generator, usable as a library (``gpuwatch demo`` drives it in-process)."""

from gpuwatch.load.report import build as build_report
from gpuwatch.load.runner import LoadRun, NothingListening, Result
from gpuwatch.load.spec import Dist, LoadSpec, Pattern, SpecError

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
