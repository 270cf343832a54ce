"""Every run on every configured host, with open, stop and cleanup (reattach from anywhere)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from engines.errors import ServelabError
from engines.hosts.base import HostUnreachable
from engines.hosts.seen import HostSeen
from engines.runs import KnownRun, RunRecord
from engines.runstate import RunState
from tui.app import servelab_app

REFRESH_SECONDS = 5.0


class RunsScreen(Screen[None]):
    """All runs, newest first; refreshed every few seconds in a worker."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter,o", "open", "Open", id="runs.open"),
        Binding("s", "stop", "Stop", id="runs.stop"),
        Binding("C", "cleanup", "Cleanup", id="runs.cleanup"),
        Binding("r", "refresh", "Refresh", id="runs.refresh"),
        Binding("j", "cursor_down", "Down", show=False, id="runs.down"),
        Binding("k", "cursor_up", "Up", show=False, id="runs.up"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.records: list[RunRecord] = []
        self.known: list[KnownRun] = []
        self.unreachable: dict[str, str] = {}
        self.down: dict[str, HostSeen] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="runs-hosts", classes="muted")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "runs"
        self.sub_title = "every run on every configured host"
        table = self.query_one(DataTable)
        for key, label in (("run", "run"), ("status", "status"), ("host", "host"), ("started", "started"), ("pid", "pid / exit")):
            table.add_column(label, key=key)
        self._poll()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("stop", "cleanup") and servelab_app(self).readonly:
            return False
        return True

    @work(exclusive=True, group="runs-poll", exit_on_error=False)
    async def _poll(self) -> None:
        import asyncio

        while True:
            await self._load()
            await asyncio.sleep(REFRESH_SECONDS)

    async def _load(self) -> None:
        runs = servelab_app(self).runs()
        try:
            known = await runs.list_known()
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.query_one("#runs-hosts", Static).update(Text(str(exc), style="red"))
            return
        unique: dict[tuple[str, str], KnownRun] = {}
        for k in known:  # two host names may share one folder: show each run once
            unique.setdefault((k.record.run_dir, k.record.id), k)
        self.known = list(reversed(unique.values()))
        self.records = [k.record for k in self.known]
        self.unreachable = dict(runs.unreachable)
        self.down = runs.hosts_down()
        self._fill()

    def runs_changed(self) -> None:
        """The app saw a host's runs or reachability change."""
        self.action_refresh()

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        keep = table.cursor_row
        table.clear()
        for k in self.known:
            rec = k.record
            pid = f"pid {rec.pid}" if rec.status is RunState.RUNNING else (f"exit {rec.exit_code}" if rec.exit_code is not None else "-")
            if k.down is not None:  # the last known state, greyed; the host says since when it is gone
                status = Text(f"{rec.status}?", style="dim")
                host = Text(f"{rec.host} · unreachable since {k.down.since}", style="yellow")
                cells = [Text(rec.id, style="dim"), status, host, Text(rec.started_at.replace("T", " ")[:19], style="dim"), Text(pid, style="dim")]
            else:
                cells = [Text(rec.id), Text(rec.status, style=rec.status.style), Text(rec.host), Text(rec.started_at.replace("T", " ")[:19]), Text(pid)]
            table.add_row(*cells, key=rec.id)
        if self.records:
            table.move_cursor(row=min(max(keep, 0), len(self.records) - 1))
        hosts = Text(f"{len(self.records)} run(s)")
        for name, why in self.unreachable.items():
            since = self.down[name].since if name in self.down else ""
            state = f" since {since} (last known runs greyed)" if since else ""
            hosts.append(f" · {name} unreachable{state}: {why}", style="yellow")
        self.query_one("#runs-hosts", Static).update(hosts)

    def current(self) -> RunRecord | None:
        table = self.query_one(DataTable)
        if not self.records or not 0 <= table.cursor_row < len(self.records):
            return None
        return self.records[table.cursor_row]

    @on(DataTable.RowSelected)
    def _selected(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        rec = self.current()
        if rec is not None:
            from tui.screens.run import RunScreen

            self.app.push_screen(RunScreen(rec.id))

    def action_refresh(self) -> None:
        self.run_worker(self._load(), group="runs-refresh", exclusive=True, exit_on_error=False)

    def action_cursor_down(self) -> None:
        self.query_one(DataTable).action_cursor_down()

    def action_cursor_up(self) -> None:
        self.query_one(DataTable).action_cursor_up()

    def action_stop(self) -> None:
        rec = self.current()
        if rec is None or servelab_app(self).readonly:
            return
        if rec.status is not RunState.RUNNING:
            self.notify(f"{rec.id} is not running ({rec.status})", timeout=3)
            return
        from tui.screens.confirm import ConfirmScreen

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop(rec.id)

        self.app.push_screen(ConfirmScreen(f"Stop run {rec.id}?", "SIGTERM to its process group, SIGKILL after 10 s."), answered)

    @work(group="runs-stop", exit_on_error=False)
    async def _stop(self, run_id: str) -> None:
        try:
            await servelab_app(self).runs().stop(run_id)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.notify(str(exc), title="stop failed", severity="error", timeout=8)
            return
        self.notify(f"{run_id} stopped", timeout=4)
        await self._load()

    def action_cleanup(self) -> None:
        if not servelab_app(self).readonly:
            self._cleanup()

    @work(group="runs-cleanup", exit_on_error=False)
    async def _cleanup(self) -> None:
        runs = servelab_app(self).runs()
        try:
            leftovers = await runs.cleanup(dry_run=True)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.notify(str(exc), title="cleanup failed", severity="error", timeout=8)
            return
        if not leftovers:
            self.notify("nothing to clean up: no stray processes or shared memory of ended runs", timeout=4)
            return
        from tui.screens.confirm import ConfirmScreen

        if await self.app.push_screen_wait(ConfirmScreen(f"Remove {len(leftovers)} leftover(s) of ended runs?", "\n".join(leftovers[:12]))):
            try:
                done = await runs.cleanup(dry_run=False)
            except (ServelabError, HostUnreachable, OSError) as exc:
                self.notify(str(exc), title="cleanup failed", severity="error", timeout=8)
                return
            self.notify(f"removed {len(done)} leftover(s)", timeout=4)
