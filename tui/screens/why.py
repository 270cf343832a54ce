"""The "Why?" view: a run's stored diagnosis (ranked findings, evidence, next setting), or run it.

Everything shown is ``engines.diagnosis.report.lines``: the same words as ``servelab diagnose``.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from servelab.engines.diagnosis.artifacts import diagnose_run
from servelab.engines.diagnosis.stored import load_diagnosis
from servelab.engines.diagnosis.report import lines
from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import HostUnreachable
from servelab.tui.face import servelab_app
from servelab.tui.widgets.key_footer import KeyFooter

_SEVERITY_STYLE = {"[error]": "bold red", "[warning]": "bold yellow", "[info]": "cyan"}


def styled(text_lines: list[str]) -> Text:
    """Finding headlines coloured by their severity tag; the rest as it is."""
    out = Text()
    for line in text_lines:
        style = next((s for tag, s in _SEVERITY_STYLE.items() if tag in line.split(":", 1)[0]), "")
        out.append(line + "\n", style=style)
    return out


class WhyScreen(Screen[None]):
    """Why acceptance is what it is, for one or more runs."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("D", "diagnose", "Diagnose now", id="why.diagnose"),
    ]

    def __init__(self, run_ids: list[str]) -> None:
        super().__init__()
        self.run_ids = run_ids
        self.texts: dict[str, list[str]] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll():
            yield Static("reading diagnoses…", id="why-body")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "why?"
        self.sub_title = ", ".join(self.run_ids)
        self._load()

    def _show(self) -> None:
        body: list[str] = []
        for run_id in self.run_ids:
            body += self.texts.get(run_id, [f"{run_id}: …"]) + [""]
        self.query_one("#why-body", Static).update(styled(body))

    @work(exclusive=True, group="why", exit_on_error=False)
    async def _load(self) -> None:
        runs = servelab_app(self).runs()
        for run_id in self.run_ids:
            try:
                diag = await load_diagnosis(runs, run_id)
                self.texts[run_id] = lines(diag) if diag else [f"{run_id}: not diagnosed yet: press D while it serves (or run 'servelab diagnose {run_id}')"]
            except (ServelabError, HostUnreachable, OSError) as exc:
                self.texts[run_id] = [f"{run_id}: {exc}"]
        self._show()

    def action_diagnose(self) -> None:
        if servelab_app(self).readonly:
            self.notify("read-only: diagnosing sends requests to the server", timeout=3)
            return
        self._diagnose()

    @work(exclusive=True, group="why-run", exit_on_error=False)
    async def _diagnose(self) -> None:
        runs = servelab_app(self).runs()
        for run_id in self.run_ids:
            def say(msg: str, run_id: str = run_id) -> None:
                self.texts[run_id] = [f"{run_id}: diagnosing… {msg}"]
                self._show()

            try:
                self.texts[run_id] = lines(await diagnose_run(runs, run_id, progress=say))
            except (ServelabError, HostUnreachable, OSError) as exc:
                self.texts[run_id] = [f"{run_id}: {exc}"]
            self._show()
