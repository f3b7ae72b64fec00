"""Themes as data: the built-in ``themes/*.toml`` (and the user's ``~/.config/gpuwatch/themes``)
turned into Textual ``Theme`` objects. A bad file is skipped with one line naming it and the key.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.theme import Theme

from gpuwatch import config
from gpuwatch.errors import ConfigError
from gpuwatch.tomlfile import read_toml

# Installed as the package gpuwatch.themes (see setup.py); pip installs onto a file system, so
# the resource folder is a real directory.
BUILTIN_DIR = Path(str(importlib.resources.files("gpuwatch.themes")))
SEMANTIC = ("ok", "warn", "bad", "kv", "queue", "ttft")
COLOR_KEYS = (
    "primary",
    "secondary",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "success",
    "warning",
    "error",
    "boost",
)
# Fallbacks for CSS that names the semantic colours, whatever theme is active.
SEMANTIC_DEFAULTS = {
    "ok": "green",
    "warn": "yellow",
    "bad": "red",
    "kv": "magenta",
    "queue": "orange",
    "ttft": "cyan",
}


class ThemeFileError(ConfigError, ValueError):
    pass


def _color(path: Path, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ThemeFileError(f"theme {path}: key '{key}' must be a colour string, got {value!r}")
    if value.startswith("ansi_"):
        return value
    try:
        Color.parse(value)
    except ColorParseError:
        raise ThemeFileError(f"theme {path}: key '{key}' is not a colour: {value!r}") from None
    return value


def parse_theme(path: Path) -> Theme:
    data = read_toml(path, f"theme {path}")
    name = data.pop("name", None)
    if not isinstance(name, str) or not name:
        raise ThemeFileError(f"theme {path}: key 'name' is missing")
    kwargs: dict[str, Any] = {"name": name}
    for key, value in data.items():
        if key in COLOR_KEYS:
            kwargs[key] = _color(path, key, value)
        elif key in ("dark", "ansi"):
            if not isinstance(value, bool):
                raise ThemeFileError(f"theme {path}: key '{key}' must be true or false")
            kwargs[key] = value
        elif key == "variables":
            if not isinstance(value, dict):
                raise ThemeFileError(f"theme {path}: key 'variables' must be a table")
            kwargs["variables"] = {
                k: v
                if k.endswith("text-style") and isinstance(v, str)
                else _color(path, f"variables.{k}", v)
                for k, v in value.items()
            }
        else:
            raise ThemeFileError(f"theme {path}: unknown key '{key}'")
    if "primary" not in kwargs:
        raise ThemeFileError(f"theme {path}: key 'primary' is missing")
    missing = [k for k in SEMANTIC if k not in kwargs.get("variables", {})]
    if missing:
        raise ThemeFileError(f"theme {path}: key 'variables.{missing[0]}' is missing")
    return Theme(**kwargs)


def theme_dirs() -> list[Path]:
    return [BUILTIN_DIR, config.default_path().parent / "themes"]


def load_themes(dirs: list[Path] | None = None) -> tuple[list[Theme], list[str]]:
    """Every theme that parses, and a one-line warning for each file that does not."""
    themes: list[Theme] = []
    warnings: list[str] = []
    for folder in dirs if dirs is not None else theme_dirs():
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.toml")):
            try:
                themes.append(parse_theme(path))
            except ConfigError as exc:  # ThemeFileError, or read_toml's
                warnings.append(f"skipped {exc}")
    return themes, warnings
