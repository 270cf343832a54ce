"""One experiment's runs over time, newest first (``H`` on the experiments list; the screen of
``servelab history EXP``): who launched each, when, its state, load time, acceptance, tok/s, speedup
and verdict, rehearsals marked. ``b`` chooses the highlighted run as the baseline and ``c`` compares the
highlighted run against it (``compare --baseline-run``); enter opens the run. It draws
``engines.runs.history.run_history``'s rows and decides nothing of its own."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Header, Static

from servelab.engines.errors import ServelabError
from servelab.engines.runs.history import HistoryRow, accept_text, run_history, speedup_text
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.runs.loadtime import load_text
from servelab.tui.face import servelab_app
from servelab.tui.navigation import OpenCompare, OpenRun, go
from servelab.tui.widgets.key_footer import KeyFooter
from servelab.tui.widgets.list_screen import Col, ListScreen, cursor_bindings

COLUMNS = (
    Col("run", "run", shrink=16), Col("started", "started", priority=3), Col("by", "by", shrink=8),
    Col("state", "state"), Col("load", "load"), Col("accept", "acc · len"), Col("tps", "tok/s"),
    Col("speedup", "speedup"), Col("verdict", "verdict", priority=2),
)


def _cells(r: HistoryRow, baseline: str | None) -> list[Text]:
    mark = " (rehearsal)" if r.rehearsal else ""
    chosen = " ◆" if r.run_id == baseline else ""
    return [
        Text(r.run_id + chosen, style="bold" if chosen else ("dim" if r.rehearsal else "")),
        Text(r.started_at.replace("T", " ")[:19]),
        Text(r.owner or "-"),
        Text(str(r.state) + mark, style=r.state.style),
        Text(load_text(r.load_s) or "-"),
        Text(accept_text(r.acceptance_rate, r.acceptance_length) or "-"),
        Text(f"{r.output_throughput:.1f}" if r.output_throughput is not None else "-"),
        Text(speedup_text(r.speedup, r.speedup_band) or "-"),
        Text(r.verdict or "-"),
    ]


class HistoryScreen(ListScreen[HistoryRow]):
    """An experiment's runs, newest first."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter,o", "open", "Open", id="history.open"),
        Binding("b", "baseline", "Baseline", tooltip="this run is the baseline the next compare is against", id="history.baseline"),
        Binding("c", "compare", "Compare", tooltip="the highlighted run against the chosen baseline run", id="history.compare"),
        Binding("r", "refresh", "Refresh", id="history.refresh"),
        *cursor_bindings("history"),
    ]

    def __init__(self, experiment: str) -> None:
        super().__init__()
        self.experiment = experiment
        self.rows: list[HistoryRow] = []
        self.baseline: str | None = None
        self.loaded = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="history-table", cursor_type="row", zebra_stripes=True)
        yield Static("reading the runs…", id="history-note", classes="muted")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "history"
        self.sub_title = self.experiment
        self.add_columns(COLUMNS)
        self._load()

    def action_refresh(self) -> None:
        self._load()

    @work(exclusive=True, group="history", exit_on_error=False)
    async def _load(self) -> None:
        try:
            rows = await run_history(servelab_app(self).runs(), self.experiment)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.query_one("#history-note", Static).update(Text(str(exc), style="red"))
            return
        self.rows = sorted(rows, key=lambda r: (r.started_at, r.run_id), reverse=True)
        self.loaded = True
        self._fill()

    def _fill(self) -> None:
        self.refill((r.run_id, _cells(r, self.baseline)) for r in self.rows)
        if not self.rows:
            note = f"no runs of {self.experiment} yet"
        else:
            chosen = f"baseline: {self.baseline} (c compares the highlighted run against it)" if self.baseline else "b: choose a baseline run"
            note = f"{len(self.rows)} run(s) · {chosen}"
        self.query_one("#history-note", Static).update(note)

    def row_chosen(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        row = self.current_row()
        if row is not None:
            go(self, OpenRun(row.run_id))

    def action_baseline(self) -> None:
        row = self.current_row()
        if row is None:
            return
        self.baseline = row.run_id
        self._fill()

    def action_compare(self) -> None:
        row = self.current_row()
        if row is None:
            return
        if self.baseline is None:
            self.notify("choose the baseline run first: b on its row", timeout=4)
        elif self.baseline == row.run_id:
            self.notify("that is the baseline run: highlight another run to compare against it", timeout=4)
        else:
            go(self, OpenCompare(run_ids=[self.baseline, row.run_id], baseline_run=self.baseline))
