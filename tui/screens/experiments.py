"""The experiments screen: every definition, its latest run, and the actions that start things.

Invalid definition files stay in the list with their first problem, so one typo never hides the
other experiments. Loading the folder and asking hosts about runs happen in workers.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from collections.abc import Callable
from typing import ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Container, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from servelab.engines.catalog.folder import Catalog, FileEntry, load_catalog
from servelab.engines.errors import ServelabError
from servelab.engines.catalog.loader import display_path
from servelab.engines.runs.history import LatestRun, latest_runs
from servelab.engines.hosts.owner import me
from servelab.tui.face import servelab_app, writable
from servelab.tui.navigation import Confirm, OpenCompare, OpenHistory, OpenPreflight, OpenRun, ask, go
from servelab.tui.widgets.list_screen import Col, ListScreen, cursor_bindings, middle_cut
from servelab.tui.widgets.key_footer import KeyFooter

#: The list's columns by priority: at 80 columns the latest run's state and figures stay (the name
#: cut in the middle), and patches, engine, host and spec go, in that order (the detail pane shows them).
COLUMNS: tuple[Col, ...] = (
    Col("sel", " "),
    Col("name", "experiment", shrink=12),
    Col("engine", "engine", priority=3),
    Col("host", "host", priority=2, shrink=6),
    Col("spec", "spec", priority=1, shrink=6),
    Col("patches", "pat", priority=4),  # a count: the header sets the width
    Col("state", "latest"),
    Col("load", "load"),
    Col("accept", "acc · len"),  # acceptance rate · acceptance length (the detail pane names both)
    Col("speedup", "speedup"),
    Col("by", "by", priority=5, shrink=8),  # who launched the latest run: another user's is marked
)

#: The widest the name, host and speculation cells grow (the detail pane shows each whole): with them,
#: the latest run's state stays in view at 80 columns whatever the definitions are called.
NAME_WIDTH, HOST_WIDTH, SPEC_WIDTH = 24, 12, 10


def _narrow(value: str, width: int, style: str = "") -> Text:
    """One cell's text, cut with an ellipsis past ``width`` cells."""
    text = Text(value, style=style)
    text.truncate(width, overflow="ellipsis")
    return text


@dataclass
class Row:
    """One line of the table: an experiment, or a file that did not load."""

    entry: FileEntry

    @property
    def key(self) -> str:
        return str(self.entry.path)

    @property
    def name(self) -> str:
        exp = self.entry.experiment
        return exp.name if exp is not None else self.entry.path.stem


class ExperimentCommands(Provider):
    """Palette: open an experiment by name."""

    async def discover(self) -> Hits:
        screen = self.screen
        if isinstance(screen, ExperimentsScreen):
            for row in screen.rows:
                yield DiscoveryHit(f"experiment: {row.name}", lambda r=row: screen.select_row(r.key), help="select it")

    async def search(self, query: str) -> Hits:
        screen = self.screen
        if not isinstance(screen, ExperimentsScreen):
            return
        matcher = self.matcher(query)
        for row in screen.rows:
            title = f"experiment: {row.name}"
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), lambda r=row: screen.select_row(r.key), help="select it")


