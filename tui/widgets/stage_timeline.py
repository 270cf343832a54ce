"""Start-up stages as one line each: mark, name, progress bar with n/N, rate, ETA or duration."""

from __future__ import annotations

from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from servelab.engines.runs.state import StageState
from servelab.tui.widgets.run_view_model import StageRow, format_duration

BAR_WIDTH = 22


def stage_table(stages: list[StageRow], *, header: Text | None = None) -> Table:
    """A rich table of the stages (also used by the tmux test through the screen)."""
    table = Table(box=None, show_header=False, padding=(0, 1), expand=True, title=header, title_justify="left")
    table.add_column(width=1, no_wrap=True)
    table.add_column(no_wrap=True, width=11)
    table.add_column(width=BAR_WIDTH, no_wrap=True)
    table.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
    for stage in stages:
        state = StageState(stage.status)
        mark, style = state.mark, state.style
        name = Text(stage.label, style=style)
        bar: ProgressBar | Text
        if stage.total:
            done = stage.done or 0.0
            bar = ProgressBar(total=stage.total, completed=min(done, stage.total), width=BAR_WIDTH,
                              complete_style="red" if stage.status == StageState.FAILED else "green" if stage.status == StageState.DONE else "cyan")
            counts = f"{done:g}/{stage.total:g}"
        elif stage.status == StageState.RUNNING:
            bar = ProgressBar(total=None, width=BAR_WIDTH, pulse=True)
            counts = ""
        elif stage.status == StageState.DONE:
            bar = ProgressBar(total=1, completed=1, width=BAR_WIDTH, complete_style="green")
            counts = ""
        else:
            bar = Text("")
            counts = ""
        info: list[str] = [c for c in (counts, stage.rate or "") if c]
        if stage.status == StageState.RUNNING and stage.eta_s is not None:
            info.append(f"ETA {format_duration(stage.eta_s)}")
        if stage.elapsed_s is not None and stage.status != StageState.PENDING:
            info.append(format_duration(stage.elapsed_s))
        if stage.detail:
            info.append(stage.detail)
        table.add_row(Text(mark, style=style), name, bar, Text("  ".join(info), overflow="ellipsis", no_wrap=True))
    return table


class StageTimeline(Static):
    """The stage bars of one run; ``show`` replaces them.

    The table is laid out once per change and kept as styled text: a rich Table re-measures all
    its cells on every repaint, and the run screen repaints several times a second while following.
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._stages: list[StageRow] = []
        self._header: Text | None = None
        self._height = -1

    def show(self, stages: list[StageRow], header: Text | None = None) -> None:
        self._stages, self._header = stages, header
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        width = self.size.width or self.app.size.width
        if width <= 0:
            return
        console = self.app.console
        lines = console.render_lines(stage_table(self._stages, header=self._header), console.options.update_width(width), pad=False)
        text = Text("\n").join(Text.assemble(*((seg.text, seg.style or "") for seg in line if not seg.control)) for line in lines)
        # A screen layout only when the table's height changes: live figures redraw in place.
        self.update(text, layout=len(lines) != self._height)
        self._height = len(lines)
