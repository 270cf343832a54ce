"""What the list screens (experiments, runs, campaigns) share: j/k on their table, the row under
the cursor, refilling the table in place, columns that fit the terminal, and the poll.

Columns fit by priority (:class:`Col`): when the table is wider than the screen, whole columns go
first, highest priority number first (priority 0, the state and the figures, never goes), then the
cells that may be cut are cut in the middle (a name keeps its start and its end). The detail pane or the run
screen shows what a narrow table leaves out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from rich.text import Text
from textual import on
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

R = TypeVar("R")

#: The cells DataTable pads each column with (one each side), and the vertical scrollbar's width.
PADDING, SCROLLBAR = 2, 2


@dataclass(frozen=True)
class Col:
    """A list column: ``priority`` 0 always shows, higher numbers go first when the screen is narrow;
    ``shrink``: the narrowest its cells may be cut to in the middle (None: never cut)."""

    key: str
    label: str
    priority: int = 0
    shrink: int | None = None


def middle_cut(text: Text, width: int) -> Text:
    """``text`` cut to ``width`` cells in the middle (``tiny-cpu…-eagle3``), its style kept."""
    if text.cell_len <= width or width < 3:
        return text
    plain = text.plain
    head = (width - 1) // 2
    tail = width - 1 - head
    return Text(plain[:head] + "…" + plain[len(plain) - tail :], style=text.style)


def fit_columns(cols: Sequence[Col], natural: Sequence[int], available: int) -> tuple[list[int], dict[int, int]]:
    """Which columns show and each one's cell width, for ``available`` cells: drop the highest priority
    number (the rightmost first) while the whole cells do not fit, then cut the shrinkable ones in the
    middle down to their floor. Returns (shown column indexes, width by index)."""
    shown = list(range(len(cols)))

    def over() -> int:
        return sum(natural[i] + PADDING for i in shown) - available

    while over() > 0 and (droppable := [i for i in shown if cols[i].priority > 0]):
        shown.remove(max(droppable, key=lambda i: (cols[i].priority, i)))
    widths = {i: natural[i] for i in shown}
    excess = over()
    for i in shown:
        floor = cols[i].shrink
        if excess <= 0:
            break
        if floor is not None and widths[i] > floor:
            cut = min(excess, widths[i] - floor)
            widths[i] -= cut
            excess -= cut
    return shown, widths  # what still does not fit scrolls sideways


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
    _columns: tuple[Col, ...] = ()
    _shown: tuple[int, ...] | None = None
    _table_rows: list[tuple[str, Sequence[Text]]] | None = None

    def add_columns(self, columns: Iterable[Col | tuple[str, str]]) -> None:
        """The table's columns, each a :class:`Col` or (key, label): a plain pair never goes."""
        self._columns = tuple(c if isinstance(c, Col) else Col(*c) for c in columns)
        self._shown = None
        self._show_columns(list(range(len(self._columns))))

    def _show_columns(self, shown: list[int]) -> None:
        table = self.query_one(DataTable)
        if self._shown == tuple(shown):
            return
        table.clear(columns=True)
        for i in shown:
            table.add_column(self._columns[i].label, key=self._columns[i].key)
        self._shown = tuple(shown)

    def on_resize(self) -> None:
        if self._table_rows is not None:
            self.refill(self._table_rows)

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
        """Replace the table's rows by ``rows`` (key, cells: one per column), the cursor kept where it
        was (or on the last row), the columns fitted to the screen's width."""
        table = self.query_one(DataTable)
        keep = table.cursor_row
        self._table_rows = list(rows)
        cols = self._columns
        natural = [max([len(c.label)] + [cells[i].cell_len for _, cells in self._table_rows if i < len(cells)]) for i, c in enumerate(cols)]
        width = self.size.width or table.size.width
        shown, widths = fit_columns(cols, natural, width - SCROLLBAR) if width else (list(range(len(cols))), dict(enumerate(natural)))
        self._show_columns(shown)
        table.clear()
        for i in shown:  # the fitted widths, set: DataTable measures added rows only once idle, which a busy screen may not be
            column = table.columns[ColumnKey(self._columns[i].key)]
            column.auto_width, column.width = False, widths[i]
        for key, cells in self._table_rows:
            table.add_row(*(middle_cut(cells[i], widths[i]) for i in shown), key=key)
        if table.row_count:
            table.move_cursor(row=min(max(keep, 0), table.row_count - 1))


async def poll_forever(load: Callable[[], Awaitable[None]], every_s: float) -> None:
    """``load()``, then again every ``every_s`` seconds (a screen's polling worker)."""
    while True:
        await load()
        await asyncio.sleep(every_s)
