"""What the list screens (experiments, runs, campaigns) share: j/k on their table, the row under
the cursor, refilling the table in place, and the poll."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Generic, TypeVar

from rich.text import Text
from textual import on
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable

R = TypeVar("R")


def cursor_bindings(prefix: str) -> list[Binding]:
    """j/k moving the table's cursor, with binding ids ``<prefix>.down`` and ``<prefix>.up``."""
    return [
        Binding("j", "cursor_down", "Down", show=False, id=f"{prefix}.down"),
        Binding("k", "cursor_up", "Up", show=False, id=f"{prefix}.up"),
    ]


class ListScreen(Screen[None], Generic[R]):
    """A screen around one :class:`DataTable` whose rows are ``self.rows``: its ``cursor_down``/
    ``cursor_up`` actions move the table's cursor (each screen binds them with :func:`cursor_bindings`)."""

    rows: list[R]

    def add_columns(self, columns: Iterable[tuple[str, str]]) -> None:
        """The table's columns, each (key, label)."""
        table = self.query_one(DataTable)
        for key, label in columns:
            table.add_column(label, key=key)

    def row_highlighted(self) -> None:
        """The cursor moved to another row: a screen with a detail pane redraws it."""

    def row_chosen(self) -> None:
        """Enter on a row (the table takes the key first): a screen opens what the row names."""

    @on(DataTable.RowHighlighted)
    def _row_highlighted(self) -> None:
        self.row_highlighted()

    @on(DataTable.RowSelected)
    def _row_selected(self) -> None:
        self.row_chosen()

    def action_cursor_down(self) -> None:
        self.query_one(DataTable).action_cursor_down()

    def action_cursor_up(self) -> None:
        self.query_one(DataTable).action_cursor_up()

    def current_row(self) -> R | None:
        """The row under the table's cursor (None when the table is empty)."""
        table = self.query_one(DataTable)
        if not self.rows or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row]

    def select_row(self, key: str) -> None:
        """Move the cursor to the row added under ``key``."""
        table = self.query_one(DataTable)
        if key in table.rows:
            table.move_cursor(row=table.get_row_index(key))

    def refill(self, rows: Iterable[tuple[str, Sequence[Text]]]) -> None:
        """Replace the table's rows by ``rows`` (key, cells), the cursor kept where it was (or on the last row)."""
        table = self.query_one(DataTable)
        keep = table.cursor_row
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)
        if table.row_count:
            table.move_cursor(row=min(max(keep, 0), table.row_count - 1))


async def poll_forever(load: Callable[[], Awaitable[None]], every_s: float) -> None:
    """``load()``, then again every ``every_s`` seconds (a screen's polling worker)."""
    while True:
        await load()
        await asyncio.sleep(every_s)
