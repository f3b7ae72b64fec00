"""The one base of gpuwatch's errors, and the exit codes every command ends with.

Every exception the package raises on purpose derives from ``GpuwatchError`` and carries the
exit code a command ends with when it reaches ``cli/main.py`` uncaught; that one place prints
the one-line failure (``gpuwatch <command>: <message>``), never a traceback. A class says its
code where it is declared: ``class SpecError(GpuwatchError, ValueError, exit_code=EXIT_USAGE)``
(those that were ``ValueError`` stay one, so every ``except ValueError`` still holds).
"""

from __future__ import annotations

from typing import Any, ClassVar

EXIT_OK = 0
EXIT_FAILED = 1  # a source, the gate or the server failed or refused; the reason is printed
EXIT_USAGE = 2  # bad arguments or config: nothing was done
EXIT_INTERRUPTED = 130  # Ctrl-C


class GpuwatchError(Exception):
    """What gpuwatch raises on purpose: a one-line message and the exit code it ends with."""

    exit_code: ClassVar[int] = EXIT_FAILED

    def __init_subclass__(cls, exit_code: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code


class ConfigError(GpuwatchError, exit_code=EXIT_USAGE):
    """A config file (the dashboard's, the gate's, a theme) refused: one line naming the file
    and the key."""
