"""Watches every running run from the app, so the operator hears (bell) when one is ready or crashes.

Each running run is polled through ``Runs.status``, whose analysis is the run's one shared
:class:`~engines.logs.live.LiveAnalysis`: a run open on its screen is fed by that screen's log
stream and not read again here. A process that ends with a non-zero exit code also counts as a
crash when the log did not say so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from engines.errors import ServelabError
from engines.hosts.base import HostUnreachable
from engines.logs.analyzer import Analysis
from engines.runs import Runs, RunStatus
from engines.runstate import RunState

LIST_SECONDS = 5.0
#: How often a running run's analysis is polled (it reads only the bytes added since).
POLL_SECONDS = 1.0
#: Polls after the process ended while a screen still streams the log's tail into the analysis.
TAIL_POLLS = 10

#: ``(run_id, experiment, event, detail)`` with event ``ready`` or ``crashed``.
Announce = Callable[[str, str, str, str], None]


class RunWatcher:
    """Announces each run's ready and crash once."""

    def __init__(self, runs: Callable[[], Runs], announce: Announce) -> None:
        self._runs = runs
        self._announce = announce
        self._watching: dict[str, asyncio.Task[None]] = {}
        self._announced: set[tuple[str, str]] = set()
        #: The latest analysis of every run followed, by run id (the experiments table reads it).
        self.analyses: dict[str, Analysis] = {}

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
            for rec in records:
                if rec.status.is_active and rec.id not in self._watching:
                    self._watching[rec.id] = asyncio.create_task(self._follow(runs, rec.id, rec.experiment, rec.engine))
                elif not rec.status.is_active and rec.id not in seen_ended:
                    seen_ended.add(rec.id)
                    # An old ended run is history; a run ended while we watched was handled by its follower.
                    if first:
                        self._announced.update({(rec.id, "ready"), (rec.id, "crashed")})
            first = False
            await asyncio.sleep(LIST_SECONDS)

    async def _follow(self, runs: Runs, run_id: str, experiment: str, engine: str) -> None:
        tail = 0
        try:
            # What the log held when this dashboard first saw the run is history: a run already ready
            # (or crashed) then is not news. Only changes seen from here on are announced.
            host, rec = await runs.find(run_id)
            try:
                backlog = await host.size(rec.log_path)
            except FileNotFoundError:
                backlog = 0
        except (ServelabError, HostUnreachable, OSError):
            self._watching.pop(run_id, None)
            return
        live = runs.live.get(run_id, engine)
        while True:
            try:
                status = await runs.status(run_id)
            except (ServelabError, HostUnreachable, OSError):
                self._watching.pop(run_id, None)
                return
            if status.analysis is not None:
                self._check(run_id, experiment, status.analysis, quiet=live.offset <= backlog)
            if status.record.status.is_terminal:
                if live.streams == 0 or live.final or tail >= TAIL_POLLS:
                    break
                tail += 1
            await asyncio.sleep(POLL_SECONDS)
        self._ended(run_id, experiment, status)

    def _ended(self, run_id: str, experiment: str, status: RunStatus) -> None:
        if status.exit_code not in (None, 0) and status.record.status is not RunState.STOPPED:
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
        if not quiet:
            self._announce(run_id, experiment, event, detail)

    def cancel(self) -> None:
        for task in self._watching.values():
            task.cancel()
