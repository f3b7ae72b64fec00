"""gpuwatch: htop for LLM serving on a GPU node."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpuwatch")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
