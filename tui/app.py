"""The servelab dashboard: wiring, global keys, themes and the command palette.

Screens live in ``tui/screens`` (one per module); this module only builds the App, loads the
user's keymap, and offers the global actions (help, back, theme, screens). Screens never import it:
they see the app through ``tui/face.py`` and open each other through ``tui/navigation.py``, whose
routes (``tui/routes.py``) the app installs when it is made.
"""

from __future__ import annotations

import gc
import os
import sys
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import work
from textual.app import App, SystemCommand
from textual.await_complete import AwaitComplete
from textual.binding import Binding, BindingType
from textual.dom import DOMNode
from textual.screen import Screen
from textual.theme import Theme

from servelab.engines.catalog.folder import Catalog, default_dir, load_catalog
from servelab.engines.errors import ServelabError
from servelab.tui.keymap import load_keymap
from servelab.tui.palette import KeyCommands
from servelab.tui.widgets.toast_log import ToastLog

if TYPE_CHECKING:
    from servelab.engines.preflight.checks import Check
    from servelab.engines.probe.summary import ProbeSummary
    from servelab.engines.runs.manager import Runs
    from servelab.engines.runs.watch import RunWatcher
    from textual.notifications import SeverityLevel
    from servelab.tui.face import Face

HIGH_CONTRAST = Theme(
    name="servelab-high-contrast",
    primary="#FFD700",
    secondary="#00FFFF",
    accent="#FF66FF",
    foreground="#FFFFFF",
    background="#000000",
    surface="#000000",
    panel="#202020",
    boost="#303030",
    success="#00FF00",
    warning="#FFFF00",
    error="#FF4040",
    dark=True,
)
DEFAULT_THEME = "textual-dark"
SWITCH_INTERVAL_S = 0.001
#: How often the dashboard lists each host's runs folder (new runs, a host down or back).
HOSTS_POLL_SECONDS = 1.0
#: ``high-contrast`` (or any Textual theme name) picks the theme at start.
ENV_THEME = "SERVELAB_THEME"


