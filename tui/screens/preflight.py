"""Preflight (and launch): each check appears as it ends; a launch starts only when all pass.

The drafter check's findings come as one line each under its check (severity, code, message).
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from servelab.engines.catalog.folder import Catalog
from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.nodes.group import launch_experiment
from servelab.engines.preflight.checks import Check, run_preflight
from servelab.tui.face import servelab_app
from servelab.tui.widgets.preflight_checks import checks_table

class PreflightScreen(ModalScreen[str | None]):
    """Dismisses with the new run id after a launch, else None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Close", id="preflight.close"),
    ]

    def __init__(self, catalog: Catalog, experiment: str, *, launch: bool, skip_preflight: bool = False) -> None:
        super().__init__()
        self.catalog = catalog
        self.experiment = experiment
        self.launch = launch
        #: Launch without the preflight (the operator said so: ``X``).
        self.skip_preflight = skip_preflight
        self.checks: list[Check] = []
        self.outcome: str = ""
        self.run_id: str | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="preflight-box"):
            verb = "Launch" if self.launch else "Preflight"
            yield Static(Text(f"{verb}: {self.experiment}", style="bold"), id="preflight-title")
            yield Static("", id="preflight-checks")
            yield Static("", id="preflight-outcome")
            yield Static(Text("Esc: close", style="dim"))

    def on_mount(self) -> None:
        self._show()
        self._run()

    def _show(self, running: bool = True) -> None:
        self.query_one("#preflight-checks", Static).update(checks_table(self.checks, running))
        self.query_one("#preflight-outcome", Static).update(Text(self.outcome, style="bold"))

    def _progress(self, check: Check) -> None:
        self.checks.append(check)
        self._show()

    @work(exclusive=True, group="preflight", exit_on_error=False)
    async def _run(self) -> None:
        if self.launch:
            await self._launch()
            return
        try:
            report = await run_preflight(self.catalog, self.experiment, progress=self._progress)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.outcome = f"✗ preflight could not run: {exc}"
            self._show(running=False)
            return
        self.checks = list(report.checks)
        self.outcome = ("✓ " if report.ok else "✗ ") + report.summary()
        self._show(running=False)

    async def _launch(self) -> None:
        """A launch runs its own preflight (which also applies the patch set): one pass, checks shown as
    they end; a multi-node experiment preflights every node (a line per node) and starts them all."""
        try:
            run_id = await launch_experiment(servelab_app(self).runs(), self.experiment, progress=self._progress, skip_preflight=self.skip_preflight)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.outcome = f"✗ launch refused: {exc}"
            self._show(running=False)
            self.notify(str(exc), title="launch refused", severity="error", timeout=10)
            return
        self.run_id = run_id
        servelab_app(self).preflights[run_id] = list(self.checks)  # the run screen shows them
        self.dismiss(run_id)

    def action_close(self) -> None:
        self.workers.cancel_group(self, "preflight")
        self.dismiss(self.run_id)
