"""The one TOML reader: the dashboard's config, the gate's config and the themes all read their
file here, so a hostile file is refused the same way everywhere: one ``ConfigError`` line, never
a traceback."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from gpuwatch.errors import ConfigError
from gpuwatch.fmt import clip


def read_toml(path: Path, label: str | None = None) -> dict[str, Any]:
    """The table in the file at ``path``; ``ConfigError`` starting with ``label`` (the path by
    default) when it cannot be read or is not TOML."""
    label = label or str(path)
    try:
        table: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{label}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{label}: not UTF-8 (byte {exc.start})") from None
    except ValueError as exc:  # TOMLDecodeError, and int() past 4300 digits
        raise ConfigError(f"{label}: invalid TOML: {clip(str(exc), 200)}") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise ConfigError(f"{label}: invalid TOML: nested too deep") from None
    return table