class ExperimentsScreen(ListScreen[Row]):
    """Definitions with engine, host, speculation, patches and their latest run."""

    COMMANDS = Screen.COMMANDS | {ExperimentCommands}

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter,o", "open_run", "Open run", id="experiments.open-run"),
        Binding("l", "launch", "Launch", id="experiments.launch"),
        Binding("p", "preflight", "Preflight", id="experiments.preflight"),
        Binding("X", "launch_unchecked", "Launch w/o preflight", show=False, id="experiments.launch-unchecked"),
        Binding("c", "compare", "Compare", id="experiments.compare"),
        Binding("H", "history", "History", show=False, tooltip="the experiment's runs over time", id="experiments.history"),
        Binding("space", "toggle_select", "Select", id="experiments.select"),
        Binding("E", "edit", "Edit", id="experiments.edit"),
        Binding("r", "reload", "Reload", id="experiments.reload"),
        *cursor_bindings("experiments"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.catalog: Catalog | None = None
        self.rows: list[Row] = []
        self.selected: set[str] = set()
        self.latest: dict[str, LatestRun] = {}
        #: Hosts that did not answer the last refresh: ("unreachable, checked HH:MM", why).
        self.down: dict[str, tuple[str, str]] = {}
        #: A refresh of the latest runs is under way / a change was heard during it (another follows).
        self._loading = False
        self._stale = False

    def compose(self) -> ComposeResult:
        yield Header()
        with Container(id="experiments-body"):
            yield DataTable(id="experiments-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="experiment-detail"):
                yield Static("loading…", id="experiment-detail-text")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.add_columns(COLUMNS)
        self.title = "servelab"
        self._show_subtitle()
        self.action_reload()

    # -- readonly --------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return writable(self, action, ("launch", "launch_unchecked", "edit"))

    # -- loading ---------------------------------------------------------------------------------
    def action_reload(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, group="catalog")
    def _load(self) -> None:
        try:
            catalog = load_catalog(servelab_app(self).folder)
        except ServelabError as exc:
            self.app.call_from_thread(self._show_error, str(exc))
            return
        self.app.call_from_thread(self._show_catalog, catalog)

    def _show_error(self, message: str) -> None:
        self.query_one("#experiment-detail-text", Static).update(Text(message, style="bold red"))
        self.notify(message, severity="error")

    def _show_catalog(self, catalog: Catalog) -> None:
        self.catalog = catalog
        servelab_app(self).catalog = catalog
        self.rows = [Row(entry) for entry in catalog.entries]
        self.selected &= {r.key for r in self.rows}
        self._fill_table()
        if catalog.folder_problems:
            self.notify(str(catalog.folder_problems[0]), severity="error", timeout=8)
        self._load_latest(catalog)

    def _fill_table(self) -> None:
        self.refill((row.key, self._cells(row)) for row in self.rows)
        self._show_detail()

    def _cells(self, row: Row) -> list[Text]:
        sel = Text("●" if row.key in self.selected else " ", style="bold")
        exp = row.entry.experiment
        if exp is None:
            problem = row.entry.problems[0] if row.entry.problems else None
            why = f"line {problem.line}: {problem.path}: {problem.message}" if problem else "invalid"
            # "invalid" where the state goes (a column that never goes); the reason where the host goes and in the detail pane
            return [sel, Text(row.name, style="bold red"), Text("invalid", style="red"), Text(why[:60], style="red"), Text(""), Text(""),
                    Text("invalid", style="red"), Text(""), Text(""), Text(""), Text("")]
        e = exp.experiment
        spec = e.speculative.label
        name_style = "bold yellow" if row.entry.problems else "bold"
        latest = self.latest.get(e.name)
        down = self.down.get(e.host)
        host = _narrow(e.host, HOST_WIDTH, "yellow" if down else "")  # the note goes in the detail pane and the title: the column keeps its width
        cells = [sel, middle_cut(Text(e.name, style=name_style), NAME_WIDTH), Text(e.engine), host, _narrow(spec, SPEC_WIDTH), Text(str(len(e.patches)) if e.patches else "-")]
        if latest is None:
            cells += [Text("-", style="dim"), Text(""), Text(""), Text(""), Text("")]
        elif down:  # the last known state, greyed: the host cannot say what it is now
            cells += [Text(f"{latest.state}?", style="dim"), Text(latest.load_text, style="dim"), Text(latest.accept_text, style="dim"),
                      Text(latest.speedup_text, style="dim"), Text(latest.owner, style="dim")]
        else:
            cells += [Text(latest.state, style=latest.state.style), Text(latest.load_text), Text(latest.accept_text), Text(latest.speedup_text),
                      _owner_cell(latest)]
        return cells

    def refresh_latest(self) -> None:
        if self.catalog is not None:
            self._load_latest(self.catalog)

    def runs_changed(self) -> None:
        """The app saw a host's runs or reachability change (a run launched elsewhere, a host down or
        back) or a run's state (a stop anywhere): read again, after the refresh under way (changes
        heard in a row must not cancel each refresh before it ends)."""
        if self._loading:
            self._stale = True
        else:
            self.refresh_latest()

    @work(exclusive=True, group="latest", exit_on_error=False)
    async def _load_latest(self, catalog: Catalog) -> None:
        self._loading = True
        try:
            await self._read_latest(catalog)
        finally:
            self._loading = False
        if self._stale:
            self._stale = False
            self.refresh_latest()

    async def _read_latest(self, catalog: Catalog) -> None:
        app = servelab_app(self)
        runs = app.runs()
        latest, unreachable = await latest_runs(runs, app.watcher.analyses if app.watcher is not None else None)
        known = runs.hosts_down() if unreachable else {}
        for exp in catalog.experiments:  # a host that does not answer keeps its experiments' last known run
            if exp.experiment.host in unreachable and exp.name not in latest and exp.name in self.latest:
                latest[exp.name] = self.latest[exp.name]
        self.latest = latest
        # no toast: a toast lands on whatever screen is open (a local run's, too); the host's rows say it
        self.down = {h: (known[h].note if h in known else "unreachable", why) for h, why in unreachable.items()}
        if self.catalog is catalog:
            self._fill_table()
        self._show_subtitle()

    def _show_subtitle(self) -> None:
        down = "".join(f" · {host} {note}" for host, (note, _) in sorted(self.down.items()))
        app = servelab_app(self)
        self.sub_title = f"experiments in {display_path(app.folder)}" + (" · read-only" if app.readonly else "") + down

    # -- the detail pane ---------------------------------------------------------------------------
    def row_highlighted(self) -> None:
        self._show_detail()

    def row_chosen(self) -> None:
        """Enter on a row: open its latest run."""
        self.action_open_run()

    def current(self) -> Row | None:
        return self.current_row()

    def _show_detail(self) -> None:
        widget = self.query_one("#experiment-detail-text", Static)
        row = self.current()
        if row is None or self.catalog is None:
            widget.update(Text("no experiment definitions in this folder" if self.catalog else "loading…", style="dim"))
            return
        exp = row.entry.experiment
        down = self.down.get(exp.experiment.host) if exp is not None else None
        widget.update(detail_renderable(self.catalog, row.entry, self.latest.get(row.name), down))

    # -- actions -------------------------------------------------------------------------------------
    def action_toggle_select(self) -> None:
        row = self.current()
        if row is None or row.entry.experiment is None:
            return
        self.selected ^= {row.key}
        self.query_one(DataTable).update_cell(row.key, "sel", self._cells(row)[0])

    def _valid_current(self) -> Row | None:
        row = self.current()
        if row is None:
            return None
        if row.entry.experiment is None or row.entry.problems:
            first = row.entry.problems[0] if row.entry.problems else "invalid definition"
            self.notify(f"{row.name}: {first}", severity="error", timeout=6)
            return None
        return row

    def action_open_run(self) -> None:
        row = self.current()
        if row is None:
            return
        latest = self.latest.get(row.name)
        if latest is None:
            self.notify(f"{row.name} has no run yet" + ("" if servelab_app(self).readonly else ": press l to launch"), timeout=4)
            return
        go(self, OpenRun(latest.run_id))

    def action_preflight(self) -> None:
        row = self._valid_current()
        if row is None or self.catalog is None:
            return
        go(self, OpenPreflight(self.catalog, row.name, launch=False))

    def action_launch_unchecked(self) -> None:
        self.action_launch(skip_preflight=True)

    def action_launch(self, skip_preflight: bool = False) -> None:
        row = self._valid_current()
        if row is None or self.catalog is None or servelab_app(self).readonly:
            return
        from servelab.engines.nodes.group import launch_question

        catalog = self.catalog
        try:
            question = launch_question(catalog, row.name)
        except ServelabError as exc:
            self.notify(str(exc), title="launch refused", severity="error", timeout=10)
            return

        def launched(run_id: str | None) -> None:
            if run_id:
                go(self, OpenRun(run_id, group=question is not None))
                if self.catalog is not None:
                    self._load_latest(self.catalog)

        if question is None:
            if skip_preflight:
                go(self, OpenPreflight(catalog, row.name, launch=True, skip_preflight=True), launched)
            else:
                self._offer_rehearsal(catalog, row.name, launched)
            return

        def confirmed(yes: bool | None) -> None:  # a multi-node run starts a process on every node: asked first
            if yes and skip_preflight:
                go(self, OpenPreflight(catalog, row.name, launch=True, skip_preflight=True), launched)
            elif yes:
                self._offer_rehearsal(catalog, row.name, launched)

        go(self, Confirm(*question), confirmed)

    @work(exclusive=True, group="rehearsal", exit_on_error=False)
    async def _offer_rehearsal(self, catalog: Catalog, name: str, launched: Callable[[str | None], None]) -> None:
        """``l`` offers a rehearsal first when the experiment changed since its last good one (the
        core's ``launch_offer`` decides); a rehearsal that fails opens its run, whose screen shows
        the root cause, and launches nothing."""
        from servelab.engines.runs.rehearsal import launch_offer, rehearse

        note = await launch_offer(catalog, name)
        if note is not None:
            yes = await ask(self, Confirm(
                f"Rehearse {name} before launching?",
                f"{note.message()}.\nThe same start-up with dummy weights, one generation, then stop; no: launch now.",
            ))
            if yes:
                self.notify(f"rehearsing {name}: the launch's start-up with dummy weights", timeout=6)
                try:
                    result = await rehearse(servelab_app(self).runs(), name)
                except (ServelabError, OSError) as exc:
                    self.notify(str(exc), title="rehearsal refused", severity="error", timeout=10)
                    return
                if not result.ok:
                    self.notify(result.lines()[0] + (f"\n{result.root_cause}" if result.root_cause else ""), title="rehearsal failed", severity="error", timeout=15)
                    go(self, OpenRun(result.run_id, group=bool(result.nodes)))
                    return
                self.notify(result.lines()[0], title="rehearsed", timeout=6)
        go(self, OpenPreflight(catalog, name, launch=True), launched)

    def action_history(self) -> None:
        row = self.current()
        if row is not None:
            go(self, OpenHistory(row.name))

    def action_compare(self) -> None:
        if self.catalog is None:
            return
        names = [r.name for r in self.rows if r.key in self.selected]
        if not names:
            row = self._valid_current()
            if row is None:
                return
            exp = row.entry.experiment
            base = self.catalog.baseline_of(exp) if exp is not None else None
            if base is None:
                self.notify("select two experiments with space, or pick one that has a baseline", timeout=4)
                return
            names = [base.name, row.name]
        if len(names) < 2:
            self.notify("select at least two experiments with space", timeout=4)
            return
        go(self, OpenCompare(names))

    def action_edit(self) -> None:
        row = self.current()
        if row is None or servelab_app(self).readonly:
            return
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        try:
            argv = [*shlex.split(editor), str(row.entry.path)]
        except ValueError:
            self.notify(f"cannot parse $EDITOR: {editor!r}", severity="error")
            return
        try:
            with self.app.suspend():
                subprocess.run(argv, check=False)  # an argv list: no shell
        except SuspendNotSupported:
            self.notify("this terminal cannot hand over to an editor: edit the file elsewhere, then press r", severity="warning")
            return
        except OSError as exc:
            self.notify(f"cannot start {argv[0]}: {exc.strerror or exc}", severity="error")
        self.action_reload()


def _owner_cell(latest: LatestRun) -> Text:
    """Who launched the latest run; another user's run is marked (yellow), yours plain."""
    theirs = bool(latest.launched_by) and latest.launched_by != me().user
    return Text(latest.owner, style="yellow" if theirs else "")


def detail_renderable(catalog: Catalog, entry: FileEntry, latest: LatestRun | None, down: tuple[str, str] | None = None) -> Group:
    """The resolved command line, environment, patches and probe settings (or the file's problems)."""
    parts: list[RenderableType] = []
    exp = entry.experiment
    if exp is None or entry.problems:
        parts.append(Text(f"{display_path(entry.path)}", style="bold"))
        for problem in entry.problems:
            parts.append(Text(f"  {problem}", style="red"))
        if exp is None:
            return Group(*parts)
    assert exp is not None
    e = exp.experiment
    parts.append(Text.assemble((e.name, "bold"), f"  {display_path(exp.path)}"))
    if e.description:
        parts.append(Text(e.description, style="italic"))
    try:
        host = catalog.host(e.host)
        spec = catalog.launch_spec(exp, host)
    except ServelabError as exc:
        parts.append(Text(str(exc), style="red"))
        return Group(*parts)
    where = f"ssh {host.ssh}" if host.ssh else "this machine"
    parts.append(Text(f"host {host.name} ({where}) · port {e.port} · baseline {e.baseline or '-'}"))
    parts.append(Text("command", style="bold"))
    parts.append(Text("  " + shlex.join(spec.argv), style="cyan"))
    if spec.env:
        parts.append(Text("environment", style="bold"))
        parts.append(Text("  " + " ".join(f"{k}={shlex.quote(v)}" for k, v in spec.env.items())))
    table = Table(box=None, show_header=False, padding=(0, 1))
    table.add_column(style="bold")
    table.add_column()
    hashes = exp.patch_hashes()
    if hashes:
        for patch, digest in hashes:
            table.add_row("patch", Text.assemble(patch.file, (f"  {digest[:12]}" if digest else "  MISSING", "dim" if digest else "red"), f"  {patch.description}"))
    else:
        table.add_row("patches", "none")
    pr = e.probe
    table.add_row("probe", f"{pr.prompts} · max_tokens {pr.max_tokens} · concurrency {pr.concurrency} · repeats {pr.repeats} · warmup {pr.warmup} · {'auto' if pr.auto else 'manual'}")
    if latest is not None:
        figures = "".join(f" · {text}" for text in (f"load {latest.load_text}" if latest.load_text else "", latest.accept_words) if text)
        by = f" · by {latest.owner}" if latest.owner else ""
        table.add_row("latest run", f"{latest.run_id} · {latest.state}" + (" (last known)" if down else "") + figures + by)
    if down:
        table.add_row("host", Text(f"{e.host} {down[0]}: {down[1]}", style="yellow"))
    parts.append(table)
    return Group(*parts)
