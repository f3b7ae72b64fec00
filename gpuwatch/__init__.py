"""gpuwatch: htop for LLM serving on a GPU node."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # The installed version, read when asked (PEP 562): importlib.metadata costs ~30 ms, a third
    # of what `gpuwatch --help` may take.
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuwatch")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+unknown"
