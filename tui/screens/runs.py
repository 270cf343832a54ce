"""Every run on every configured host, with open, stop and cleanup (reattach from anywhere).

Each row says who launched the run (``user@machine``); ``u`` switches between every user's runs and
yours. Another user's run is read-only unless asked: its stop names its owner in the confirmation."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Header, Static

from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.runs.history import ended_words
from servelab.engines.hosts.seen import HostSeen
from servelab.engines.nodes.group import RunsRow, runs_rows
from servelab.engines.nodes.run import MultiNodeRuns
from servelab.engines.hosts.owner import Owner, is_mine, me
from servelab.engines.runs.records import KnownRun, RunRecord
from servelab.engines.runs.state import RunState
from servelab.tui.face import servelab_app, writable
from servelab.tui.navigation import Confirm, OpenHostGpus, OpenRun, ask, go
from servelab.tui.widgets.host_action import host_action
from servelab.tui.widgets.list_screen import Col, ListScreen, cursor_bindings, poll_forever
from servelab.tui.widgets.key_footer import KeyFooter

REFRESH_SECONDS = 5.0


def _who(rec: RunRecord, you: Owner) -> Text:
    """Who launched the run; another user's is dim (read-only unless asked)."""
    label = rec.owner.label or "-"  # a run recorded before owners were
    return Text(label, style="" if is_mine(rec, you) else "dim")


def _cells(row: RunsRow, you: Owner) -> list[Text]:
    """A run's row: id, status, hosts, owner, start, pid (a gone host's runs greyed, with since when)."""
    k = row.head
    rec = k.record
    pid = f"pid {rec.pid}" if rec.status is RunState.RUNNING else ended_words(rec) if rec.status.is_terminal else "-"  # the one wording
    if row.nodes:
        running = sum(1 for n in row.nodes if n.record.status is RunState.RUNNING)
        pid = f"{running}/{len(row.nodes)} running"
    gone = next((n for n in [k, *row.nodes] if n.down is not None), None)
    if gone is not None and gone.down is not None:  # the last known state, greyed; the host line above says when it was checked
        status = Text(f"{row.status}?", style="dim")
        return [Text(row.id, style="dim"), status, Text(row.hosts, style="yellow"), _who(rec, you), Text(rec.started_at.replace("T", " ")[:19], style="dim"), Text(pid, style="dim")]
    mark = f" ({rec.kind_word})" if rec.kind_word else ""  # a rehearsal is marked wherever it is listed
    return [Text(row.id), Text(row.status + mark, style=row.status.style), Text(row.hosts), _who(rec, you), Text(rec.started_at.replace("T", " ")[:19]), Text(pid)]


