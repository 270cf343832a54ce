"""One started campaign: its points with their live state (the current one highlighted), the
results table and the recommendation, refreshed while it runs; stop (confirmed) and resume.

Reattaching is opening this screen: the queue runs on the host, so any dashboard, even one started
after the last was killed, reads the same ``state.json`` through ``engines.campaign.control.status``
and the same report through ``engines.campaign.report.build_report`` (what the CLI prints).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from servelab.engines.campaign import control
from servelab.engines.campaign.control import CampaignStatus
from servelab.engines.campaign.listing import CurrentStep, current_step
from servelab.engines.campaign.plots import CampaignPlots, plot_series
from servelab.engines.campaign.report import CampaignReport, build_report
from servelab.engines.catalog.folder import Catalog, load_catalog
from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import HostUnreachable
from servelab.tui.face import servelab_app, writable
from servelab.tui.navigation import Confirm, go
from servelab.tui.widgets.campaign_plots import CampaignCharts
from servelab.tui.widgets.campaign_view import current_text, points_table, reasons_text, recommendation_text, status_line
from servelab.tui.widgets.host_action import host_action
from servelab.tui.widgets.list_screen import poll_forever
from servelab.tui.widgets.key_footer import KeyFooter

#: How often the screen reads the campaign's state on its host.
REFRESH_SECONDS = 1.0


class CampaignScreen(Screen[None]):
    """A campaign run by id: state, points, figures, recommendation."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "stop", "Stop", id="campaign.stop"),
        Binding("u", "resume", "Resume", id="campaign.resume"),
        Binding("r", "refresh", "Refresh", id="campaign.refresh"),
    ]

    def __init__(self, campaign_id: str) -> None:
        super().__init__()
        self.campaign_id = campaign_id
        self.status: CampaignStatus | None = None
        self.report: CampaignReport | None = None
        self.plots: CampaignPlots | None = None
        self.current: CurrentStep | None = None
        self.problem: str | None = None
        self._cat: Catalog | None = None
        self._drawn: tuple[object, ...] | None = None
        #: Each point's state when the report was last built: a change rebuilds it.
        self._report_of: tuple[tuple[str, str], ...] | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="campaign-status", classes="title-bar")
        yield Static("", id="campaign-current")
        with VerticalScroll(id="campaign-body"):
            yield Static("", id="campaign-points")
            yield Static("", id="campaign-reasons")
            yield Static("", id="campaign-recommendation")
            yield CampaignCharts(id="campaign-charts")
        yield Static("", id="campaign-problem")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "campaign"
        self.sub_title = self.campaign_id
        self._draw()
        self._poll()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return writable(self, action, ("stop", "resume"))

    def _catalog(self) -> Catalog:
        """The folder, read once per screen (r reads it again): the poll does not re-read every file each second."""
        if self._cat is None:
            self._cat = load_catalog(servelab_app(self).folder)
        return self._cat

    # -- refreshing ----------------------------------------------------------------------------------
    @work(exclusive=True, group="campaign-poll", exit_on_error=False)
    async def _poll(self) -> None:
        await poll_forever(self._load, REFRESH_SECONDS)

    async def _load(self) -> None:
        try:
            catalog = self._catalog()
            st = await control.status(catalog, self.campaign_id)
            seen = tuple((p.name, p.status) for p in st.points)
            if seen != self._report_of:
                self.report = await build_report(servelab_app(self).runs(), self.campaign_id)
                self._report_of = seen
                self.plots = plot_series(self.report)
                self.query_one(CampaignCharts).show(self.plots)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.problem = str(exc)  # the last state read stays shown
            self._draw()
            return
        self._show(st)

    def _show(self, st: CampaignStatus) -> None:
        self.status, self.current, self.problem = st, current_step(st), None
        self._draw()

    def _draw(self) -> None:
        st = self.status
        # the same state as drawn last: nothing to lay out again (the poll reads it every second)
        drawn = (json.dumps(st.to_json(), sort_keys=True, default=str) if st is not None else None, id(self.report), self.current, self.problem, self.size.width)
        if drawn == self._drawn:
            return
        self._drawn = drawn
        self.query_one("#campaign-status", Static).update(status_line(st) if st is not None else Text(f"campaign {self.campaign_id}", style="bold"))
        self.query_one("#campaign-current", Static).update(current_text(st, self.current))
        self.query_one("#campaign-points", Static).update(points_table(st, self.report, self.current, self.size.width))
        self.query_one("#campaign-reasons", Static).update(reasons_text(st, self.report))
        self.query_one("#campaign-recommendation", Static).update(recommendation_text(self.report))
        self.query_one("#campaign-problem", Static).update(Text(self.problem, style="red") if self.problem else Text(""))

    def on_resize(self) -> None:
        self._draw()  # the table keeps fewer columns on a narrow terminal

    def action_refresh(self) -> None:
        self._cat = None
        self._refresh()

    @work(group="campaign-refresh", exclusive=True, exit_on_error=False)
    async def _refresh(self) -> None:
        """One reload at a time: a second key press cancels the first (its coroutine started, never orphaned)."""
        await self._load()

    # -- stop and resume ----------------------------------------------------------------------------
    def action_stop(self) -> None:
        if servelab_app(self).readonly:
            return
        st = self.status
        if st is not None and not st.supervisor_alive:
            self.notify(f"{self.campaign_id} is not running ({st.status})", timeout=3)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop()

        go(
            self,
            Confirm(f"Stop campaign {self.campaign_id}?", "SIGTERM to its supervisor on the host, which stops the current run; finished points are kept and u resumes."),
            answered,
        )

    @work(group="campaign-stop", exit_on_error=False)
    async def _stop(self) -> None:
        self.notify(f"stopping {self.campaign_id}…", timeout=3)
        await host_action(self, partial(self._apply, control.stop), "stop failed", f"{self.campaign_id} stopped", self._load, error_timeout=10)

    def action_resume(self) -> None:
        if not servelab_app(self).readonly:
            self._resume()

    @work(group="campaign-resume", exit_on_error=False)
    async def _resume(self) -> None:
        await host_action(self, partial(self._apply, control.resume), "resume failed", f"{self.campaign_id} resumed", self._load, error_timeout=10)

    async def _apply(self, change: Callable[[Catalog, str], Awaitable[CampaignStatus]]) -> None:
        """``change`` (stop, resume) to this campaign, and its new state shown."""
        self._show(await change(self._catalog(), self.campaign_id))
