"""The host view: every GPU of one host, live (``g`` on the runs list, for the highlighted run's host).

It draws ``engines.gpus.view.GpuView``, the object ``servelab gpus HOST`` prints: each GPU's memory,
utilisation and power, the processes holding it (a servelab run by id and experiment, or foreign) and
the campaign holding each GPU lock. Samples come from one long-lived sampler on the host
(``engines.gpus.stream.watch_host``), ended when the screen closes; a CPU host says "no GPU" once.
"""

from __future__ import annotations

import time
from contextlib import aclosing

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from servelab.engines.errors import ServelabError
from servelab.engines.gpus.stream import watch_host
from servelab.engines.gpus.view import GpuView, unnamed_runs
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.runs.records import RunRecord
from servelab.tui.face import servelab_app
from servelab.tui.widgets.gpu_rows import HOLDER_STYLE
from servelab.tui.widgets.key_footer import KeyFooter

#: Seconds between two listings of the host's runs (to name a run that holds a GPU).
RECORDS_EVERY_S = 5.0


class HostGpusScreen(Screen[None]):
    """One host's GPUs, live."""

    def __init__(self, host: str) -> None:
        super().__init__()
        self.host = host
        self.view: GpuView | None = None
        self.note = "sampling…"
        #: Samples shown so far.
        self.shown = 0

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="gpus-title", classes="title-bar")
        with VerticalScroll(id="gpus-box"):
            yield Static("", id="gpus-body")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "GPUs"
        self.sub_title = self.host
        self._draw()
        self._watch()

    @work(exclusive=True, group="gpus", exit_on_error=False)
    async def _watch(self) -> None:
        """Samples from one sampler on the host; leaving the screen cancels this worker, which ends it."""
        runs = servelab_app(self).runs()
        try:
            host = runs.host(self.host)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.note = str(exc)
            self._draw()
            return
        records: list[RunRecord] = []
        listed = 0.0
        async with aclosing(watch_host(host)) as samples:
            async for sample in samples:
                if isinstance(sample, str):
                    self.note = sample
                    self._draw()
                    continue
                if unnamed_runs(sample, records) and time.monotonic() - listed >= RECORDS_EVERY_S:
                    listed = time.monotonic()
                    try:
                        records = await runs.list(self.host)
                    except (ServelabError, HostUnreachable, OSError):
                        pass  # the runs stay unnamed (their ids are shown)
                self.view = GpuView.of(sample, records)
                self.shown += 1
                self.note = time.strftime("sampled %H:%M:%S", time.localtime(sample.t)) if sample.gpu else "nothing more is sampled"
                self._draw()

    def _draw(self) -> None:
        self.query_one("#gpus-title", Static).update(
            Text.assemble((f"GPUs of {self.host}", "bold"), f" · {self.note}", overflow="ellipsis", no_wrap=True)
        )
        if self.view is None:
            return
        body = Text(no_wrap=True, overflow="ellipsis")
        for i, (line, holder) in enumerate(self.view.entries()):
            if i:
                body.append("\n")
            style = HOLDER_STYLE[holder] if holder is not None else ("bold" if line.startswith("GPU ") else "")
            body.append(line, style=style)
        self.query_one("#gpus-body", Static).update(body)