class ServelabApp(App[int]):
    """The dashboard. ``readonly`` hides every action that starts or stops something."""

    TITLE = "servelab"
    CSS_PATH = ["app.tcss", "high_contrast.tcss"]
    ENABLE_COMMAND_PALETTE = True
    #: The palette: system commands, plus every key of the screen it is opened on (tui/palette.py).
    COMMANDS = App.COMMANDS | {KeyCommands}
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (140, "-wide")]
    #: Shorter than 30 rows (80x24): the run screen hides its header and caps its panels for the log.
    VERTICAL_BREAKPOINTS = [(0, "-short"), (30, "-tall")]

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark,f1", "help", "Help", id="app.help"),
        Binding("q", "back", "Back", id="app.back"),
        Binding("R", "open_runs", "Runs", id="app.runs"),
        Binding("M", "open_campaigns", "Campaigns", id="app.campaigns"),
        Binding("ctrl+t", "toggle_contrast", "Contrast", show=False, id="app.contrast"),
    ]

    def __init__(self, folder: str | Path | None = None, readonly: bool = False) -> None:
        from servelab.tui.routes import install

        super().__init__()
        install()  # where each screen's go(...) leads (tui/navigation.py)
        self.folder = Path(folder) if folder is not None else default_dir()
        self.readonly = readonly
        self.keymap_problems: list[str] = []
        self.catalog: Catalog | None = None
        self._runs: Runs | None = None
        self.watcher: RunWatcher | None = None
        #: Probes this app runs now (run id -> latest progress line), their results and failures.
        self.probing: dict[str, str] = {}
        self.probe_results: dict[str, ProbeSummary] = {}
        self.probe_errors: dict[str, str] = {}
        #: The preflight checks of each run launched here, for its run screen.
        self.preflights: dict[str, list[Check]] = {}
        self.toasts = ToastLog()
        #: Set to False by tests that must not poll hosts in the background.
        self.watch_runs = True
        #: Screens that were alive when the heap was last frozen (see settle_heap).
        self._frozen_screens: weakref.WeakSet[Screen[Any]] = weakref.WeakSet()
        self.register_theme(HIGH_CONTRAST)
        wanted = os.environ.get(ENV_THEME, "")
        self.theme = HIGH_CONTRAST.name if wanted in ("high-contrast", HIGH_CONTRAST.name) else (wanted or DEFAULT_THEME)
        if readonly:
            self.sub_title = "read-only"

    def get_default_screen(self) -> Screen[Any]:
        from servelab.tui.screens.experiments import ExperimentsScreen

        return ExperimentsScreen()

    def on_mount(self) -> None:
        overrides, self.keymap_problems = load_keymap(known_binding_ids())
        if overrides:
            self.set_keymap(overrides)
        for problem in self.keymap_problems:
            self.notify(problem, title="keymap", severity="warning", timeout=8)
        if self.watch_runs:
            self._watch_runs()
            self._watch_hosts()

    def runs(self) -> Runs:
        """The run lifecycle for the folder as last loaded (loads it on first use)."""
        from servelab.engines.runs.manager import Runs

        if self.catalog is None:
            self.catalog = load_catalog(self.folder)
        if self._runs is None or self._runs.catalog is not self.catalog:
            # A reloaded folder keeps the live analyses: the watcher and an open run screen must
            # keep sharing one per run, or the watcher polls an analysis nobody feeds any more.
            self._runs = Runs(self.catalog, live=self._runs.live if self._runs is not None else None)
        return self._runs

    @work(exclusive=True, group="watch-runs", exit_on_error=False)
    async def _watch_runs(self) -> None:
        from servelab.engines.runs.watch import RunWatcher

        watcher = RunWatcher(self.runs, self.announce, self.follower_failed, self.runs_changed)
        self.watcher = watcher
        try:
            await watcher.run_forever()
        finally:
            watcher.cancel()

    @work(exclusive=True, group="watch-hosts", exit_on_error=False)
    async def _watch_hosts(self) -> None:
        """Every second, each host's runs folder (one listing): a run launched elsewhere, or a host
        that went down or came back, refreshes every screen within the poll interval."""
        import asyncio

        from servelab.engines.hosts.base import HostUnreachable

        last: dict[str, tuple[frozenset[str], bool]] = {}

        async def look(runs: Runs, name: str) -> tuple[frozenset[str], bool]:
            try:
                return frozenset(await runs.run_ids(name)), True
            except (HostUnreachable, ServelabError, OSError):
                return last.get(name, (frozenset(), False))[0], False

        while True:
            runs = self.runs()
            names = runs.host_names()  # each place once: two names for one folder are one look
            current = dict(zip(names, await asyncio.gather(*(look(runs, n) for n in names)), strict=True))
            if last and current != last:
                self.runs_changed()
            last = current
            await asyncio.sleep(HOSTS_POLL_SECONDS)

    def runs_changed(self, run_id: str | None = None) -> None:
        """A host's runs or reachability changed, or a run's state (``run_id``; the watcher's
        ``on_change``): every open screen that shows runs reloads them."""
        for screen in self.screen_stack:
            refresh = getattr(screen, "runs_changed", None)
            if callable(refresh):
                refresh()

    def announce(self, run_id: str, experiment: str, event: str, detail: str) -> None:
        """A run became ready or crashed: ring the terminal bell, say so, refresh the table."""
        self.bell()
        if event == "ready":
            self.auto_probe(run_id, experiment)
        from servelab.tui.screens.experiments import ExperimentsScreen

        for screen in self.screen_stack:
            if isinstance(screen, ExperimentsScreen) and screen.catalog is not None:
                screen.refresh_latest()
        if event == "ready":
            self.notify(f"{experiment} is ready ({run_id})", title="run ready", timeout=10)
        else:
            self.notify(f"{experiment} crashed: {detail or run_id}", title="run crashed", severity="error", timeout=20)

    def follower_failed(self, run_id: str, exc: BaseException) -> None:
        """A run's follower broke on something unexpected: say so (the watcher starts it again)."""
        import traceback

        self.log.error("".join(traceback.format_exception(exc)))
        what = f"following {run_id}" if run_id else "listing the runs"
        self.notify(f"{what} failed ({type(exc).__name__}: {exc}); retrying at the next listing",
                    title="run watcher", severity="warning", timeout=10)

    def watch_theme(self, theme: str) -> None:
        self.set_class(theme == HIGH_CONTRAST.name, "-high-contrast")

    # -- the probe ------------------------------------------------------------------------------
    def auto_probe(self, run_id: str, experiment: str) -> None:
        """Probe a run that just became ready when its experiment says ``[probe] auto = true``."""
        if self.readonly or self.catalog is None:
            return
        try:
            exp = self.catalog.get(experiment)
        except ServelabError:
            return
        if exp.experiment.probe.auto:
            self.start_probe(run_id, only_if_new=True)

    def start_probe(self, run_id: str, *, only_if_new: bool = False) -> bool:
        """Start the probe of a live run (one at a time per run); False when one is running."""
        if self.readonly or run_id in self.probing:
            return False
        self.probing[run_id] = "starting"
        self.probe_errors.pop(run_id, None)
        self._probe(run_id, only_if_new)
        return True

    @work(group="probe", exit_on_error=False)
    async def _probe(self, run_id: str, only_if_new: bool) -> None:
        from servelab.engines.hosts.base import HostUnreachable
        from servelab.engines.probe.artifacts import load_probe, probe_run

        runs = self.runs()

        def progress(message: str) -> None:
            self.probing[run_id] = message

        try:
            target = await runs.resolve(run_id)  # once: the stored probe and the probe act on the run it names
            if only_if_new and await load_probe(runs, target) is not None:
                return
            result = await probe_run(runs, target, progress=progress)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.probe_errors[run_id] = str(exc)
            self.notify(f"{run_id}: {exc}", title="probe failed", severity="error", timeout=10)
            return
        finally:
            self.probing.pop(run_id, None)
        summary = result.summary
        self.probe_results[run_id] = summary
        length = summary.acceptance_length
        extra = f", acceptance length {length:.2f}" if length is not None else ""
        self.notify(f"{run_id}: {summary.output_throughput or 0:.1f} output tok/s{extra}", title="probe done", timeout=8)
        from servelab.tui.screens.experiments import ExperimentsScreen

        for screen in self.screen_stack:
            if isinstance(screen, ExperimentsScreen):
                screen.refresh_latest()

    # -- the heap -------------------------------------------------------------------------------
    def settle_heap(self) -> None:
        """A screen is open and drawn: freeze what is alive now (see :func:`settle_heap`)."""
        settle_heap()
        self._frozen_screens = weakref.WeakSet(self.screen_stack)

    def pop_screen(self) -> AwaitComplete:
        """Pop as Textual does; a screen that was frozen alive is collected once it is removed.

        Frozen objects are never collected, so a closed screen (its widgets are cycles) would
        stay in memory: once it is gone, the heap is thawed, collected and frozen again (one full
        collection per such screen change, none per frame).
        """
        frozen = self.screen in self._frozen_screens
        removed = super().pop_screen()
        if not frozen:
            return removed  # made after the last freeze (a dialog): the collector sees it already

        async def then_settle() -> None:
            await removed
            self.settle_heap()

        return AwaitComplete(then_settle()).call_next(self)

    # -- global actions -------------------------------------------------------------------------
    def action_help(self) -> None:
        from servelab.tui.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
            return
        self.push_screen(HelpScreen(self.active_bindings, readonly=self.readonly))

    async def action_back(self) -> None:
        """Leave the current screen; on the first screen, quit."""
        if len(self.screen_stack) > 1:
            self.pop_screen()
        else:
            self.exit(0)

    def action_toggle_contrast(self) -> None:
        self.theme = DEFAULT_THEME if self.theme == HIGH_CONTRAST.name else HIGH_CONTRAST.name

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information", timeout: float | None = None, markup: bool = True) -> None:
        """Every toast is kept to read again (the palette's "Notifications")."""
        self.toasts.add(message, title, severity)
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def action_toasts(self) -> None:
        from servelab.tui.screens.toasts import ToastsScreen

        if not isinstance(self.screen, ToastsScreen):
            self.push_screen(ToastsScreen())

    def action_open_runs(self) -> None:
        from servelab.tui.screens.runs import RunsScreen

        if not isinstance(self.screen, RunsScreen):
            self.push_screen(RunsScreen())

    def action_open_campaigns(self) -> None:
        from servelab.tui.screens.campaign import CampaignScreen
        from servelab.tui.screens.campaigns import CampaignsScreen

        if isinstance(self.screen, CampaignScreen):
            self.pop_screen()
        elif not isinstance(self.screen, CampaignsScreen):
            self.push_screen(CampaignsScreen())

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Help: keys", "Every key of this screen, with its binding id", self.action_help)
        yield SystemCommand("High contrast", "Toggle the high-contrast theme (shared screens)", self.action_toggle_contrast)
        yield SystemCommand("Runs", "Every run on every configured host", self.action_open_runs)
        yield SystemCommand("Campaigns", "Campaign files, their plans, and the campaigns running or finished on the hosts", self.action_open_campaigns)
        yield SystemCommand("Notifications", "The toasts this dashboard has shown, newest first, to read again", self.action_toasts)
        yield from getattr(screen, "palette_commands", lambda: [])()


