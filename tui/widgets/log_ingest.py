"""A run's log ingest, kept where it cannot stall a keypress: a worker process per open log.

The dashboard's process only spools the bytes and finds line offsets (C-level, about 0.5 µs a
line, :meth:`LineIndex.append` with ``deferred=True``). Everything that costs Python time per
line — classifying lines for colours and folding, and feeding the engine's
:class:`~engines.logs.analyzer.LogAnalyzer` — runs in a child process that reads the same spool
file. The child classifies first (the log view needs it) and analyses after, and sends back
:class:`~tui.widgets.line_index.Classified` blocks and :class:`~engines.logs.analyzer.Analysis`
snapshots. Measured with ``bench/tui_follow.py``: with ingest in the UI's process, its GIL was
shared with a per-line Python loop and key-to-screen p99 went to ~300 ms beside a CPU-bound job.

Protocol: length-prefixed pickles on the child's stdin/stdout, between this module and the child
it started (nothing else writes those pipes). If the child dies, the index falls back to
classifying in this process, and the error is reported once.

Run as ``python -m tui.widgets.log_ingest`` (by :class:`LogIngest` only).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from servelab.tui.widgets.line_index import Classified, LineClassifier, LineIndex

if TYPE_CHECKING:  # the worker process imports the analyzer; the dashboard only receives its snapshots
    from servelab.engines.logs.analyzer import LogAnalyzer
    from servelab.engines.logs.values import Analysis

#: Bytes the worker classifies or analyses between two looks at its input.
BLOCK = 1 << 20
#: Seconds between two analysis snapshots while the log grows (one costs ~15 ms to make and
#: ~12 ms to unpickle); once no byte came for ``SNAPSHOT_QUIET_S``, the latest goes at once.
SNAPSHOT_EVERY_S = 1.0
SNAPSHOT_QUIET_S = 0.2
#: Seconds between two updates of the screen from the ingest (new rows, kinds, analysis): a
#: following view repaints at most this often, so keys find the UI thread free.
UPDATE_EVERY_S = 0.1
#: Items of a long list in an analysis (the throughput series: up to 4,096 points) pickled per
#: message part. The dashboard's reader thread unpickles an analysis; one ``pickle.loads`` is one
#: C call that holds the GIL throughout (a whole snapshot: 15-50 ms, once a second, stalling the
#: event loop and so any key). In parts, the UI thread gets the GIL back between two of them.
SLICE_ITEMS = 256
_HEADER = struct.Struct("!I")
_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class IngestUpdate:
    """What changed since the last update, for the UI thread."""

    rows: int
    analysis: Analysis | None = None
    error: str | None = None


def _ignore(_update: IngestUpdate) -> None:
    """What a closed ingest tells its owner: nothing."""


def _send(out: IO[bytes], message: tuple[Any, ...]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HEADER.pack(len(data)) + data)
    out.flush()


def pack_analysis(analysis: Any, starts: dict[str, int] | None = None) -> tuple[Any, dict[str, list[bytes]]]:
    """The analysis without its long lists, and those lists as pickled slices (see SLICE_ITEMS).

    ``starts`` gives, per list, the position of its first item in the series it is a window of
    (the worker counts them: :class:`SeriesWindows`). Slices are cut at multiples of SLICE_ITEMS
    of those positions, so a window that slid by a few items still has its middle slices byte for
    byte as sent before, and the dashboard reuses what it unpickled then (:func:`unpack_analysis`).
    """
    if not dataclasses.is_dataclass(analysis) or isinstance(analysis, type):
        return analysis, {}
    parts: dict[str, list[bytes]] = {}
    for field in dataclasses.fields(analysis):
        value = getattr(analysis, field.name)
        if isinstance(value, list) and len(value) > SLICE_ITEMS:
            first = -(starts or {}).get(field.name, 0) % SLICE_ITEMS or SLICE_ITEMS
            cuts = [0, *range(first, len(value), SLICE_ITEMS), len(value)]
            parts[field.name] = [pickle.dumps(value[a:b], protocol=pickle.HIGHEST_PROTOCOL)
                                 for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
    return (dataclasses.replace(analysis, **{name: [] for name in parts}) if parts else analysis), parts


def unpack_analysis(light: Any, parts: dict[str, list[bytes]], reuse: dict[bytes, list[Any]] | None = None) -> Any:
    """The analysis :func:`pack_analysis` split, whole again; one short GIL hold per slice.

    ``reuse`` holds the slices of the previous analysis (pickled bytes -> their items) and is
    replaced by this one's: a slice sent again byte for byte is not unpickled again, and its items
    are the objects the dashboard already has. A followed log's throughput series is 4,096 points
    that slide by a few a second; unpickled afresh, each second made 4,096 new objects that lived
    long enough to reach the collector's oldest generation, and its full passes (each a key's wait
    of 20-60 ms) came every ~1.5 s. Equal bytes unpickle to equal items, so reusing them is exact.
    """
    if not parts:
        if reuse is not None:
            reuse.clear()
        return light
    known = dict(reuse) if reuse is not None else {}
    if reuse is not None:
        reuse.clear()
    whole: dict[str, list[Any]] = {}
    for name, slices in parts.items():
        items = whole[name] = []
        for blob in slices:
            got = known.get(blob)
            if got is None:
                got = pickle.loads(blob)
            if reuse is not None:
                reuse[blob] = got
            items.extend(got)
    return dataclasses.replace(light, **whole)


class SeriesWindows:
    """Where each long list of successive snapshots starts in its series (for pack_analysis).

    The analyzer keeps the newest points of a series: from one snapshot to the next, the list
    loses some items at its front and gains some at its end. The shift is found from the first
    item; a list that does not continue the previous one starts a new count (only reuse is lost).
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[list[Any], int]] = {}

    def starts(self, analysis: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        if not dataclasses.is_dataclass(analysis) or isinstance(analysis, type):
            return out
        for field in dataclasses.fields(analysis):
            value = getattr(analysis, field.name)
            if not isinstance(value, list) or len(value) <= SLICE_ITEMS:
                continue
            prev, start = self._last.get(field.name, ([], 0))
            shift = _shift(prev, value)
            start = start + shift if shift is not None else start + len(prev)
            self._last[field.name] = (value, start)
            out[field.name] = start
        return out


def _shift(prev: list[Any], cur: list[Any]) -> int | None:
    """How many items ``cur`` dropped from the front of ``prev`` and otherwise continues it; None if it does not."""
    if not prev or not cur:
        return None
    try:
        shift = prev.index(cur[0])
    except ValueError:
        return None
    kept = len(prev) - shift
    return shift if prev[shift:] == cur[:kept] else None


def _read_exact(read: Callable[[int], bytes], size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        more = read(size - len(data))
        if not more:
            return None
        data += more
    return data


def _receive(read: Callable[[int], bytes]) -> tuple[Any, ...] | None:
    """One message, or None at the end of the stream."""
    head = _read_exact(read, _HEADER.size)
    if head is None:
        return None
    (size,) = _HEADER.unpack(head)
    data = _read_exact(read, size)
    if data is None:
        return None
    message: tuple[Any, ...] = pickle.loads(data)
    return message


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
            [sys.executable, "-m", "servelab.tui.widgets.log_ingest"],
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
            _send(self._to_worker, message)
        except (BrokenPipeError, OSError, ValueError):
            pass  # the reader sees the worker's end and falls back

    def _read_loop(self) -> None:
        while True:
            try:
                message = _receive(self._from_worker.read)
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


# -- the worker process ---------------------------------------------------------------------------------
def _make_analyzer(engine: str) -> LogAnalyzer:
    from servelab.engines.adapter import get_adapter
    from servelab.engines.logs.analyzer import LogAnalyzer

    return LogAnalyzer(get_adapter(engine).grammar)


class _Worker:
    """Classifies and analyses a spool file as it grows, classification first."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.fd = -1
        self.classifier = LineClassifier()
        self.classified = 0  # spool offset of the first unclassified line
        self.complete = 0  # spool offset after the last whole line
        self.size = 0  # spooled bytes
        self.analyzer: LogAnalyzer | None = None
        self.analysed = 0
        self.marks: list[tuple[Any, ...]] = []
        self.dirty = False
        self.last_snapshot = 0.0
        self.last_data = 0.0
        self.windows = SeriesWindows()

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "open":
            self.fd = os.open(message[1], os.O_RDONLY)
        elif kind == "grow":
            if message[2] > self.size:
                self.last_data = time.monotonic()
            self.complete, self.size = max(self.complete, message[1]), max(self.size, message[2])
        elif kind == "engine":
            self.analyzer = _make_analyzer(message[1])
            self.analysed = 0
            self.dirty = True
        elif kind in ("exited", "finish"):
            self.marks.append(message)

    def wait_s(self) -> float | None:
        """How long to wait for input before the next step: 0 with work to do, None for ever."""
        if self.classified < self.complete:
            return 0.0
        if self.analyzer is None:
            return 0.0 if self.marks else None
        if self.analysed < self.size or self.marks:
            return 0.0
        if self.dirty:
            due = min(self.last_snapshot + SNAPSHOT_EVERY_S, self.last_data + SNAPSHOT_QUIET_S)
            return max(due - time.monotonic(), 0.0)
        return None

    def step(self) -> None:
        if self.classified < self.complete:
            end = min(self.complete, self.classified + BLOCK)
            block = os.pread(self.fd, end - self.classified, self.classified)
            if end < self.complete:
                block = block[: block.rfind(b"\n") + 1]
            if block:
                _send(self.out, ("kinds", self.classifier.classify(block)))
                self.classified += len(block)
                return
        analyzer = self.analyzer
        if analyzer is None:
            self.marks.clear()
            self.dirty = False
            return
        if self.analysed < self.size:
            data = os.pread(self.fd, min(BLOCK, self.size - self.analysed), self.analysed)
            analyzer.feed(data)
            self.analysed += len(data)
            self.dirty = True
        if self.analysed >= self.size and self.marks:  # only once every spooled byte is analysed
            for mark in self.marks:
                if mark[0] == "exited":
                    analyzer.mark_exited(mark[1])
                else:
                    analyzer.finish()
            self.marks.clear()
            self._snapshot()  # the end of a run shows at once
        elif self.dirty:
            now = time.monotonic()
            if now - self.last_snapshot >= SNAPSHOT_EVERY_S or (self.analysed >= self.size and now - self.last_data >= SNAPSHOT_QUIET_S):
                self._snapshot()

    def _snapshot(self) -> None:
        assert self.analyzer is not None
        analysis = self.analyzer.snapshot()
        _send(self.out, ("analysis", self.analysed, *pack_analysis(analysis, self.windows.starts(analysis))))
        self.last_snapshot = time.monotonic()
        self.dirty = False


def serve(fd: int, out: IO[bytes]) -> None:
    """The worker's loop: read every waiting message, then do one block of work."""
    worker = _Worker(out)

    def read(size: int) -> bytes:
        return os.read(fd, size)

    while True:
        wait = worker.wait_s()
        while True:
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                break
            message = _receive(read)
            if message is None:
                return
            worker.handle(message)
            wait = 0.0
        worker.step()


def lower_priority() -> None:
    """SCHED_BATCH: this worker never preempts a process that wakes up (the dashboard's UI thread
    on a key), yet keeps its fair share of the CPU.

    Not ``nice``: at nice 10 the worker lost the CPU to every other busy process of a shared
    machine (load 8-10 here), the analysis fell seconds behind and the run screen's stage bars
    with it (``test_ready_run_shows_stage_bars_and_announces_ready`` failed).
    """
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux
        pass


def main() -> int:
    lower_priority()
    try:
        serve(sys.stdin.fileno(), sys.stdout.buffer)
    except (BrokenPipeError, KeyboardInterrupt):
        return 0
    except Exception as exc:  # noqa: BLE001 - one line to the dashboard, which falls back
        try:
            _send(sys.stdout.buffer, ("error", f"log worker: {type(exc).__name__}: {exc}"))
        except OSError:
            pass
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
