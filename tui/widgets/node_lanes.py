"""A multi-node run's stage rows: one line per node (per rank for SGLang), each with its state and
the stage it is in, drawn like the run screen's stage bars (the rows come from engines/nodes/view.py)."""

from __future__ import annotations

from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from servelab.engines.nodes.view import LaneView
from servelab.engines.runs.state import StageState
from servelab.tui.widgets.run_view_model import format_duration, stage_row
from servelab.tui.widgets.stage_timeline import BAR_WIDTH


def lanes_table(lanes: list[LaneView]) -> Table:
    """``n1 box TP1  loading  ✓ weights  [bar]  1/1  0s``: one row per lane."""
    table = Table(box=None, show_header=False, padding=(0, 1), expand=True)
    table.add_column(no_wrap=True)  # the lane
    table.add_column(no_wrap=True)  # its state
    table.add_column(width=1, no_wrap=True)
    table.add_column(no_wrap=True, width=11)
    table.add_column(width=BAR_WIDTH, no_wrap=True)
    table.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
    for lv in lanes:
        state = lv.state
        stage = lv.stage
        if stage is None:
            table.add_row(Text(lv.lane.label, style="bold"), Text(state, style=state.style), Text("·", style="dim"), Text("waiting", style="dim"), Text(""), Text(""))
            continue
        row = stage_row(stage)
        state_of_stage = StageState(row.status)
        mark, style = state_of_stage.mark, state_of_stage.style
        bar: ProgressBar | Text
        if row.total:
            bar = ProgressBar(total=row.total, completed=min(row.done or 0.0, row.total), width=BAR_WIDTH,
                              complete_style="red" if row.status == StageState.FAILED else "green" if row.status == StageState.DONE else "cyan")
        elif row.status == StageState.RUNNING:
            bar = ProgressBar(total=None, width=BAR_WIDTH, pulse=True)
        elif row.status == StageState.DONE:
            bar = ProgressBar(total=1, completed=1, width=BAR_WIDTH, complete_style="green")
        else:
            bar = Text("")
        info = [x for x in (f"{row.done:g}/{row.total:g}" if row.total else "", row.rate or "") if x]
        if row.elapsed_s is not None:
            info.append(format_duration(row.elapsed_s))
        if row.detail:
            info.append(row.detail)
        table.add_row(
            Text(lv.lane.label, style="bold"), Text(state, style=state.style), Text(mark, style=style),
            Text(row.label, style=style), bar, Text("  ".join(info), overflow="ellipsis", no_wrap=True),
        )
    return table
