"""The footer every screen shows: its essential keys first, so a narrow terminal cuts the others.

Textual's ``Footer`` lists the focused widget's keys before the screen's and the app's, in one
line that is cut at the screen's edge: at 80 columns the run screen lost ``q Back``, ``s Stop``,
``P Probe`` and ``y Why?`` behind the log's search keys. This one lists help and back first,
then the screen's own keys, then the app's, then the focused widget's; below
:data:`COMPACT_BELOW` columns it uses Textual's compact style (less space between keys). It shows
the keys that fit whole and leaves out the rest (never half a key at the edge); every key stays in
the help screen (``?``) and the command palette (``^p``, always shown).
"""

from __future__ import annotations

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.binding import ActiveBinding
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

#: Binding ids shown before any other, on every screen.
FIRST_IDS: tuple[str, ...] = ("app.help", "app.back")
#: Narrower than this (columns), the footer is compact.
COMPACT_BELOW = 120
#: Cells around a key's text (``k Desc``): its padding and the gap to the next one, by style.
KEY_PAD = {False: 3, True: 1}


def key_width(key: str, description: str, compact: bool) -> int:
    """The cells one footer key takes: its key, a space, its description, and the padding."""
    return cell_len(key) + 1 + cell_len(description) + KEY_PAD[compact]


def footer_order(active: list[ActiveBinding], screen: object, app: object) -> list[ActiveBinding]:
    """``active`` in footer order: help and back, the screen's keys, the app's, the widgets'."""

    def rank(item: ActiveBinding) -> int:
        if item.binding.id in FIRST_IDS:
            return 0
        if item.node is screen:
            return 1
        return 2 if item.node is app else 3

    return sorted(active, key=rank)  # stable: each namespace keeps its declared order


class KeyFooter(Footer):
    """Textual's footer with the essential keys first (see the module's docstring)."""

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        active = self.screen.active_bindings
        palette_key = self.app.COMMAND_PALETTE_BINDING
        shown: dict[str, ActiveBinding] = {}  # action -> its first binding
        for item in footer_order([a for k, a in active.items() if a.binding.show and k != palette_key], self.screen, self.app):
            shown.setdefault(item.binding.action, item)
        compact = self.app.size.width < COMPACT_BELOW
        room = self.app.size.width
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE and palette_key in active:
            palette = active[palette_key].binding
            room -= key_width(self.app.get_key_display(palette), palette.description, compact) + 1
        for item in shown.values():
            binding = item.binding
            room -= key_width(self.app.get_key_display(binding), binding.description, compact)
            if room < 0:
                break  # the rest are in the help screen and the palette
            yield FooterKey(
                binding.key, self.app.get_key_display(binding), binding.description, binding.action,
                disabled=not item.enabled, tooltip=item.tooltip,
            ).data_bind(compact=Footer.compact)
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE and palette_key in active:
            item = active[palette_key]
            binding = item.binding
            yield FooterKey(
                binding.key, self.app.get_key_display(binding), binding.description, binding.action,
                classes="-command-palette", disabled=not item.enabled, tooltip=binding.tooltip or binding.description,
            )

    def on_resize(self, event: events.Resize) -> None:
        compact = event.size.width < COMPACT_BELOW
        if compact != self.compact:
            self.compact = compact
        self.refresh(recompose=True)  # the keys that fit whole at this width
