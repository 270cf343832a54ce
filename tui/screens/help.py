"""The help screen: every key active where ``?`` was pressed, with the id used to rebind it."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import ActiveBinding, Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from servelab.tui.keymap import keymap_path

GENERAL = (
    "Every screen: ? help · q back (quits on the first screen) · ctrl+p command palette · R runs · M campaigns · ctrl+t high contrast.",
    "Campaigns (M): S start (confirmed; X without preflight) · enter open · in one: s stop (confirmed) · u resume · r refresh.",
    "Log: / search (regex or text) · n/N next/previous match · F filter (hide non-matching) · f follow/pause · "
    "e first error · w wrap · z fold noise · j/k/g/G move.",
)


class HelpScreen(ModalScreen[None]):
    """Keys of the screen below, as they are bound now (user overrides included)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "dismiss", "Close", id="help.close"),
    ]

    def __init__(self, bindings: dict[str, ActiveBinding], readonly: bool = False) -> None:
        super().__init__()
        self._shown_bindings = bindings
        self._readonly = readonly

    def compose(self) -> ComposeResult:
        table = Table(box=None, expand=True, header_style="bold")
        table.add_column("key", no_wrap=True)
        table.add_column("does")
        table.add_column("binding id", style="dim", no_wrap=True)
        # One row per (what it does, id), its keys in the order they were bound ("? f1", not "f1").
        rows: dict[tuple[str, str], list[str]] = {}
        ordered = sorted(self._shown_bindings.values(), key=lambda a: (a.binding.id is None, a.binding.id or ""))
        for active in ordered:
            binding = active.binding
            if binding.action in ("command_palette",) and binding.id is None:
                label = "command palette"
            else:
                label = binding.description or binding.action
            if not active.enabled:
                continue
            keys = rows.setdefault((label, binding.id or ""), [])
            shown = self.app.get_key_display(binding)
            if shown not in keys:
                keys.append(shown)
        for (label, binding_id), keys in rows.items():
            table.add_row(" ".join(keys), label, binding_id)
        with VerticalScroll(id="help-box"):
            yield Static(Text("Keys", style="bold"))
            for line in GENERAL:
                yield Static(Text(line))
            yield Static(table)
            mode = "read-only: launch, stop, edit and cleanup are hidden. " if self._readonly else ""
            yield Static(Text(f"{mode}Rebind in {keymap_path()} ([keys] \"binding id\" = \"key,key\"). Esc closes.", style="dim"))

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)
