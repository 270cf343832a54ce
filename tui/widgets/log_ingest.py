"""A run's log ingest, kept where it cannot stall a keypress: a worker process per open log.

The dashboard's process only spools the bytes and finds line offsets (C-level, about 0.5 µs a
line, :meth:`LineIndex.append` with ``deferred=True``). Everything that costs Python time per
line — classifying lines for colours and folding, and feeding the engine's
:class:`~engines.logs.analyzer.LogAnalyzer` — runs in a child process that reads the same spool
file: the core's :mod:`engines.logs.ingest`, which classifies first (the log view needs it) and
analyses after, and sends back :class:`~engines.logs.classify.Classified` blocks and
:class:`~engines.logs.analyzer.Analysis` snapshots. Measured with ``bench/tui_follow.py``: with ingest in the UI's process, its GIL was
shared with a per-line Python loop and key-to-screen p99 went to ~300 ms beside a CPU-bound job.

The protocol (length-prefixed pickles on the child's stdin/stdout) is written down there. This
module is the dashboard's side: it starts the child, tells it what came, and turns its answers
into :class:`IngestUpdate` for the UI thread. If the child dies, the index falls back to
classifying in this process, and the error is reported once.
"""

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from servelab.engines.logs.classify import LineClassifier
from servelab.engines.logs.ingest import receive, send, unpack_analysis
from servelab.tui.widgets.line_index import LineIndex

if TYPE_CHECKING:  # the worker process imports the analyzer; the dashboard only receives its snapshots
    from servelab.engines.logs.analysis import Analysis

#: Seconds between two updates of the screen from the ingest (new rows, kinds, analysis): a
#: following view repaints at most this often, so keys find the UI thread free.
UPDATE_EVERY_S = 0.1
_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class IngestUpdate:
    """What changed since the last update, for the UI thread."""

    rows: int
    analysis: Analysis | None = None
    error: str | None = None


def _ignore(_update: IngestUpdate) -> None:
    """What a closed ingest tells its owner: nothing."""


class LogIngest:
    """The line index of one spooled log, with a worker process doing the per-line work."""

    def __init__(self, spool: Path, on_update: Callable[[IngestUpdate], None], *, fold_noise: bool = True) -> None:
        self.index = LineIndex(spool, deferred=True, fold_noise=fold_noise)
        self._on_update = on_update
        self._lock = threading.RLock()
        self._rows = 0
        self._analysis: Analysis | None = None
        self._error: str | None = None
        self._scheduled = False
        self._last_delivery = 0.0
        self._analysed = 0
        self._closed = False
        self._fallback: LineClassifier | None = None
        #: The latest analysis's pickled slices and their items (only the reader thread uses it).
        self._slices: dict[bytes, list[Any]] = {}
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._proc = subprocess.Popen(  # our own worker, on our own interpreter: no shell, no input from the log
            [sys.executable, "-m", "servelab.engines.logs.ingest"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # it reports its errors as messages; nothing may scribble on the TUI
            cwd=_ROOT,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._to_worker: IO[bytes] = self._proc.stdin
        self._from_worker: IO[bytes] = self._proc.stdout
        self._tell(("open", str(self.index.spool)))
        self._reader = threading.Thread(target=self._read_loop, name="log-ingest-reader", daemon=True)
        self._reader.start()

    @property
    def worker_pid(self) -> int:
        return self._proc.pid

    @property
    def analysed_bytes(self) -> int:
        """Spool bytes the analyzer has seen (it may lag behind the index while catching up)."""
        return self._analysed

    # -- from the owner ------------------------------------------------------------------------------
    def append(self, chunk: bytes) -> None:
        """Spool a chunk and index its line offsets; the worker is told to classify and analyse it.

        The new rows reach ``on_update`` with the worker's results, at most every ``UPDATE_EVERY_S``.
        """
        rows = self.index.append(chunk)
        if self._fallback is not None:
            rows += self._classify_here()
        else:
            self._tell(("grow", self.index.tail_start, self.index.size))
        with self._lock:
            self._rows += rows
        self._schedule()

    def analyse(self, engine: str) -> None:
        """Start analysing with this engine's grammar (from the spool's first byte)."""
        self._tell(("engine", engine))

    def mark_exited(self, exit_code: int | None) -> None:
        """The process is gone: the analyzer learns it once it has seen every spooled byte."""
        self._tell(("exited", exit_code))

    def finish(self) -> None:
        """The log ended: the analyzer finishes its last line."""
        self._tell(("finish",))

    def close(self) -> None:
        """Stop listening; the worker ends at the end of its input (reaped by the reader thread)."""
        if self._closed:
            return
        self._closed = True
        self._on_update = _ignore  # the reader thread may outlive its owner (a closed screen): let go of it
        try:
            self._to_worker.close()
        except OSError:
            pass
        self.index.close()

    # -- plumbing --------------------------------------------------------------------------------------
    def _tell(self, message: tuple[Any, ...]) -> None:
        if self._closed or self._fallback is not None:
            return
        try:
            send(self._to_worker, message)
        except (BrokenPipeError, OSError, ValueError):
            pass  # the reader sees the worker's end and falls back

    def _read_loop(self) -> None:
        while True:
            try:
                message = receive(self._from_worker.read)
            except (OSError, ValueError, pickle.UnpicklingError):
                message = None
            if message is None or self._closed:
                break
            kind = message[0]
            if kind == "kinds":
                try:
                    rows = self.index.apply(message[1])
                except ValueError as exc:  # out of step: stop listening, classify here from now on
                    with self._lock:
                        self._error = f"log worker out of step ({exc})"
                    break
                with self._lock:
                    self._rows += rows
            elif kind == "analysis":
                analysis = unpack_analysis(message[2], message[3], self._slices)
                with self._lock:
                    self._analysed = message[1]
                    self._analysis = analysis
            elif kind == "error":
                with self._lock:
                    self._error = str(message[1])
            self._schedule()
        if self._closed:
            try:
                self._to_worker.close()
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()  # our own child, stuck past its end of input: nothing in it to keep
                self._proc.wait()
            except OSError:
                pass
            return
        if not self._closed:
            code = self._proc.poll()
            with self._lock:
                why = self._error or f"log worker exited (code {code})"
                self._error = f"{why}; classifying lines here, analysis stopped"
                self._fallback = LineClassifier()
                self._fallback.next_line = self.index.line_count - self.index.unclassified
                self._rows += self._classify_here()
            self._schedule()

    def _classify_here(self) -> int:
        """Fallback when the worker is gone: classify the pending lines in this process."""
        with self._lock:
            assert self._fallback is not None
            block = self.index.read(self.index.classified_bytes, self.index.tail_start)
            return self.index.apply(self._fallback.classify(block)) if block else 0

    def _schedule(self) -> None:
        """Arrange one delivery (from any thread); many changes in a row make one update."""
        with self._lock:
            if self._scheduled:
                return
            self._scheduled = True
        if self._loop is None:
            self._deliver()
            return
        try:
            self._loop.call_soon_threadsafe(self._arm)
        except RuntimeError:  # the app's loop is closed: nobody to tell
            pass

    def _arm(self) -> None:
        assert self._loop is not None
        wait = self._last_delivery + UPDATE_EVERY_S - time.monotonic()
        if wait > 0:
            self._loop.call_later(wait, self._deliver)
        else:
            self._deliver()

    def _deliver(self) -> None:
        with self._lock:
            update = IngestUpdate(self._rows, self._analysis, self._error)
            self._rows, self._analysis, self._error, self._scheduled = 0, None, None, False
            self._last_delivery = time.monotonic()
        if not self._closed:
            self._on_update(update)
