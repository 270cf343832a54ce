"""What the list screens (experiments, runs, campaigns) share: j/k on their table, and the poll."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from textual.screen import Screen
from textual.widgets import DataTable


class ListScreen(Screen[None]):
    """A screen around one :class:`DataTable`: its ``cursor_down``/``cursor_up`` actions move the
    table's cursor (each screen binds them to its own keys and binding ids)."""

    def action_cursor_down(self) -> None:
        self.query_one(DataTable).action_cursor_down()

    def action_cursor_up(self) -> None:
        self.query_one(DataTable).action_cursor_up()


async def poll_forever(load: Callable[[], Awaitable[None]], every_s: float) -> None:
    """``load()``, then again every ``every_s`` seconds (a screen's polling worker)."""
    while True:
        await load()
        await asyncio.sleep(every_s)
