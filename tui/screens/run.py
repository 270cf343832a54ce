"""The run screen: stage bars, elapsed and liveness, the pinned root cause, the live log, the probe.

Three workers, none touching the UI from another thread: ``follow`` spools the log (line offsets
only; a :class:`LogIngest` worker process classifies lines and runs the analyzer, so a keypress
never waits for them), ``status`` asks the host about the process every
2 s (a dropped connection shows as such and is retried), and ``probe`` picks up ``probe.json``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.widgets import Header, Static

from servelab.engines.errors import ServelabError
from servelab.engines.gpus.stream import watch_host
from servelab.engines.gpus.watch import RunGpus
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.runs.history import Headline, earlier_stage_seconds, headline, probe_of
from servelab.engines.probe.summary import ProbeSummary
from servelab.engines.logs.live import LiveAnalysis
from servelab.engines.runs.records import RunRecord, RunStatus, RunUnreachable
from servelab.engines.runs.state import StageState
from servelab.tui.face import probe_of_app, request_probe, servelab_app
from servelab.tui.navigation import Confirm, OpenWhy, go
from servelab.tui.widgets.line_index import LineIndex
from servelab.tui.widgets.log_ingest import IngestUpdate, LogIngest
from servelab.tui.widgets.gpu_rows import GpuRows
from servelab.tui.widgets.log_view import LogPanel
from servelab.tui.widgets.preflight_checks import PreflightBlock
from servelab.tui.widgets.probe_panel import ProbePanel
from servelab.tui.widgets.root_cause import RootCausePanel
from servelab.tui.widgets.run_view_model import RunView, StageRow, format_duration, view_from_analysis
from servelab.tui.widgets.live_run_screen import LiveRunScreen
from servelab.tui.widgets.stage_timeline import StageTimeline
from servelab.tui.widgets.key_footer import KeyFooter

STATUS_SECONDS = 2.0
PROBE_SECONDS = 5.0
#: Longest the run screen waits for a long log's end to be drawn before reading the whole log.
TAIL_PAINT_WAIT_S = 1.0
#: Lower than this (rows), the stages show from the latest done one (app.tcss: ``-short``).
SHORT_HEIGHT = 30


#: Stage rows a short terminal still shows (80x24 included), as long as the run has that many.
SHORT_ROWS = 4


def short_stages(stages: list[StageRow], rows: int = SHORT_ROWS) -> list[StageRow]:
    """A short terminal's stages (the log keeps its height): the latest done one and those after
    it, and any failed or running before it; then the done ones just before, up to ``rows`` rows."""
    done = [i for i, stage in enumerate(stages) if stage.status == StageState.DONE]
    last = done[-1] if done else 0
    keep = {i for i, s in enumerate(stages) if i >= last or s.status in (StageState.FAILED, StageState.RUNNING)}
    for i in reversed(range(last)):
        if len(keep) >= rows:
            break
        keep.add(i)
    return [s for i, s in enumerate(stages) if i in keep]


def with_history(stage: StageRow, earlier_s: float | None, running_for_s: float = 0.0) -> StageRow:
    """A running stage without its own ETA gets one from earlier loads."""
    if earlier_s is None or stage.status != StageState.RUNNING or stage.eta_s is not None:
        return stage
    elapsed = running_for_s
    note = f"earlier loads took {format_duration(earlier_s)}"
    return replace(stage, eta_s=max(earlier_s - elapsed, 0.0), detail=f"{stage.detail}  {note}".strip())


class RunScreen(LiveRunScreen):
    """One run, live."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "stop", "Stop", id="run.stop"),
        Binding("P", "probe", "Probe", id="run.probe"),
        Binding("i", "toggle_preflight", "Preflight", show=False, id="run.preflight"),
        Binding("y", "why", "Why?", tooltip="diagnose: why it is slow or failed", id="run.why"),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.record: RunRecord | None = None
        self.view = view_from_analysis(None)
        self.alive: bool | None = None
        self.exit_code: int | None = None
        #: The last look at the run's process; the header's state and liveness are both made from it
        #: and the log's word (``engines.runs.history.headline``), so they cannot contradict.
        self.status: RunStatus | None = None
        #: What went wrong reaching the run (a lost log stream, a host error), shown instead; None when fine.
        self.trouble: str | None = None
        #: Set while the run's host cannot be reached: its state is then unknown (no alive, no counting ETA).
        self.host_down: RunUnreachable | None = None
        self.probe: ProbeSummary | None = None
        self.ingest = LogIngest(self._fresh_spool(), self._ingest_update)
        #: The log's end alone, shown while the whole log is spooled and indexed from its first
        #: byte behind it (a long log's last lines are on screen at once); None once swapped.
        self.tail: LineIndex | None = None
        self._tail_origin = 0  # log offset of the tail's first byte
        self._tail_end = 0  # log offset after its last byte
        self._analysing = False
        #: The run's one live analysis, shared with the watcher and ``servelab status``: this screen
        #: publishes what its ingest worker computes, so the run is not read or analysed twice.
        self.live: LiveAnalysis | None = None
        self.stage_history: dict[str, float] = {}
        #: When this screen first saw each stage running (monotonic), for the history ETA.
        self._running_since: dict[str, float] = {}
        self._shown_stages = ""
        self._shown_cause = ""
        self._shown_probe = ""
        self._heap_settled = False
        self._shown_title = ""
        #: The run's GPUs (``engines.gpus.watch``); None until its record is known.
        self.gpus: RunGpus | None = None
        #: "" until the first GPU sample: then the host's GPUs are known (a CPU host: its "no GPU" reason).
        self.gpu_note: str | None = None
        self._look_now = asyncio.Event()

    def _fresh_spool(self, suffix: str = ".log") -> Path:
        return self.fresh_spool(suffix)

    # -- layout ----------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="run-title", classes="title-bar")
        with Container(id="run-top"):
            yield StageTimeline(id="stages")
            yield RootCausePanel(id="root-cause")
        checks = servelab_app(self).preflights.get(self.run_id)
        if checks is not None:
            yield PreflightBlock(checks, id="preflight")
        yield GpuRows(id="gpus")
        yield ProbePanel(id="probe")
        yield LogPanel(self.index, id="log")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "run"
        self.sub_title = self.run_id
        self._render_all()
        self.query_one("#log-view").focus()
        self._follow()
        self._history()
        self._status()
        self._probe_watch()
        self._gpu_watch()
        self.set_interval(1.0, self._tick)

    def _tick(self) -> None:
        self._render_all()  # repaints only what changed (elapsed, history ETA)
        self._render_probe()

    @property
    def index(self) -> LineIndex:
        return self.ingest.index

    def on_unmount(self) -> None:
        self.ingest.close()
        self._drop_tail()

    def stop_offered(self) -> bool:
        # ended, and nothing of its group holds a GPU: nothing to stop
        return not (self.alive is False and not (self.gpus is not None and self.gpus.held_by_this_run))

    def offers(self, action: str) -> bool | None:
        if action == "toggle_preflight":
            return bool(self.query(PreflightBlock))
        return True

    # -- workers ---------------------------------------------------------------------------------
    @work(exclusive=True, group="follow", exit_on_error=False)
    async def _follow(self) -> None:
        offset = 0
        while True:
            try:
                if not self._analysing:
                    if self.record is None:
                        _host, self.record = await self.runs.find(self.run_id)
                    self.ingest.analyse(self.record.engine)
                    self._analysing = True
                    self.live = self.runs.live.get(self.run_id, self.record.engine)
                    self._render_title()
                    await self._show_tail()
                live = self.live
                assert live is not None
                live.streams += 1
                try:
                    async for new_offset, chunk in self.runs.follow(self.run_id, offset):
                        if new_offset == 0 and not chunk:
                            self._restart_log()
                            offset = 0
                            continue
                        offset = new_offset
                        await self._ingest(chunk)
                finally:
                    live.streams -= 1
                self._ingest_done()
                return
            except (HostUnreachable, ServelabError, OSError) as exc:
                self.trouble = f"log stream lost: {exc}; retrying"
                self._render_title()
                await asyncio.sleep(3.0)

    async def _ingest(self, chunk: bytes) -> None:
        # Spool + line offsets only (C-level, ~3 ms per MB); the rows show via _ingest_update.
        self.ingest.append(chunk)

    async def _show_tail(self) -> None:
        """A log longer than one tail read: show its end now, until the whole log is spooled."""
        tail = await self.runs.log_tail(self.run_id)
        if tail.offset == 0 or not tail.data or self.index.size > 0:
            return  # short (the whole log comes in a few chunks) or already spooling
        index = LineIndex(self._fresh_spool(".tail.log"), fold_noise=self.index.fold_noise)
        index.append(tail.data)
        self.tail, self._tail_origin, self._tail_end = index, tail.offset, tail.offset + len(tail.data)
        self.query_one(LogPanel).set_index(index, note=f"the log's end; reading its first {tail.offset / 1e6:,.0f} MB")
        # Let it be drawn before the whole log is read: spooling a long log keeps the event loop
        # busy, and a frame takes many turns of it (the end was drawn 1.5 s late at load 7).
        painted = asyncio.Event()
        self.call_after_refresh(painted.set)
        try:
            await asyncio.wait_for(painted.wait(), TAIL_PAINT_WAIT_S)
        except TimeoutError:  # not on screen (another screen on top): nothing to wait for
            pass

    def _swap_in_whole_log(self) -> None:
        """The whole log is spooled and classified past the tail's end: show it, in the reader's place."""
        tail, origin = self.tail, self._tail_origin
        assert tail is not None
        index = self.index
        self.query_one(LogPanel).swap_index(index, lambda line: index.line_at_offset(origin + tail.start_of(line)))
        self._drop_tail()
        self._settle_heap()

    def _settle_heap(self) -> None:
        """Once, when the screen shows its whole log: what it is built of leaves the collector's
        full passes (``ServelabApp.settle_heap``; they were a followed log's key-to-screen p99)."""
        if not self._heap_settled:
            self._heap_settled = True
            self.call_after_refresh(servelab_app(self).settle_heap)

    def _drop_tail(self) -> None:
        if self.tail is not None:
            self.tail.close()
            self.tail.spool.unlink(missing_ok=True)
            self.tail = None

    def _ingest_update(self, update: IngestUpdate) -> None:
        """On the UI thread: the worker classified lines or sent a new analysis."""
        if not self.is_attached:
            return
        if self.tail is None:
            self.query_one(LogPanel).lines_added(update.rows)
            if update.rows:
                self._settle_heap()
        elif self.index.classified_bytes >= self._tail_end:  # spooled and its kinds known: no unfolded flash
            self._swap_in_whole_log()
        if update.analysis is not None:
            if self.live is not None:
                self.live.publish(update.analysis, self.ingest.analysed_bytes)
            self._set_view(view_from_analysis(update.analysis))
        if update.error is not None:
            self.notify(update.error, title="log ingest", severity="warning", timeout=8)

    async def _mark_exited(self, exit_code: int | None) -> None:
        """Tell the analyzer the process is gone, so a silent death still reads as a crash."""
        self.ingest.mark_exited(exit_code)

    def _ingest_done(self) -> None:
        """The log ended (the process exited): let the analyzer finish the last line."""
        self.ingest.finish()

    def _restart_log(self) -> None:
        """The log was truncated or replaced: index and analyse it afresh, in the same panel."""
        fold = self.index.fold_noise
        self.ingest.close()
        self._drop_tail()
        self.ingest = LogIngest(self._fresh_spool(), self._ingest_update, fold_noise=fold)
        if self.record is not None:
            self.ingest.analyse(self.record.engine)
        self.query_one(LogPanel).set_index(self.index)

    @work(exclusive=True, group="history", exit_on_error=False)
    async def _history(self) -> None:
        """Stage durations of earlier loads of the same model on the same host (from their probe.json)."""
        try:
            _host, rec = await self.runs.find(self.run_id)
            self.stage_history = await earlier_stage_seconds(self.runs, rec)
        except (HostUnreachable, ServelabError, OSError):
            return
        self._shown_stages = ""
        self._render_all()

    @work(exclusive=True, group="status", exit_on_error=False)
    async def _status(self) -> None:
        while True:
            was_alive = self.alive
            try:
                status = await self.runs.status(self.run_id, analyze=False)
            except RunUnreachable as exc:
                self.host_down, self.alive = exc, None
                self.trouble = exc.short()
                if was_alive is not None:
                    self.refresh_bindings()
            except (HostUnreachable, OSError) as exc:
                self.trouble = f"host unreachable ({exc}); retrying"
            except ServelabError as exc:
                self.trouble = f"{exc}; retrying"
            else:
                self._set_status(status)
                if status.alive != was_alive:
                    self.refresh_bindings()
                if not status.alive and (status.record.pid is not None or (status.job is not None and status.record.status.is_terminal)):
                    await self._mark_exited(status.exit_code)
            self._render_title()
            if self.alive is False and self.exit_code is not None:
                return
            self._look_now.clear()
            try:  # every STATUS_SECONDS, or at once when the app hears the run changed (a stop elsewhere)
                await asyncio.wait_for(self._look_now.wait(), STATUS_SECONDS)
            except TimeoutError:
                pass

    def _set_status(self, status: RunStatus) -> None:
        self.host_down = None
        self.trouble = None
        self.status = status
        self.record = status.record
        self.alive = status.alive
        self.exit_code = status.exit_code

    def runs_changed(self) -> None:
        """The app heard a run's state change (a stop from any screen or process): look at once."""
        self._look_now.set()

    def headline(self) -> Headline:
        """The header's state and liveness, made together (``engines.runs.history.headline``)."""
        return headline(self.status, self.view.state, blamed=self.view.root_cause is not None)

    @property
    def liveness(self) -> str:
        """What the header says about the process (or about reaching it)."""
        return self.trouble if self.trouble is not None else self.headline().words

    @work(exclusive=True, group="gpus", exit_on_error=False)
    async def _gpu_watch(self) -> None:
        """The run's host's GPUs from one long-lived sampler (``engines.gpus.stream``: a sample a second
        from one nvidia-smi loop), until they are judged after the run ended; a CPU host answers once
        and says "no GPU". Leaving the screen cancels this worker, which ends the sampler."""
        while self.record is None:
            await asyncio.sleep(0.2)
        gpus = self.gpus = self.gpus or RunGpus(self.record)
        try:
            host = self.runs.host(gpus.record.host)
        except (ServelabError, HostUnreachable, OSError) as exc:  # a host no longer in hosts.toml
            self.gpu_note = f"GPUs: {exc}"
            return
        async with aclosing(watch_host(host)) as samples:
            async for sample in samples:
                if isinstance(sample, str):
                    self.gpu_note = sample
                    continue
                if self.alive is False:
                    gpus.ended(sample.t)
                held = gpus.held_by_this_run
                gpus.feed(sample, self._shards_done())
                if gpus.held_by_this_run != held:
                    self.refresh_bindings()  # s ends what of its group still holds a GPU
                self.gpu_note = "" if gpus.no_gpu is None else "no GPU"
                self.query_one(GpuRows).show(gpus.panel() if gpus.no_gpu is None else replace(gpus.panel(), lines=()))
                self._render_title()
                if gpus.done:
                    return

    def _shards_done(self) -> int | None:
        """The running stage's bar count (the weights' shards during a load), for the flat-memory hint."""
        running = [s for s in self.view.stages if s.status == StageState.RUNNING and s.done is not None]
        return int(running[-1].done or 0) if running else None

    @work(exclusive=True, group="probe", exit_on_error=False)
    async def _probe_watch(self) -> None:
        while self.probe is None:
            try:
                self.probe = await probe_of(self.runs, self.run_id)
            except (HostUnreachable, ServelabError, OSError):
                pass
            if self.probe is not None:
                self._render_probe()
                return
            if self.alive is False and self.exit_code is not None:
                return
            await asyncio.sleep(PROBE_SECONDS)

    # -- rendering -------------------------------------------------------------------------------
    def _set_view(self, view: RunView) -> None:
        self.view = view
        self._render_all()

    def _render_all(self) -> None:
        """Repaint the stages and root cause, only when what they show changed (a layout costs)."""
        self._render_title()
        now = time.monotonic()
        for stage in self.view.stages:
            if stage.status == StageState.RUNNING:
                self._running_since.setdefault(stage.id, now)
        stages = [
            with_history(stage, self.stage_history.get(stage.id), now - self._running_since.get(stage.id, now))
            if self.host_down is None else stage  # the host is down: no ETA counting on its own
            for stage in self.view.stages
        ]
        if self.size.height < 40 or self.view.root_cause is not None:
            # Compact: done and running stages, then only the next pending one.
            shown, pending_seen = [], False
            for stage in stages:
                if stage.status == StageState.PENDING:
                    if pending_seen or self.view.root_cause is not None:
                        continue
                    pending_seen = True
                shown.append(stage)
            stages = shown
        if self.size.height < SHORT_HEIGHT:
            stages = short_stages(stages)
        key = repr(stages)
        if key != self._shown_stages:
            self._shown_stages = key
            self.query_one(StageTimeline).show(stages)
        cause_key = repr((self.view.root_cause, self.view.hint))
        if cause_key != self._shown_cause:
            self._shown_cause = cause_key
            self.query_one(RootCausePanel).show(self.view.root_cause, self.view.hint)

    def _render_probe(self) -> None:
        """Stored probe results, else the app's probe in progress, else live figures from the log."""
        self.probe, progress = probe_of_app(self, self.run_id, self.probe)
        key = repr((self.probe is not None, progress, self.view.spec_decode))
        if key != self._shown_probe:
            self._shown_probe = key
            self.query_one(ProbePanel).show(self.probe, progress, live=self.view.spec_decode)

    def elapsed_s(self) -> float | None:
        if self.record is None or not self.record.started_at:
            return None
        try:
            started = dt.datetime.fromisoformat(self.record.started_at)
        except ValueError:
            return None
        if started.tzinfo is None:
            started = started.replace(tzinfo=dt.timezone.utc)
        return (dt.datetime.now(dt.timezone.utc) - started).total_seconds()

    def _render_title(self) -> None:
        rec = self.record
        head = self.headline()
        state = head.state
        style = state.style
        parts: list[Any] = [(rec.experiment if rec else self.run_id, "bold"), "  "]
        parts.append((f" {state.upper()} ", f"reverse {style}"))
        if rec is not None:
            parts.append(f"  {rec.engine} on {rec.host}" + (" (no GPU)" if self.gpu_note == "no GPU" else ""))
        elapsed = self.elapsed_s() if self.alive is not False and self.host_down is None else None
        if elapsed is not None:
            parts.append(f" · {format_duration(elapsed)}")
        if self.host_down is not None:  # the whole message, on as many lines as it needs
            parts.append((f" · {self.liveness}", "yellow"))
            title = Text.assemble(*parts, overflow="fold")
        else:
            parts.append(f" · {self.trouble if self.trouble is not None else head.words}")
            title = Text.assemble(*parts, overflow="ellipsis", no_wrap=True)
        key = ("\0" if self.host_down is not None else "") + title.plain
        if key != self._shown_title:
            relayout = key[:1] == "\0" or self._shown_title[:1] == "\0"  # a wrapping title may change height
            self._shown_title = key
            widget = self.query_one("#run-title", Static)
            widget.set_class(key[:1] != "\0", "one-line")
            widget.update(title, layout=relayout)

    # -- actions ---------------------------------------------------------------------------------
    def action_stop(self) -> None:
        if servelab_app(self).readonly:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop()

        if self.alive is False:  # ended, but its group still holds a GPU
            go(self, Confirm(f"End what is left of run {self.run_id}?", "Its processes still hold GPU memory: SIGTERM to each, SIGKILL after 10 s."), answered)
            return
        go(self, Confirm(f"Stop run {self.run_id}?", "SIGTERM to its process group, SIGKILL after 10 s."), answered)

    @work(exclusive=True, group="stop", exit_on_error=False)
    async def _stop(self) -> None:
        self.notify(f"stopping {self.run_id}…", timeout=3)
        try:
            status = await self.runs.stop(self.run_id)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.notify(str(exc), title="stop failed", severity="error", timeout=8)
            return
        ended_before = self.alive is False
        self._set_status(status)
        if ended_before and self.gpus is not None and self.gpus.stopped_at is not None:
            self.gpus.stopped_again()  # its leftovers ended: do the GPUs come back now?
            self._gpu_watch()
        self._render_title()
        self.refresh_bindings()
        servelab_app(self).runs_changed()  # every screen showing this run reads it now
        self.notify(f"{self.run_id} stopped" + (f" · {status.record.stop_signal}" if status.record.stop_signal else ""), timeout=4)

    def action_probe(self) -> None:
        if request_probe(self, self.run_id):
            self._render_probe()

    def action_why(self) -> None:
        go(self, OpenWhy([self.run_id]))

    def action_toggle_preflight(self) -> None:
        for block in self.query(PreflightBlock):
            block.collapsed = not block.collapsed
