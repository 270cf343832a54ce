"""Compare probed runs: the table and verdict of ``engines.verdict.compare``, best value per row
highlighted, a diff-only toggle, and a Markdown export for a chat or an issue."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from platformdirs import user_data_dir
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from servelab.engines.verdict.compare import Comparison, compare_runs, render
from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.runs.history import latest_probed
from servelab.engines.probe.paired import measure
from servelab.tui.face import servelab_app
from servelab.tui.navigation import OpenWhy, go
from servelab.tui.widgets.key_footer import KeyFooter

#: The narrowest a run's column gets (characters); more runs than fit scroll sideways.
MIN_RUN_COLUMN = 18
#: A column's cell padding (one each side) and the table's vertical scroll bar.
CELL_PADDING, SCROLLBAR = 2, 2


def run_column_width(table_width: int, label_width: int, runs: int) -> int:
    """Each run column's width: the runs share what the label column leaves, MIN_RUN_COLUMN at least."""
    free = table_width - label_width - CELL_PADDING - SCROLLBAR - runs * CELL_PADDING
    return max(MIN_RUN_COLUMN, free // max(runs, 1))


class CompareScreen(Screen[None]):
    """Runs side by side."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "toggle_diff", "Diff only", id="compare.diff-only"),
        Binding("m", "export_markdown", "Markdown", id="compare.export"),
        Binding("y", "why", "Why?", tooltip="diagnose: why it is slow or failed", id="compare.why"),
        Binding("a", "paired", "Paired A/B", tooltip="time the runs against their baseline in interleaved rounds (servelab ab)", id="compare.paired"),
    ]

    def __init__(self, experiments: list[str] | None = None, run_ids: list[str] | None = None, baseline_run: str | None = None) -> None:
        super().__init__()
        self.experiments = experiments or []
        self.run_ids = run_ids or []
        #: The run the others' speedups are against (chosen on the history screen), else each one's experiment baseline.
        self.baseline_run = baseline_run
        self.comparison: Comparison | None = None
        self.diff_only = False
        self.exported: Path | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="compare-table", zebra_stripes=True, cursor_type="row")
        yield Static("comparing…", id="compare-verdict")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "compare"
        self.sub_title = " vs ".join(self.experiments or self.run_ids)
        self._load()

    @work(exclusive=True, group="compare", exit_on_error=False)
    async def _load(self) -> None:
        runs = servelab_app(self).runs()
        try:
            run_ids = list(self.run_ids)
            if not run_ids:
                run_ids, missing = await latest_probed(runs, self.experiments)
                if missing:
                    raise ServelabError(f"no probed run of {', '.join(missing)}: launch it, wait for ready, press P on its run screen")
            self.comparison = await compare_runs(runs, run_ids, baseline_run=self.baseline_run)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.query_one("#compare-verdict", Static).update(Text(str(exc), style="bold red"))
            return
        self._fill()

    def _fill(self) -> None:
        comp = self.comparison
        if comp is None:
            return
        table = self.query_one(DataTable)
        table.clear(columns=True)
        label_width = max((len(row.label) for row in comp.rows), default=0)
        width = run_column_width(table.size.width or self.size.width, label_width, len(comp.runs))
        table.fixed_columns = 1  # the row labels stay when the runs scroll sideways
        table.header_height = 2 if any(len(run) > width for run in comp.runs) else 1
        table.add_column("", key="label", width=label_width)
        for i, run in enumerate(comp.runs):
            table.add_column(Text(run, overflow="fold"), key=f"run{i}", width=width)
        for row in comp.rows:
            if self.diff_only and row.kind == "identity" and not row.differs:
                continue
            best = row.best() if row.kind == "metric" else None
            cells = []
            for i, value in enumerate(row.values):
                style = "bold reverse green" if i == best else ("yellow" if row.kind == "identity" and row.differs else "")
                cells.append(Text(value, style=style))
            table.add_row(Text(row.label, style="bold" if row.kind == "metric" else "dim"), *cells)
        verdict = Text("VERDICT\n", style="bold")
        for line in comp.verdict:
            verdict.append(f"• {line}\n")
        if self.exported is not None:
            verdict.append(f"exported to {self.exported}", style="dim")
        self.query_one("#compare-verdict", Static).update(verdict)

    def on_resize(self) -> None:
        self._fill()  # the run columns share the new width

    def action_toggle_diff(self) -> None:
        self.diff_only = not self.diff_only
        self._fill()
        self.notify("showing rows that differ" if self.diff_only else "showing every row", timeout=2)

    def action_export_markdown(self) -> None:
        if self.comparison is None:
            return
        text = render(self.comparison, "markdown", diff_only=self.diff_only)
        folder = Path(user_data_dir("servelab")) / "exports"
        folder.mkdir(parents=True, exist_ok=True)
        name = "compare-" + "-vs-".join(r.split("-20")[0] for r in self.comparison.runs)[:120] + ".md"
        path = folder / name
        path.write_text(text, encoding="utf-8")
        self.exported = path
        self.app.copy_to_clipboard(text)
        self._fill()
        self.notify(f"Markdown copied to the clipboard and saved to {path}", timeout=6)

    def action_paired(self) -> None:
        """``servelab ab`` for each run with a speedup against a baseline run, then the comparison again."""
        comp = self.comparison
        if comp is None:
            return
        pairs = [(sp.baseline_run, run) for run, sp in comp.speedups.items() if sp.baseline_run]
        if not pairs:
            self.notify("no run here has a baseline run to pair with", severity="warning")
            return
        self._measure_pairs(pairs)

    @work(exclusive=True, group="compare-ab", exit_on_error=False)
    async def _measure_pairs(self, pairs: list[tuple[str, str]]) -> None:
        runs = servelab_app(self).runs()
        status = self.query_one("#compare-verdict", Static)
        try:
            for base, cand in pairs:
                status.update(Text(f"measuring {cand} against {base} in interleaved rounds…", style="bold"))
                await measure(runs, base, cand, progress=lambda msg: status.update(Text(f"ab: {msg}")))
            self.run_ids = list(self.comparison.runs) if self.comparison is not None else self.run_ids
        except (ServelabError, HostUnreachable, OSError) as exc:
            status.update(Text(str(exc), style="bold red"))
            return
        self._load()

    def action_why(self) -> None:
        if self.comparison is None:
            return
        go(self, OpenWhy(list(self.comparison.runs)))
