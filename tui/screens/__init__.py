"""Screens of the dashboard, one per module."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.dom import DOMNode

#: Modules whose classes carry rebindable ``Binding``s (imported lazily: Textual is heavy).
BINDING_MODULES: tuple[str, ...] = (
    "tui.screens.experiments",
    "tui.screens.run",
    "tui.screens.nodes_run",
    "tui.screens.runs",
    "tui.screens.compare",
    "tui.screens.why",
    "tui.screens.help",
    "tui.screens.preflight",
    "tui.screens.confirm",
    "tui.screens.campaigns",
    "tui.screens.campaign",
    "tui.widgets.log_view",
)


def all_binding_classes() -> list[type[DOMNode]]:
    """Every screen and widget class with BINDINGS (for the keymap check and the help screen)."""
    from textual.dom import DOMNode

    classes: list[type[DOMNode]] = []
    for name in BINDING_MODULES:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, DOMNode) and value.__module__ == name and "BINDINGS" in vars(value):
                classes.append(value)
    return classes
