"""The worker side of a run's log ingest: one process per log open on the dashboard.

The dashboard (``tui/widgets/log_ingest.py``, ``LogIngest``) spools a log's bytes to a file and
finds its line offsets; this process reads the same spool file and does everything that costs
Python time per line: it classifies lines first (:class:`~engines.logs.classify.LineClassifier`,
the log view needs them) and feeds the engine's :class:`~engines.logs.analyzer.LogAnalyzer` after,
and sends back :class:`~engines.logs.classify.Classified` blocks and
:class:`~engines.logs.analyzer.Analysis` snapshots.

Once the engine is named, both read a block from one Hyperscan pass: the classifier's anchors are
patterns of the analyzer's prefilter database (one database, compiled and cached once:
:meth:`~engines.logs.prefilter.Prefilter.share`), and while the two are in step (the analyzer has
read up to the block, or into its first line) one scan's matches go to both: then the classifier no
longer runs ahead of the analysis over a long backlog, the two go block by block (both done sooner,
the last kinds later); an analyzer that starts behind catches up on its own scans, as before.

Protocol: length-prefixed pickles (:func:`send` / :func:`receive`) on the child's stdin/stdout,
between the dashboard and the child it started (nothing else writes those pipes).

- to the worker: ``("open", spool path)``, ``("grow", end of the whole lines, size)``,
  ``("engine", name)``, ``("exited", exit code)``, ``("finish",)``;
- from it: ``("kinds", Classified)``, ``("analysis", bytes analysed, light analysis, slices)``
  (:func:`pack_analysis` / :func:`unpack_analysis`), ``("error", text)``.

Run as ``python -m servelab.engines.logs.ingest`` (by ``LogIngest`` only).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import select
import struct
import sys
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from servelab.engines.logs.classify import ANCHOR_SOURCES, Classified, LineClassifier, fold_after_stop
from servelab.engines.logs.prefilter import LineStarts

if TYPE_CHECKING:  # imported when the dashboard names the engine (lines are classified before)
    from servelab.engines.logs.analyzer import LogAnalyzer

__all__ = ["BLOCK", "SLICE_ITEMS", "SNAPSHOT_EVERY_S", "SNAPSHOT_QUIET_S", "SeriesWindows", "Worker", "main",
           "pack_analysis", "receive", "send", "serve", "unpack_analysis"]

#: Bytes the worker classifies or analyses between two looks at its input.
BLOCK = 1 << 20
#: Seconds between two analysis snapshots while the log grows (one costs ~15 ms to make and
#: ~12 ms to unpickle); once no byte came for ``SNAPSHOT_QUIET_S``, the latest goes at once.
SNAPSHOT_EVERY_S = 1.0
SNAPSHOT_QUIET_S = 0.2
#: Items of a long list in an analysis (the throughput series: up to 4,096 points) pickled per
#: message part. The dashboard's reader thread unpickles an analysis; one ``pickle.loads`` is one
#: C call that holds the GIL throughout (a whole snapshot: 15-50 ms, once a second, stalling the
#: event loop and so any key). In parts, the UI thread gets the GIL back between two of them.
SLICE_ITEMS = 256
_HEADER = struct.Struct("!I")


def send(out: IO[bytes], message: tuple[Any, ...]) -> None:
    """One message: its length, then its pickle."""
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


def receive(read: Callable[[int], bytes]) -> tuple[Any, ...] | None:
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


# -- the worker process ---------------------------------------------------------------------------------
def _analyzer_for(engine: str) -> LogAnalyzer:
    """:func:`engines.logs.live.analyzer_for`, imported when the engine is named (the worker
    classifies lines before it knows the engine, and starts without the adapters)."""
    from servelab.engines.logs.live import analyzer_for

    return analyzer_for(engine)


class Worker:
    """Classifies and analyses a spool file as it grows, classification first."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.fd = -1
        self.classifier = LineClassifier()
        self.classified = 0  # spool offset of the first unclassified line
        self.complete = 0  # spool offset after the last whole line
        self.size = 0  # spooled bytes
        self.analyzer: LogAnalyzer | None = None
        self.shared = False  # the analyzer's database holds the classifier's anchors too
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
            self.analyzer = _analyzer_for(message[1])
            self.shared = self.analyzer.prefilter.hs_sources is not None  # else ``re`` and ``bytes.find``, each its own
            if self.shared:
                self.analyzer.prefilter.share(ANCHOR_SOURCES)
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
        fed = False  # the analyzer read this step's block of lines with the classifier
        if self.classified < self.complete:
            end = min(self.complete, self.classified + BLOCK)
            block = os.pread(self.fd, end - self.classified, self.classified)
            if end < self.complete:
                cut = block.rfind(b"\n") + 1
                # A line longer than BLOCK: read on to its end (``complete`` ends on a newline), so
                # the block is never empty and the worker never stalls on it.
                while not cut and end < self.complete:
                    more = os.pread(self.fd, min(BLOCK, self.complete - end), end)
                    end += len(more)
                    nl = more.find(b"\n")
                    block += more if nl < 0 else more[: nl + 1]
                    cut = len(block) if nl >= 0 else 0
                block = block[:cut]
            if block:
                if not self._shared_block(block):
                    return
                fed = True
        analyzer = self.analyzer
        if analyzer is None:
            self.marks.clear()
            self.dirty = False
            return
        if self.analysed < self.size and not fed:
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

    def _shared_block(self, block: bytes) -> bool:
        """Classify a block of whole lines; True when the analyzer read it too, from the same scan.

        The analyzer reads along when it has read up to the block's start or into its first line
        (the unfinished last line it read before, see :meth:`step`); else it catches up on its own.
        """
        analyzer = self.analyzer
        if analyzer is None:
            self._send_kinds(self.classifier.classify(block))
            self.classified += len(block)
            return False
        starts, ends = analyzer.prefilter.shared_scan(block) if self.shared else (None, None)
        skip = self.analysed - self.classified
        fed = 0 <= skip < len(block)
        if fed:  # the analyzer first: a stop line in this block folds the echo after it (_send_kinds)
            tail, tail_starts = block, starts
            if skip:
                tail = block[skip:]
                if starts is not None:
                    tail_starts = LineStarts([s - skip for s in starts.offsets if s >= skip], starts.optional_on)
            analyzer.feed(tail, tail_starts)
            self.analysed += len(tail)
            self.dirty = True
        self._send_kinds(self.classifier.classify(block, ends))
        self.classified += len(block)
        return fed

    def _send_kinds(self, classified: Classified) -> None:
        """A block's kinds; after an orderly stop the analyzer has read, its echo as shutdown noise."""
        stop = self.analyzer.stop_line if self.analyzer is not None else None
        send(self.out, ("kinds", classified if stop is None else fold_after_stop(classified, stop)))

    def _snapshot(self) -> None:
        assert self.analyzer is not None
        analysis = self.analyzer.snapshot()
        send(self.out, ("analysis", self.analysed, *pack_analysis(analysis, self.windows.starts(analysis))))
        self.last_snapshot = time.monotonic()
        self.dirty = False


def serve(fd: int, out: IO[bytes]) -> None:
    """The worker's loop: read every waiting message, then do one block of work."""
    worker = Worker(out)

    def read(size: int) -> bytes:
        return os.read(fd, size)

    while True:
        wait = worker.wait_s()
        while True:
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                break
            message = receive(read)
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
            send(sys.stdout.buffer, ("error", f"log worker: {type(exc).__name__}: {exc}"))
        except OSError:
            pass
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
