"""The one live analysis of a run's log: bytes in as they arrive, a typed :class:`Analysis` out.

Before this module the same thing was built three times (``servelab status``, the dashboard's
watcher and the run screen), each with its own offset and its own idea of truncation, and a run
open on screen was read twice. Now:

- :class:`LiveAnalysis` owns one run's byte offset, its ``LogAnalyzer``, what happens when the log
  shrinks (read again from the start) and when the process is gone (``finish`` + ``mark_exited``).
  The analyzer runs in a thread (``asyncio.to_thread``), never on the event loop.
- :class:`LiveAnalyses` is the registry, keyed by run id, that ``engines.runs.manager.Runs`` holds: every
  caller that asks about a run through the same ``Runs`` shares one analysis. Whoever already
  streams the log (the run screen) feeds it with :meth:`LiveAnalysis.feed_at`; a poll
  (:meth:`LiveAnalysis.catch_up`) then reads only bytes nobody has fed yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from servelab.engines.adapters.base import get_adapter
from servelab.engines.hosts.base import Host
from servelab.engines.logs.analyzer import LogAnalyzer
from servelab.engines.logs.grammar import STAGE_LABELS, STAGES, LogGrammar
from servelab.engines.logs.analysis import Analysis, Stage
from servelab.engines.runs.state import StageState

__all__ = ["STAGES", "STAGE_LABELS", "LiveAnalyses", "LiveAnalysis", "analyzer_for", "current_stage"]

#: Bytes read from the host per request when catching up.
CHUNK = 1 << 20


def analyzer_for(engine: str) -> LogAnalyzer:
    """A fresh incremental analyzer with the engine adapter's log grammar."""
    grammar: LogGrammar = get_adapter(engine).grammar
    return LogAnalyzer(grammar)


class LiveAnalysis:
    """One run's analyzer and how far into its log it has read."""

    def __init__(self, engine: str, make: Callable[[str], LogAnalyzer] = analyzer_for) -> None:
        self.engine = engine
        self._make = make
        self.lock = asyncio.Lock()
        #: Streams currently feeding this analysis (a poll then does not read the log itself).
        self.streams = 0
        self._reset()

    def _reset(self) -> None:
        self._analyzer = self._make(self.engine)
        #: Bytes of the log fed so far.
        self.offset = 0
        #: The process is gone and the analyzer finished: nothing more will change.
        self.final = False
        self.analysis: Analysis | None = None
        #: The analysis came from a stream's own analyzer (a worker process), not from this one.
        self._published = False

    # -- feeding ------------------------------------------------------------------------------------
    async def feed_at(self, offset: int, chunk: bytes) -> Analysis | None:
        """Feed the bytes ``[offset, offset + len(chunk))`` of the log; the part already fed is skipped.

        Returns the new analysis, or None when the chunk held nothing new (or a gap lies before it).
        """
        async with self.lock:
            end = offset + len(chunk)
            if self.final or self._published or end <= self.offset or offset > self.offset:
                return None
            fresh = chunk[self.offset - offset :]
            self.analysis = await asyncio.to_thread(self._feed, fresh)
            self.offset = end
            return self.analysis

    def _feed(self, chunk: bytes) -> Analysis:
        self._analyzer.feed(chunk)
        return self._analyzer.snapshot()

    def publish(self, analysis: Analysis, offset: int) -> None:
        """A stream that analyses the log itself (off the UI's process) shares its analysis of ``offset`` bytes.

        While that stream runs, polls return it and read nothing; when it has gone, the next poll
        adopts it if the run ended there, else analyses the log again with this object's analyzer.
        """
        self.analysis = analysis
        self.offset = offset
        self._published = True

    async def restart(self) -> None:
        """The log was truncated or replaced: analyse it again from its first byte."""
        async with self.lock:
            self._reset()

    async def end(self, exit_code: int | None) -> Analysis:
        """The process is gone: finish the last line and say how it exited (a silent death is a crash)."""
        async with self.lock:
            if not self.final or self.analysis is None:
                self._analyzer.finish()
                self._analyzer.mark_exited(exit_code)
                self.final = True
                self.analysis = self._analyzer.snapshot()
            return self.analysis

    # -- polling --------------------------------------------------------------------------------------
    async def catch_up(self, host: Host, log_path: str, *, alive: bool, exit_code: int | None) -> Analysis:
        """Read what the log gained since the last call (from the host, in chunks) and analyse it.

        A log that shrank is read again from the start; an ended run's analysis is read once.
        """
        try:
            size = await host.size(log_path)
        except FileNotFoundError:
            size = 0
        if self.final and self.analysis is not None and size == self.offset and not alive:
            return self.analysis  # an ended run: its analysis does not change
        if self._published and self.analysis is not None:
            if self.streams > 0:
                return self.analysis  # the stream keeps it current
            if not alive and size == self.offset and self.analysis.state.is_terminal:
                self.final = True  # the stream saw the whole log and the end of the process
                return self.analysis
            await self.restart()
        if size < self.offset or self.final:
            await self.restart()
        if self.streams == 0:
            while self.offset < size:
                start = self.offset
                chunk = await host.read_bytes(log_path, start, CHUNK)
                if not chunk:
                    break
                await self.feed_at(start, chunk)
        if not alive and self.streams == 0:  # a stream still delivering the tail ends it itself
            return await self.end(exit_code)
        if self.analysis is None:
            async with self.lock:
                self.analysis = self._analyzer.snapshot()
        return self.analysis


def current_stage(analysis: Analysis) -> Stage | None:
    """The stage the run is in: the one that failed, else the last one running, else the last done."""
    for status in (StageState.FAILED, StageState.RUNNING, StageState.DONE):
        found = [s for s in analysis.stages if s.status == status]
        if found:
            return found[-1]
    return None


class LiveAnalyses:
    """Every live analysis of one ``Runs``, by run id: one per run, whoever asks."""

    def __init__(self, make: Callable[[str], LogAnalyzer] = analyzer_for) -> None:
        self._make = make
        self._by_run: dict[str, LiveAnalysis] = {}

    def get(self, run_id: str, engine: str) -> LiveAnalysis:
        """The run's live analysis, made on first use."""
        live = self._by_run.get(run_id)
        if live is None or live.engine != engine:
            live = self._by_run[run_id] = LiveAnalysis(engine, self._make)
        return live

    def drop(self, run_id: str) -> None:
        """Forget a run (its analysis is made again from the log when asked for)."""
        self._by_run.pop(run_id, None)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._by_run
