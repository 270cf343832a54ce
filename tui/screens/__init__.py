"""Screens of the dashboard, one per module."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.dom import DOMNode

#: Modules whose classes carry rebindable ``Binding``s (imported lazily: Textual is heavy).
BINDING_MODULES: tuple[str, ...] = (
    "servelab.tui.screens.experiments",
    "servelab.tui.screens.run",
    "servelab.tui.screens.nodes_run",
    "servelab.tui.screens.runs",
    "servelab.tui.screens.compare",
    "servelab.tui.screens.why",
    "servelab.tui.screens.help",
    "servelab.tui.screens.preflight",
    "servelab.tui.screens.confirm",
    "servelab.tui.screens.campaigns",
    "servelab.tui.screens.campaign",
    "servelab.tui.widgets.log_view",
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
