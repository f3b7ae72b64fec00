"""No class of ours shadows a Textual name by accident.

A mixin once defined ``_flush``, which is ``App._flush(stderr=...)``: every write to stderr
while the dashboard ran raised TypeError. Our Textual subclasses may override only the hooks
Textual means to be overridden, and never one of its private names.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from textual.dom import DOMNode

import gpuwatch.tui

# Textual's documented hooks and class settings that our classes set on purpose.
HOOKS = {
    "BINDINGS",
    "CSS_PATH",
    "DEFAULT_CSS",
    "TITLE",
    "HORIZONTAL_BREAKPOINTS",
    "VERTICAL_BREAKPOINTS",
    "can_focus",
    "can_focus_children",
    "compose",
    "render",
    "render_line",
    "check_action",
    # The terminal diff layer (tui/termdiff.py) wraps the driver Textual would pick.
    "get_driver_class",
    "action_quit",
    "get_system_commands",
    "get_theme_variable_defaults",
    # A widget drawn line by line (widgets/panel.py) measures itself and redraws on restyle:
    # Textual's documented overrides for widgets that render their own content.
    "get_content_width",
    "get_content_height",
    "notify_style_update",
    "selection_updated",
}


def our_textual_classes() -> list[type[DOMNode]]:
    found: dict[str, type[DOMNode]] = {}
    for info in pkgutil.walk_packages(gpuwatch.tui.__path__, "gpuwatch.tui."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, DOMNode)
                and obj.__module__.startswith("gpuwatch.")
            ):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def textual_base(cls: type[DOMNode]) -> type[DOMNode]:
    return next(b for b in cls.__mro__[1:] if not b.__module__.startswith("gpuwatch."))


def test_classes_found() -> None:
    names = {c.__name__ for c in our_textual_classes()}
    assert {"GpuwatchApp", "Dashboard", "EnginePanel", "ConfirmationModal"} <= names


@pytest.mark.parametrize("cls", our_textual_classes(), ids=lambda c: c.__name__)
def test_no_textual_name_is_shadowed(cls: type[DOMNode]) -> None:
    base = textual_base(cls)
    # What Textual's metaclass writes into every subclass is not ours.
    blank = type("Blank", (base,), {})
    ours: set[str] = set()
    for klass in cls.__mro__:  # our mixins count as ours
        if klass.__module__.startswith("gpuwatch."):
            ours |= set(vars(klass))
    ours -= set(vars(blank))
    clashes = {name for name in ours & set(dir(base)) if not name.startswith("__")} - HOOKS
    assert not clashes, f"{cls.__name__} shadows {base.__name__}'s {sorted(clashes)}"
