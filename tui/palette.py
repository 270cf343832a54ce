"""The command palette reaches every action a key does on the screen it was opened from.

Each servelab binding active there (the screen's, the focused widget's and the app's, user
rebinds included) is one command, named by its description and tooltip with its key beside it,
e.g. ``Launch  (l)``: choosing it runs the same action in the same place as the key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from textual.binding import ActiveBinding
from textual.command import DiscoveryHit, Hit, Hits, Provider


def key_commands(screen: Any) -> Iterator[tuple[str, str, Callable[[], Any]]]:
    """(text, help, run it) for each action bound on ``screen`` now: one per action and place,
    only servelab's bindings (they carry an id), none that is disabled there."""
    app = screen.app
    seen: set[tuple[int, str]] = set()
    active: dict[str, ActiveBinding] = screen.active_bindings
    for node, binding, enabled, tooltip in active.values():
        if binding.id is None or not enabled or (id(node), binding.action) in seen:
            continue
        seen.add((id(node), binding.action))
        about = binding.tooltip or tooltip
        name = f"{binding.description or binding.action}" + (f" — {about}" if about else "")
        text = f"{name}  ({app.get_key_display(binding)})"
        yield text, f"key {app.get_key_display(binding)} · {binding.id}", partial(app.run_action, binding.action, node)


class KeyCommands(Provider):
    """Palette: every key of the screen below, by what it does."""

    async def discover(self) -> Hits:
        for text, help_text, run in key_commands(self.screen):
            yield DiscoveryHit(text, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, help_text, run in key_commands(self.screen):
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), run, text=text, help=help_text)