#: Screens see the app as tui.face.Face (mypy checks here that ServelabApp is one).
_: type[Face] = ServelabApp


def known_binding_ids() -> set[str]:
    """Every binding id users may rebind (collected from the app, screens and widgets)."""
    from servelab.tui.screens import all_binding_classes

    ids: set[str] = set()
    classes: list[type[DOMNode]] = [ServelabApp, *all_binding_classes()]
    for cls in classes:
        for binding in cls.BINDINGS:
            if isinstance(binding, Binding) and binding.id:
                ids.add(binding.id)
    return ids


def tune_process() -> None:
    """Process-wide settings for the dashboard's own process (run_app; the bench does the same)."""
    # Log ingestion runs in a thread; a short GIL switch interval keeps keys and frames prompt
    # while it is busy (the default 5 ms lets a hot thread delay each UI step).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    # What is alive now (imported modules, their classes and functions) lives as long as the
    # process: keep it out of the collector's full passes, which walked it all several times a
    # minute while a log grew (pauses of 100-900 ms on the loaded 2-core machine, a key's p99;
    # bench/tui_follow.py prints them). Garbage made later is still collected.
    settle_heap()


def settle_heap() -> None:
    """Collect, then freeze what is still alive: the collector's full passes skip it from now on.

    A full pass walks every tracked object, scattered over the heap (about 1 µs each here: a
    run screen's ~50,000 widgets, styles and caches made each pass 20-100 ms, a key's wait every
    second or two while a log grew). Frozen objects are still freed when their count drops to
    zero; only cycles among them wait for the next thaw (``gc.unfreeze``, done when a frozen
    screen closes: ServelabApp.pop_screen).
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def run_app(folder: str | None, readonly: bool) -> int:
    """Open the dashboard; returns the exit code for ``servelab``."""
    path = Path(folder) if folder is not None else default_dir()
    if not path.is_dir():
        raise ServelabError(f"experiments folder not found: {path} (use --dir or $SERVELAB_EXPERIMENTS)")
    tune_process()
    app = ServelabApp(path, readonly=readonly)
    result = app.run()
    return int(result or 0)
