"""The built-in themes, as data (one TOML file each).

This folder sits at the top of the repository, where people look for it, and is installed as
the package ``gpuwatch.themes`` (``setup.py`` maps it), so an installed gpuwatch finds its
themes with ``importlib.resources`` wherever pip put them.
"""
