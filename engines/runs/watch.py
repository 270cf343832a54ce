"""The run watcher: follows every running run for the app, so the operator hears (bell) when one is ready or crashes.

Textual-free: the dashboard (``tui/app.py``) starts it and turns its announcements into bells, notices
and the probe on ready. Only the dashboard's own user's runs that are not rehearsals are announced
(``engines.hosts.owner.acts_on``): a colleague's run or a rehearsal is followed (views refresh on it) but
never belled, toasted or probed.

Each running run is polled through ``Runs.status``, whose analysis is the run's one shared
:class:`~engines.logs.live.LiveAnalysis`: a run open on its screen is fed by that screen's log
stream and not read again here. Each change of a run's shown state (a stop from any screen or any
process, ready, a crash) is told to ``on_change``, the one event every view of runs refreshes on,
within a poll (``POLL_SECONDS``). A process that exited with a non-zero exit code also counts as a
crash when the log did not say so (the one rule, :func:`engines.runs.history.display_state`). A follower that fails on something unexpected is reported
(``on_error``) and forgotten, so the next listing starts it again rather than the run going quiet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from servelab.engines.errors import ServelabError
from servelab.engines.gpus.readings import epoch_of
from servelab.engines.runs.history import display_state
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.logs.analysis import Analysis
from servelab.engines.hosts.owner import Owner, acts_on, me
from servelab.engines.runs.records import RunStatus
from servelab.engines.runs.manager import Runs
from servelab.engines.runs.state import RunState

LIST_SECONDS = 5.0
#: How often a running run's analysis is polled (it reads only the bytes added since).
POLL_SECONDS = 1.0
#: Polls after the process ended while a screen still streams the log's tail into the analysis.
TAIL_POLLS = 10

#: ``(run_id, experiment, event, detail)`` with event ``ready`` or ``crashed``.
Announce = Callable[[str, str, str, str], None]
#: ``(run_id, exception)``: a follower ended on an exception nobody expected (a bug, not a host down).
OnError = Callable[[str, BaseException], None]
#: ``(run_id)``: a followed run's shown state changed (``display_state``): a stop from any screen or
#: process, a ready, a crash, an exit. Every view of runs refreshes on it.
OnChange = Callable[[str], None]


class RunWatcher:
    """Announces each run's ready and crash once: runs of its owner's user that are not rehearsals."""

    def __init__(
        self, runs: Callable[[], Runs], announce: Announce, on_error: OnError, on_change: OnChange | None = None, *, owner: Owner | None = None
    ) -> None:
        self._runs = runs
        #: Whose dashboard this is: only its own user's runs, rehearsals left out, are announced
        #: (``engines.hosts.owner.acts_on``); everyone's still refresh the views (``on_change``).
        self.owner = owner if owner is not None else me()
        #: Runs followed but never announced (another user's, or a rehearsal).
        self._silent: set[str] = set()
        self._announce = announce
        self._on_error = on_error
        self._on_change = on_change
        self._watching: dict[str, asyncio.Task[None]] = {}
        self._announced: set[tuple[str, str]] = set()
        #: Log size when this dashboard first saw each run: what it held then is history, also for
        #: a follower started again after a failure (it must not take news it missed for history).
        self._backlog: dict[str, int] = {}
        #: Failures already reported, ``(run_id, error)``: a follower failing at every listing says so once.
        self._reported: set[tuple[str, str]] = set()
        #: The latest analysis of every run followed, by run id (the experiments table reads it).
        self.analyses: dict[str, Analysis] = {}
        #: When this watcher began: a run started since has no history, whatever its log holds by
        #: the listing that first finds it (a server ready within one listing is still news).
        self.opened = time.time()

    def has_seen(self, run_id: str) -> bool:
        """This watcher knows where the run's news begins (what its log held when first seen is history)."""
        return run_id in self._backlog

    def has_ruled(self, run_id: str, event: str) -> bool:
        """The run's ``event`` ("ready", "crashed") was announced, or marked as history (never to be)."""
        return (run_id, event) in self._announced

    async def run_forever(self) -> None:
        """Poll the hosts' run lists; start a follower for every running run."""
        seen_ended: set[str] = set()
        first = True
        while True:
            runs = self._runs()
            try:
                records = await runs.list()
            except (ServelabError, HostUnreachable, OSError):
                records = []
            except Exception as exc:  # a bug of ours in the listing: report it once, keep listing
                self._report("", exc)
                records = []
            for rec in records:
                if rec.status.is_active and rec.id not in self._watching:
                    if not acts_on(rec, self.owner):
                        self._silent.add(rec.id)
                    self._start(runs, rec.id, rec.experiment, rec.engine)
                elif not rec.status.is_active and rec.id not in seen_ended:
                    seen_ended.add(rec.id)
                    # An old ended run is history; a run ended while we watched was handled by its follower.
                    if first:
                        self._announced.update({(rec.id, "ready"), (rec.id, "crashed")})
            first = False
            await asyncio.sleep(LIST_SECONDS)

    def _start(self, runs: Runs, run_id: str, experiment: str, engine: str) -> None:
        task = asyncio.create_task(self._follow(runs, run_id, experiment, engine), name=f"follow {run_id}")
        self._watching[run_id] = task
        task.add_done_callback(lambda done: self._follower_done(run_id, done))

    def _follower_done(self, run_id: str, task: asyncio.Task[None]) -> None:
        """A follower that raised is forgotten (the next listing starts it again) and reported once."""
        if task.cancelled() or (exc := task.exception()) is None:
            return
        if self._watching.get(run_id) is task:
            del self._watching[run_id]
        self._report(run_id, exc)

    def _report(self, run_id: str, exc: BaseException) -> None:
        """Tell ``on_error`` once per run and distinct error (``run_id`` empty: the listing itself)."""
        key = (run_id, f"{type(exc).__name__}: {exc}")
        if key not in self._reported:
            self._reported.add(key)
            self._on_error(run_id, exc)

    def _started_since_opened(self, started_at: str) -> bool:
        """``started_at`` (the run record's ISO 8601 start) is after this watcher began."""
        started = epoch_of(started_at)
        return started is not None and started >= self.opened

    async def _follow(self, runs: Runs, run_id: str, experiment: str, engine: str) -> None:
        tail = 0
        if run_id not in self._backlog:
            try:
                # What the log held when this dashboard first saw the run is history: a run already ready
                # (or crashed) then is not news. Only changes seen from here on are announced, and all
                # of a run started after this dashboard opened.
                host, rec = await runs.find(run_id)
                try:
                    self._backlog[run_id] = 0 if self._started_since_opened(rec.started_at) else await host.size(rec.log_path)
                except FileNotFoundError:
                    self._backlog[run_id] = 0
            except (ServelabError, HostUnreachable, OSError):
                self._watching.pop(run_id, None)
                return
        backlog = self._backlog[run_id]
        live = runs.live.get(run_id, engine)
        shown: RunState | None = None
        while True:
            try:
                status = await runs.status(run_id)
            except (ServelabError, HostUnreachable, OSError):
                self._watching.pop(run_id, None)
                return
            if status.analysis is not None:
                self._check(run_id, experiment, status.analysis, quiet=live.offset <= backlog)
            now = display_state(status.record.status, status.exit_code, status.analysis)
            if now is not shown:  # the first look too: a view listed before this analysis existed reads it now
                shown = now
                if self._on_change is not None:
                    self._on_change(run_id)
            if status.record.status.is_terminal:
                if live.streams == 0 or live.final or tail >= TAIL_POLLS:
                    break
                tail += 1
            await asyncio.sleep(POLL_SECONDS)
        self._ended(run_id, experiment, status)

    def _ended(self, run_id: str, experiment: str, status: RunStatus) -> None:
        # The one crash rule (engines.runs.history.display_state): what the process did, the log's word
        # having been announced already by _check.
        if display_state(status.record.status, status.exit_code, None) is RunState.CRASHED:
            self._once(run_id, experiment, "crashed", f"exit code {status.exit_code}")

    def _check(self, run_id: str, experiment: str, analysis: Analysis, quiet: bool = False) -> None:
        self.analyses[run_id] = analysis
        if analysis.state is RunState.READY or analysis.was_ready:
            self._once(run_id, experiment, "ready", "", quiet)
        if analysis.state is RunState.CRASHED:
            rc = analysis.root_cause
            detail = f"{rc.exception or 'error'}: {rc.message}" if rc else (analysis.hint or "")
            self._once(run_id, experiment, "crashed", detail, quiet)

    def _once(self, run_id: str, experiment: str, event: str, detail: str, quiet: bool = False) -> None:
        """Announce an event once; ``quiet``: it was already true when first seen (mark it, say nothing)."""
        if (run_id, event) in self._announced:
            return
        self._announced.add((run_id, event))
        if not quiet and run_id not in self._silent:
            self._announce(run_id, experiment, event, detail)

    def cancel(self) -> None:
        for task in self._watching.values():
            task.cancel()
