"""The campaigns screen: the files in ``experiments/campaigns/`` with their plans, and the campaigns
started on the hosts (running or finished), with start from here and open to follow one.

Thin: the entries, plans and statuses are ``engines.campaign.listing``'s; starting is
``engines.campaign.control.start`` (what ``servelab campaign start`` calls). A broken file is a row
with its first problem, never an exception; a host that does not answer is named, not "no campaigns".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Container, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from servelab.engines.campaign import control
from servelab.engines.campaign.control import CampaignStatus
from servelab.engines.campaign.listing import CampaignEntry, StartedCampaigns, campaign_entries_with_history, started_campaigns
from servelab.engines.campaign.plan import estimate_text
from servelab.engines.catalog.folder import Catalog, load_catalog
from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.runs.state import CampaignState
from servelab.tui.face import servelab_app, writable
from servelab.tui.navigation import Confirm, OpenCampaign, go
from servelab.tui.widgets.campaign_view import plan_renderable, state_text, status_line
from servelab.tui.widgets.list_screen import Col, ListScreen, cursor_bindings, poll_forever
from servelab.tui.widgets.key_footer import KeyFooter

#: How often the list asks the hosts about their campaigns.
REFRESH_SECONDS = 5.0


@dataclass(frozen=True)
class Row:
    """A campaign file, or a campaign started on a host."""

    key: str
    entry: CampaignEntry | None = None
    started: CampaignStatus | None = None


def _where(entry: CampaignEntry) -> str:
    """The file as the operator names it: relative to the experiments folder."""
    return f"{entry.path.parent.name}/{entry.path.name}"


class CampaignCommands(Provider):
    """Palette: each campaign (select it), start the highlighted one with or without preflight."""

    def _commands(self) -> list[tuple[str, object, str]]:
        screen = self.screen
        if not isinstance(screen, CampaignsScreen):
            return []
        out: list[tuple[str, object, str]] = []
        for row in screen.rows:
            title = f"campaign: {row.entry.name}" if row.entry is not None else f"campaign run: {row.started.id if row.started else row.key}"
            out.append((title, lambda r=row: screen.select_row(r.key), "select it"))
        if not servelab_app(screen).readonly:
            out.append(("campaign: start the highlighted one", screen.action_start, "preflight every load, then the queue runs on the host"))
            out.append(("campaign: start without preflight", screen.action_start_unchecked, "launch the loads without the preflight checks"))
        return out

    async def discover(self) -> Hits:
        for title, call, help_text in self._commands():
            yield DiscoveryHit(title, call, help=help_text)  # type: ignore[arg-type]  # the callables above take no argument

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, call, help_text in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), call, help=help_text)  # type: ignore[arg-type]  # as above


class CampaignsScreen(ListScreen[Row]):
    """Campaign files and started campaigns; enter opens a started one (or a file's latest run)."""

    COMMANDS = Screen.COMMANDS | {CampaignCommands}

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter,o", "open", "Open", id="campaigns.open"),
        Binding("S", "start", "Start", id="campaigns.start"),
        Binding("X", "start_unchecked", "Start w/o preflight", show=False, id="campaigns.start-unchecked"),
        Binding("r", "refresh", "Refresh", id="campaigns.refresh"),
        *cursor_bindings("campaigns"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[CampaignEntry] = []
        self.started = StartedCampaigns()
        self.rows: list[Row] = []
        self.loaded = False
        self.starting: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Container(id="campaigns-body"):
            yield DataTable(id="campaigns-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="campaign-detail"):
                yield Static("loading…", id="campaign-detail-text")
        yield Static("", id="campaigns-hosts", classes="muted")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "campaigns"
        self.sub_title = "campaign files, and the campaigns started on the hosts"
        self.add_columns((Col("name", "campaign", shrink=12), Col("where", "where", priority=1, shrink=8), Col("status", "status"),
                          Col("points", "points"), Col("loads", "loads"), Col("estimate", "estimate")))
        self._poll()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return writable(self, action, ("start", "start_unchecked"))

    # -- loading ---------------------------------------------------------------------------------
    def _catalog(self) -> Catalog:
        """The folder as it is now (a campaign file edited since the last look counts)."""
        return load_catalog(servelab_app(self).folder)

    @work(exclusive=True, group="campaigns-poll", exit_on_error=False)
    async def _poll(self) -> None:
        await poll_forever(self._load, REFRESH_SECONDS)

    async def _load(self) -> None:
        app = servelab_app(self)
        try:
            catalog = self._catalog()
            entries = await campaign_entries_with_history(catalog, app.runs())
            started = await started_campaigns(catalog)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.query_one("#campaigns-hosts", Static).update(Text(str(exc), style="red"))
            return
        self.entries, self.started, self.loaded = entries, started, True
        self._fill()

    def runs_changed(self) -> None:
        """The app saw a host's runs change (a campaign's load started or ended)."""
        self.action_refresh()

    def action_refresh(self) -> None:
        self._refresh()

    @work(group="campaigns-refresh", exclusive=True, exit_on_error=False)
    async def _refresh(self) -> None:
        """One reload at a time: a second key press cancels the first (its coroutine started, never orphaned)."""
        await self._load()

    def _fill(self) -> None:
        self.rows = [Row(f"file:{e.path}", entry=e) for e in self.entries] + [Row(f"run:{s.host}:{s.id}", started=s) for s in self.started.campaigns]
        self.refill((row.key, self._cells(row)) for row in self.rows)
        hosts = Text(f"{len(self.entries)} campaign file(s) · {len(self.started.campaigns)} started on the hosts")
        for name, why in self.started.unreachable.items():
            hosts.append(f" · {name} unreachable (its campaigns are not listed): {why}", style="yellow")
        if self.starting:
            hosts.append(f" · starting {self.starting}…", style="bold")
        self.query_one("#campaigns-hosts", Static).update(hosts)
        self._show_detail()

    def _cells(self, row: Row) -> list[Text]:
        if row.entry is not None:
            e = row.entry
            if e.plan is None or e.problems:
                why = str(e.problems[0]) if e.problems else "invalid"
                return [Text(e.name, style="bold red"), Text(_where(e)), Text("invalid", style="red"), Text(why[-70:], style="red"), Text(""), Text("")]
            latest = self.started.latest_of(e.plan.campaign)
            status = Text.assemble("latest ", state_text(latest.status)) if latest is not None else state_text(CampaignState.NOT_STARTED)
            return [Text(e.name, style="bold"), Text(_where(e)), status, Text(str(len(e.plan.points))), Text(str(len(e.plan.loads))), Text(estimate_text(e.plan.estimate_s))]
        st = row.started
        assert st is not None
        done = st.counts().get(CampaignState.DONE, 0)
        return [Text(st.id), Text(st.host), state_text(st.status), Text(f"{done}/{len(st.points)} done"), Text(str(len(st.loads))), Text("")]

    # -- selection and detail ----------------------------------------------------------------------
    def current(self) -> Row | None:
        return self.current_row()

    def row_highlighted(self) -> None:
        self._show_detail()

    def row_chosen(self) -> None:
        self.action_open()

    def _show_detail(self) -> None:
        widget = self.query_one("#campaign-detail-text", Static)
        row = self.current()
        if row is None:
            widget.update(Text("no campaign files in this folder and none started on the hosts" if self.loaded else "loading…", style="dim"))
            return
        if row.entry is not None:
            latest = self.started.latest_of(row.entry.plan.campaign) if row.entry.plan is not None else None
            parts: list[RenderableType] = [plan_renderable(row.entry)]
            if latest is not None:
                parts.append(Text.assemble("latest run: ", status_line(latest), " · enter opens it"))
            widget.update(Group(*parts))
            return
        assert row.started is not None
        widget.update(Group(status_line(row.started), Text("\n".join(control.describe_status(row.started)[1:]))))

    # -- actions ------------------------------------------------------------------------------------
    def action_open(self) -> None:
        row = self.current()
        if row is None:
            return
        st = row.started
        if row.entry is not None:
            st = self.started.latest_of(row.entry.plan.campaign) if row.entry.plan is not None else None
            if st is None:
                readonly = servelab_app(self).readonly
                self.notify(f"{row.entry.name} was never started" + ("" if readonly else ": press S to start it"), timeout=4)
                return
        assert st is not None
        go(self, OpenCampaign(st.id))

    def action_start(self) -> None:
        self._ask_start(skip_preflight=False)

    def action_start_unchecked(self) -> None:
        self._ask_start(skip_preflight=True)

    def _ask_start(self, *, skip_preflight: bool) -> None:
        row = self.current()
        if row is None or servelab_app(self).readonly:
            return
        entry = row.entry
        if entry is None:
            self.notify("pick a campaign file to start (a started campaign resumes from its own screen: enter, then u)", timeout=5)
            return
        if entry.plan is None or entry.problems:
            self.notify(f"{entry.name}: {entry.problems[0] if entry.problems else 'invalid'}", severity="error", timeout=8)
            return
        if self.starting:
            self.notify(f"{self.starting} is being started", timeout=3)
            return
        p = entry.plan
        hosts = ", ".join(sorted({pt.experiment.host for pt in p.points}))
        how = "without preflight" if skip_preflight else "each load preflighted first"

        def answered(yes: bool | None) -> None:
            if yes:
                self._start(entry.name, skip_preflight)

        go(
            self,
            Confirm(f"Start campaign {entry.name} on {hosts}?", f"{len(p.points)} points in {len(p.loads)} loads ({how}); estimated loading time {estimate_text(p.estimate_s)}. It runs on the host: closing the dashboard does not stop it."),
            answered,
        )

    @work(group="campaigns-start", exit_on_error=False)
    async def _start(self, name: str, skip_preflight: bool) -> None:
        self.starting = name
        status = self.query_one("#campaigns-hosts", Static)

        def progress(message: str) -> None:
            status.update(Text(f"starting {name}: {message}", style="bold"))

        progress("writing the plan on the host")
        try:
            st = await control.start(self._catalog(), name, skip_preflight=skip_preflight, progress=progress)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.notify(str(exc), title="campaign not started", severity="error", timeout=12)
            status.update(Text(f"{name} not started: {exc}", style="red"))
            return
        finally:
            self.starting = None
        self.notify(f"{st.id} started on {st.host}", title="campaign started", timeout=6)
        go(self, OpenCampaign(st.id))
        await self._load()
