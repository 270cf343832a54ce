"""The run screen's GPU rows: one line per GPU (memory bar, utilisation, power), its holders marked
this run's / another run's / foreign, and the notes (first allocation and peak, the flat-memory
hint, whether the GPUs came back after the stop). Draws ``engines.gpus.watch.GpuPanel`` only."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from servelab.engines.gpus.inventory import Holder
from servelab.engines.gpus.watch import GpuPanel

HOLDER_STYLE = {Holder.THIS_RUN: "green", Holder.OTHER_RUN: "yellow", Holder.FOREIGN: "red"}


class GpuRows(Static):
    """Hidden until there is a GPU to show (a CPU host says "no GPU" in the title, once)."""

    def __init__(self, id: str | None = None) -> None:
        super().__init__("", id=id)
        self._shown = ""

    def show(self, panel: GpuPanel) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, line in enumerate(panel.lines):
            if i:
                text.append("\n")
            style = HOLDER_STYLE.get(line.holder, "") if line.holder is not None else ("dim" if line.note else "bold")
            text.append(line.text, style=style)
        if text.plain != self._shown:
            self._shown = text.plain
            self.update(text)
        self.set_class(bool(panel.lines), "-shown")
