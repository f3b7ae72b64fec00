"""Maintainer scripts, run from the repository's root as ``python -m scripts.NAME``."""