class RunsScreen(ListScreen[RunsRow]):
    """All runs, newest first; refreshed every few seconds in a worker."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter,o", "open", "Open", id="runs.open"),
        Binding("s", "stop", "Stop", id="runs.stop"),
        Binding("C", "cleanup", "Cleanup", id="runs.cleanup"),
        Binding("g", "gpus", "GPUs", tooltip="the host view: every GPU of the run's host and who holds it", id="runs.gpus"),
        Binding("r", "refresh", "Refresh", id="runs.refresh"),
        Binding("u", "toggle_mine", "Mine/all", tooltip="your runs only, or every user's", id="runs.mine"),
        *cursor_bindings("runs"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.records: list[RunRecord] = []
        self.known: list[KnownRun] = []
        self.rows: list[RunsRow] = []
        self.unreachable: dict[str, str] = {}
        self.down: dict[str, HostSeen] = {}
        #: Only this user's runs (``u``), or every user's.
        self.mine_only = False
        self.you = me()
        #: A load is under way / a change was heard during it (it ends with another load).
        self._loading = False
        self._stale = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="runs-hosts", classes="muted")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "runs"
        self.sub_title = "every run on every configured host"
        # at 80 columns the host goes and the run id is cut in the middle: the start time and how it ended stay
        self.add_columns((Col("run", "run", shrink=16), Col("status", "status"), Col("host", "host", priority=1),
                          Col("who", "who", priority=2, shrink=8), Col("started", "started"), Col("pid", "pid / exit")))
        self._poll()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return writable(self, action, ("stop", "cleanup"))

    @work(exclusive=True, group="runs-poll", exit_on_error=False)
    async def _poll(self) -> None:
        await poll_forever(self._load, REFRESH_SECONDS)

    async def _load(self) -> None:
        self._loading = True
        try:
            await self._load_once()
        finally:
            self._loading = False
        if self._stale:
            self._stale = False
            self.action_refresh()

    async def _load_once(self) -> None:
        runs = servelab_app(self).runs()
        try:
            known = await runs.list_known()
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.query_one("#runs-hosts", Static).update(Text(str(exc), style="red"))
            return
        self.known = list(reversed(known))
        rows = runs_rows(self.known)  # a multi-node run is one row, not one per node
        self.rows = [r for r in rows if is_mine(r.head.record, self.you)] if self.mine_only else rows
        self.records = [row.head.record for row in self.rows]
        self.unreachable = dict(runs.unreachable)
        self.down = runs.hosts_down()
        self._fill()

    def runs_changed(self) -> None:
        """The app saw a host's runs or reachability change, or a run's state: load again, after
        the load under way (changes heard in a row must not cancel each load before it ends: a
        down host's listing takes seconds)."""
        if self._loading:
            self._stale = True
        else:
            self.action_refresh()

    def _fill(self) -> None:
        self.refill((row.id, _cells(row, self.you)) for row in self.rows)
        hosts = Text(f"{len(self.records)} run(s)" + (f" of {self.you.user} (u: every user's)" if self.mine_only else ""))
        for name, why in self.unreachable.items():
            note = self.down[name].note if name in self.down else "unreachable"
            hosts.append(f" · {name} {note} (its runs greyed, last known state): {why}", style="yellow")
        self.query_one("#runs-hosts", Static).update(hosts)

    def current(self) -> RunRecord | None:
        row = self.current_row()
        return row.head.record if row is not None else None

    def row_chosen(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        row = self.current_row()
        if row is not None:
            go(self, OpenRun(row.id, group=bool(row.nodes)))

    def action_gpus(self) -> None:
        """The host view of the highlighted run's host (a multi-node run's head's)."""
        row = self.current_row()
        if row is not None:
            go(self, OpenHostGpus(row.head.record.host))

    def action_refresh(self) -> None:
        self._refresh()

    @work(group="runs-refresh", exclusive=True, exit_on_error=False)
    async def _refresh(self) -> None:
        """One reload at a time: a second key press cancels the first (its coroutine started, never orphaned)."""
        await self._load()

    def action_toggle_mine(self) -> None:
        self.mine_only = not self.mine_only
        self.sub_title = f"{self.you.user}'s runs on every configured host" if self.mine_only else "every run on every configured host"
        self.action_refresh()

    def action_stop(self) -> None:
        row = self.current_row()
        if row is None or servelab_app(self).readonly:
            return
        if not any(k.record.status is RunState.RUNNING for k in [row.head, *row.nodes]):
            self.notify(f"{row.id} is not running ({row.status})", timeout=3)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop(row.id, bool(row.nodes))

        rec = row.head.record
        theirs = "" if is_mine(rec, self.you) else f"\nThis run is {rec.owner.label}'s, not yours."
        if row.nodes:
            detail = "\n".join(f"{k.record.host}: {k.record.id}" for k in row.nodes)
            go(self, Confirm(f"Stop every node of {row.id}?", f"{detail}\nSIGTERM to each process group, SIGKILL after 10 s.{theirs}"), answered)
            return
        go(self, Confirm(f"Stop run {row.id}?", f"SIGTERM to its process group, SIGKILL after 10 s.{theirs}"), answered)

    @work(group="runs-stop", exit_on_error=False)
    async def _stop(self, run_id: str, group: bool = False) -> None:
        runs = servelab_app(self).runs()

        async def stop() -> None:
            if group:
                mruns = MultiNodeRuns(runs)
                report = await mruns.stop(await mruns.load(run_id))
                if report.problems:
                    raise ServelabError("; ".join(report.problems))
            else:
                await runs.stop(run_id)

        await host_action(self, stop, "stop failed", f"{run_id} stopped", self._load)
        servelab_app(self).runs_changed(run_id)  # every screen showing it reads it now, not at its next poll

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
        if await ask(self, Confirm(f"Remove {len(leftovers)} leftover(s) of ended runs?", "\n".join(leftovers[:12]))):
            try:
                done = await runs.cleanup(dry_run=False)
            except (ServelabError, HostUnreachable, OSError) as exc:
                self.notify(str(exc), title="cleanup failed", severity="error", timeout=8)
                return
            self.notify(f"removed {len(done)} leftover(s)", timeout=4)
