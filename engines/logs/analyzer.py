"""The incremental log analyzer: where the engine is, and what went wrong, at every moment.

``LogAnalyzer(grammar)`` is fed raw bytes as they arrive (any chunking) and answers
``snapshot() -> Analysis`` at any time: run state, stage timeline with progress, the root cause and
its hint, and speculative-decoding / throughput figures. The grammar comes from the engine's
adapter (``ADAPTER.grammar``); nothing here branches on an engine's name.

Speed: each line is parsed without regexes; the grammar's needles are tested once per distinct
message prefix (a bounded memo), so a line pays for regexes only when it carries figures.
Memory: bounded deques and caps everywhere; nothing keeps the log itself.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from servelab.engines.adapter import all_adapters, get_adapter
from servelab.engines.logs.grammar import STAGES, Header, LogGrammar, is_primary_process
from servelab.engines.logs.hints import find_hint
from servelab.engines.logs.lines import Line, strip_ansi
from servelab.engines.logs.prefilter import Prefilter
from servelab.engines.logs.rootcause import FRAMES_STATE, STALE_LINES, TB_START, RootCause, TracebackTracker
from servelab.engines.runstate import RunState

__all__ = [
    "Analysis",
    "LogAnalyzer",
    "Progress",
    "RootCause",
    "SpecFigures",
    "SpecPoint",
    "Stage",
    "ThroughputPoint",
    "analyze_bytes",
    "analyze_file",
    "guess_engine",
]

#: Points kept in each time series (the newest win).
SERIES_POINTS = 4096
#: Needles are indexed by this many leading characters (every needle is at least this long).
_KEY = 6
#: Lines read one by one at the start of a log, until the first timestamp (then only lines that matter).
EAGER_LINES = 2000


#: A physical line longer than this is read as several lines of this size (memory stays bounded
#: on a log with no newline at all). The cut points depend on the bytes only, not on the chunking.
MAX_LINE = 1 << 20


def _has_long_line(buf: bytes, start: int = 0) -> bool:
    """True when some line of ``buf[start:]`` is longer than MAX_LINE: a few C-speed ``rfind`` hops of up
    to MAX_LINE bytes each (splitting the chunk into lines only to measure them cost more than reading it)."""
    pos, n = start, len(buf)
    while n - pos > MAX_LINE:
        nl = buf.rfind(b"\n", pos, pos + MAX_LINE + 1)
        if nl == -1:
            return True
        pos = nl + 1
    return False


def _cut_long_lines(buf: bytes) -> bytes:
    parts = buf.split(b"\n")
    for i, p in enumerate(parts):
        if len(p) > MAX_LINE:
            parts[i] = b"\n".join(p[j : j + MAX_LINE] for j in range(0, len(p), MAX_LINE))
    return b"\n".join(parts)


_RUN_TS = re.compile(r"\d\d-\d\d \d\d:\d\d:\d\d")


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "replace")
#: Notable warning lines kept for hints when no exception explains a problem.
NOTABLE_LINES = 32


@dataclass
class Progress:
    """A bar's state: ``rate`` in items per second, ``eta_s`` seconds left (None when unknown)."""

    done: int
    total: int
    rate: float | None = None
    eta_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"done": self.done, "total": self.total, "rate": self.rate, "eta_s": self.eta_s}


@dataclass
class Stage:
    """One startup stage. Times are the log's own timestamps (strings), None when not printed."""

    name: str
    status: str = "pending"  # pending | running | done | failed
    started_at: str | None = None
    ended_at: str | None = None
    progress: Progress | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "progress": self.progress.to_json() if self.progress else None,
            "detail": self.detail,
        }


@dataclass
class SpecFigures:
    """Speculative-decoding figures as printed: acceptance rate is a fraction 0..1."""

    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "per_position": list(self.per_position),
        }


@dataclass(frozen=True)
class SpecPoint:
    ts: str | None
    line: int
    acceptance_rate: float | None
    mean_acceptance_length: float | None


@dataclass(frozen=True)
class ThroughputPoint:
    ts: str | None
    line: int
    generation_tps: float | None
    prompt_tps: float | None


@dataclass
class Analysis:
    """What the log says right now. ``to_json()`` is the ``servelab analyze --json`` object."""

    engine: str
    state: RunState  # starting | loading | ready | crashed | exited
    was_ready: bool
    stages: list[Stage]
    root_cause: RootCause | None
    hint: str | None
    spec_decode: SpecFigures | None
    spec_series: list[SpecPoint]
    throughput_series: list[ThroughputPoint]
    lines: int
    exit_code: int | None = None
    #: The stage the run failed in (None unless it crashed before it was up).
    failed_stage: str | None = None

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        last_tp = self.throughput_series[-1] if self.throughput_series else None
        return {
            "engine": self.engine,
            "state": self.state,
            "was_ready": self.was_ready,
            "stages": [s.to_json() for s in self.stages],
            "root_cause": self.root_cause.to_json() if self.root_cause else None,
            "hint": self.hint,
            "spec_decode": self.spec_decode.to_json() if self.spec_decode else None,
            "generation_throughput": last_tp.generation_tps if last_tp else None,
            "lines": self.lines,
            "exit_code": self.exit_code,
            "failed_stage": self.failed_stage,
        }


_P = TypeVar("_P")
#: A figures line as seen: (line number, the line's text, the rule it matched).
_Raw = tuple[int, str, "_Rule"]
_Read = tuple[str | None, int, "re.Match[str]"]


class _Series(Generic[_P]):
    """A bounded time series kept as raw lines and read only when asked for.

    Periodic figures lines are most of a long serving log: keeping the newest lines is all a line
    costs, and ``snapshot()`` parses only the lines added since the previous call (a line that does
    not parse after all is dropped then).
    """

    def __init__(self, parse: Callable[[str], Header], convert: Callable[[_Read], _P]) -> None:
        self._parse = parse
        self._convert = convert
        self._raw: deque[_Raw] = deque(maxlen=SERIES_POINTS)
        self._points: deque[_P] = deque(maxlen=SERIES_POINTS)
        self._added = 0
        self._converted = 0
        self._last: _Read | None = None

    def add(self, raw: _Raw) -> None:
        self._raw.append(raw)
        self._added += 1

    def read(self, raw: _Raw) -> _Read | None:
        """(timestamp, line, match) of one kept line, None when its message is not the rule's."""
        number, text, rule = raw
        hdr = self._parse(text.strip("`") if text[:1] == "`" else text)
        msg = hdr[3][2:] if hdr[3][:2] == "^M" else hdr[3]
        if not msg.startswith(rule.needle) or rule.regex is None:
            return None
        m = rule.regex.search(msg)
        return (hdr[2] or None, number, m) if m is not None else None

    def _catch_up(self) -> None:
        new = min(self._added - self._converted, SERIES_POINTS)
        if new:
            for raw in list(self._raw)[-new:]:
                read = self.read(raw)
                if read is not None:
                    self._points.append(self._convert(read))
                    self._last = read
            self._converted = self._added

    def points(self) -> list[_P]:
        self._catch_up()
        return list(self._points)

    @property
    def last(self) -> _Read | None:
        """The newest line that parsed."""
        self._catch_up()
        return self._last


# -- compiled grammar -------------------------------------------------------------------------------

_STAGE, _BAR, _READY, _SHUTDOWN, _FATAL, _METRIC, _SETTING, _WARN, _SERVED, _UP = range(10)
#: Rules read one line at a time only until the run is up.
_LATE = (_SERVED, _METRIC)

#: An answered request in uvicorn's access log (both engines serve through uvicorn): the server was up.
#: Read only until the run is known to be ready (then dropped from the scan: access lines are many).
SERVED_NEEDLE = "INFO:     "
_SERVED_RX = r' - "POST [^"]*" 2\d\d'
#: Lines worth a hint when nothing else explains a failure, wherever they are in the line: NCCL's own
#: warnings ("NCCL WARN socketStartConnect: Connect to ... failed") and PyTorch's barrier report that
#: names the rank that failed first.
NOTABLE_ANYWHERE = ("NCCL WARN", "monitoredBarrier")
#: How a hint reads a failed stage (the frames say where an excerpt's traceback failed).
STAGE_CONTEXT = {
    "config": "during distributed set-up",
    "weights": "during weight loading",
    "drafter": "while loading the drafter",
    "compile": "during torch.compile",
    "kv_cache": "during memory profiling",
    "cuda_graphs": "during CUDA graph capture",
    "warmup": "during warm-up",
}


@dataclass
class _Rule:
    needle: str
    kind: int
    stages: tuple[int, ...] = ()
    event: str = ""
    regex: re.Pattern[str] | None = None
    detail: str | None = None
    extra: Any = None
    anywhere: bool = False


def _compile(g: LogGrammar) -> list[_Rule]:
    idx = {n: i for i, n in enumerate(STAGES)}
    rules: list[_Rule] = []
    for r in g.stage_rules:
        rules.append(_Rule(r.needle, _STAGE, tuple(idx[s] for s in r.stages), r.event, re.compile(r.regex) if r.regex else None, r.detail))
    for b in g.bars:
        rules.append(_Rule(b.needle, _BAR, tuple(idx[s] for s in b.stages), regex=re.compile(b.regex)))
    for n in g.ready:
        rules.append(_Rule(n, _READY))
    for n in g.shutdown:
        rules.append(_Rule(n, _SHUTDOWN))
    for f in g.fatal:
        rules.append(_Rule(f.needle, _FATAL, regex=re.compile(f.regex) if f.regex else None, extra=f, anywhere=f.anywhere))
    for n in g.warnings:
        rules.append(_Rule(n, _WARN))
    for n in NOTABLE_ANYWHERE:
        rules.append(_Rule(n, _WARN, anywhere=True))
    rules.append(_Rule(SERVED_NEEDLE, _SERVED, regex=re.compile(_SERVED_RX)))
    for n in g.up:
        rules.append(_Rule(n, _UP))
    for m in g.metrics:
        rules.append(_Rule(m.needle, _METRIC, regex=re.compile(m.regex), extra=m.kind))
    for name, rx in g.spec_settings.items():
        rules.append(_Rule(rx[0], _SETTING, regex=re.compile(rx[1]), extra=name))
    return rules


def _num(s: str | None) -> float | None:
    if s is None:
        return None
    try:
        v = float(s.replace(",", ""))
    except ValueError:
        return None
    return None if math.isnan(v) else v


class LogAnalyzer:
    """Incremental analyzer for one engine's log. Feed bytes; ask ``snapshot()`` any time."""

    def __init__(self, grammar: LogGrammar) -> None:
        self.grammar = grammar
        self._parse = grammar.parse
        self._index: dict[str, list[_Rule]] = {}
        self._anywhere: list[_Rule] = []
        self._rescan = False  # the scan's rules changed: the rest of the chunk is scanned again
        rules = _compile(grammar)
        # one prefilter for the whole run: the access and figures needles are dropped from it once
        # the run is up (then figures lines are found a chunk at a time and access lines not read)
        self._pre = Prefilter(
            [r.needle for r in rules if not r.anywhere and r.kind not in _LATE],
            [r.needle for r in rules if r.anywhere] + [TB_START, 'File "'],
            [r.needle for r in rules if not r.anywhere and r.kind in _LATE],
        )
        self._use_rules(rules)
        self._rescan = False
        self._tail = b""  # the unfinished physical line
        self._tail_seen = 0  # bytes of it already read as \r-segments
        self._number = 1  # current physical line
        self._partial = False  # a segment of the current physical line was seen
        self._pending = False  # feed_lines: the current physical line has not ended yet
        self._eager = True  # read every line until the first timestamp (the process stage's start)
        self._tb = TracebackTracker(grammar)
        self._open_tb = self._tb.open_processes  # the tracker's dict of open tracebacks (truthy: one is open)
        self._hdr: tuple[tuple[str, str, str, str, str], str] | None = None  # the last line read, parsed
        self._run_rx: dict[tuple[str, str], tuple[re.Pattern[bytes], re.Pattern[bytes], int]] = {}
        self._stages = [Stage(n) for n in STAGES]
        self._furthest = -1
        self._last_ts: str | None = None
        self._ready_line: int | None = None
        self._up_line: int | None = None  # the HTTP server said it is up (before the engine's ready line)
        self._shutdown = False
        self._shutdown_line: int | None = None  # first line of an orderly stop
        self._exit_code: int | None = None
        self._exited = False
        self._spec_series: _Series[SpecPoint] = _Series(self._parse, self._spec_point)
        self._tp_series: _Series[ThroughputPoint] = _Series(self._parse, self._tp_point)
        # once the run is known to be up, figures lines are found a chunk at a time and only kept
        # (parsed at snapshot time): (probes, needle, rule, series)
        self._figures = [
            (("] " + r.needle, ") " + r.needle), r.needle, r, self._spec_series if r.extra == "spec" else self._tp_series)
            for r in self._rules
            if r.kind == _METRIC
        ]
        self._figure_needles_b = tuple(dict.fromkeys(f[1].encode() for f in self._figures))
        self._bulk = False  # figures lines are read in bulk (the run is up)
        self._text_now = ""  # the line being read (kept with a figures line)
        self._settings: dict[str, float] = {}
        self._notable: deque[str] = deque(maxlen=NOTABLE_LINES)
        self._finished = False

    def _use_rules(self, rules: list[_Rule]) -> None:
        """Index the rules and build the chunk scan for them.

        Needles are message prefixes: one dict lookup on the first _KEY characters finds the few
        rules worth a startswith(); "anywhere" rules (few) are tested with `in`.
        """
        self._rules = rules
        self._index = {}
        self._anywhere = []
        for r in rules:
            if r.anywhere:
                self._anywhere.append(r)
            else:
                self._index.setdefault(r.needle[:_KEY], []).append(r)
        self._pre.optional_on = any(r.kind in _LATE for r in rules)
        self._rescan = True

    # -- feeding --------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Raw bytes as they arrive: any chunking, partial lines, CR updates, ANSI, CRLF.

        Complete lines are decoded and scanned a chunk at a time; ``\\r`` updates of the unfinished
        last line are read at once (a CUDA-graph bar ends its line only when it closes).
        """
        if not data or self._finished:
            return
        start = 0
        if self._tail:
            nl = data.find(b"\n")
            if nl != -1 and len(self._tail) + nl < MAX_LINE:
                # the unfinished line ends in this chunk: read it on its own (the answer never depends
                # on where a chunk ends), so the chunk is read in place, not copied behind it
                first = self._tail[self._tail_seen :] + data[: nl + 1]
                self._text(first, 0, len(first))
                self._tail = b""
                self._tail_seen = 0
                start = nl + 1
        buf = self._tail + data if self._tail else data
        if len(buf) - start > MAX_LINE and _has_long_line(buf, start):
            buf = _cut_long_lines(buf[start:])
            start = 0
        cut = buf.rfind(b"\n", start)
        if cut >= 0:
            if self._tail_seen:
                raw = buf[self._tail_seen : cut + 1]  # a segment's rest: the scan must see it start a line
                self._text(raw, 0, len(raw))
            else:
                self._text(buf, start, cut + 1)
            buf = buf[cut + 1 :]
            self._tail_seen = 0
        elif start:
            buf = buf[start:]
        self._tail = buf
        if b"\r" in buf:
            last = buf.rfind(b"\r")
            if last == len(buf) - 1:
                last = buf.rfind(b"\r", 0, last)  # a trailing \r may start a CRLF: wait
            if last >= self._tail_seen:
                for seg in _decode(buf[self._tail_seen : last]).split("\r"):
                    bulk = self._bulk
                    self._segment(seg)
                    if bulk:
                        self._figure_segment(self._number, seg)
                self._tail_seen = last + 1

    def feed_lines(self, lines: Iterable[Line]) -> None:
        """Lines already split by a :class:`LineSplitter` (a viewer that owns the splitter)."""
        for line in lines:
            if line.number != self._number:
                if self._pending:
                    self._end_physical()
                self._number = line.number
            self._pending = True
            bulk = self._bulk
            self._segment(line.text)
            if bulk:
                self._figure_segment(line.number, line.text)

    def finish(self) -> None:
        """End of the stream: the last unterminated line counts, open tracebacks close."""
        if self._finished:
            return
        if self._tail:
            last = self._tail[self._tail_seen :] + b"\n"
            self._text(last, 0, len(last))
            self._tail = b""
            self._tail_seen = 0
        elif self._pending:
            self._end_physical()
        self._finished = True
        self._tb.finish()

    def mark_exited(self, exit_code: int | None) -> None:
        """The run's process ended (``None``: killed or unknown)."""
        self._exited = True
        self._exit_code = exit_code

    # -- per chunk, per physical line, per segment ---------------------------------------------
    def _text(self, raw: bytes, start: int, stop: int) -> None:
        """Complete physical lines ``raw[start:stop]`` (ending with a newline), the first maybe already begun.

        The chunk stays bytes: the scan reads it as it is, and only the lines that reach Python are
        decoded, each on its own (UTF-8 resynchronises at every newline, so a line decodes to what it
        would inside the whole chunk). ANSI sequences are removed from the bytes, as the
        :class:`~engines.logs.lines.LineSplitter` does.
        """
        if raw.find(b"\x1b", start, stop) != -1:
            raw = strip_ansi(raw[start:stop])
            start, stop = 0, len(raw)
        hits = self._pre.byte_line_starts(raw, start, stop)
        bulk_from = (start, self._number) if self._bulk else None
        h = 0
        pos = start
        n = stop
        count = raw.count
        find = raw.find
        nh = len(hits)
        while pos < n:
            while h < nh and hits[h] < pos:
                h += 1
            if not (self._eager or self._open_tb):
                # jump to the next line worth reading (lines in between move nothing)
                if h == nh:
                    self._number += count(b"\n", pos, stop)
                    self._partial = False
                    break
                nxt = hits[h]
                if nxt > pos:
                    self._number += count(b"\n", pos, nxt)
                    self._partial = False
                    pos = nxt
            end = find(b"\n", pos)
            cr = find(b"\r", pos, end)
            # a CRLF line reads as its segments, the last one empty (skipped): the same as the line
            # without its "\r", which takes the one-line path (and its frame runs)
            if cr != -1 and cr != end - 1:
                for seg in _decode(raw[pos:end]).split("\r"):
                    self._segment(seg)
                self._end_physical()
                pos = end + 1
            else:
                self._hdr = None
                self._segment(_decode(raw[pos : end if cr == -1 else cr]), h < nh and hits[h] == pos, True)
                self._end_physical()
                pos = end + 1
                if self._hdr is not None and self._open_tb and not self._eager:
                    pos = self._frames_run(raw, pos, stop)
            if self._rescan:
                # the rules changed on this line: the rest of the chunk is scanned with the new ones
                self._rescan = False
                hits = [pos + k for k in self._pre.byte_line_starts(raw[pos:stop])]  # a copy: cheaper than scanning from 0
                nh = len(hits)
                h = 0
                if self._bulk and bulk_from is None:
                    bulk_from = (pos, self._number)
        if bulk_from is not None:
            self._bulk_figures(raw, *bulk_from, stop)

    def _bulk_figures(self, raw: bytes, start: int, number: int, stop: int) -> None:
        """Keep the figures lines of ``raw[start:stop]`` (``number`` is the line at ``start``): a C-speed
        find per needle locates them; each is only kept, to be parsed if it is still among the newest
        at snapshot time. A needle counts at a segment's start or after a header (``] ``, ``) ``)."""
        find = raw.find
        rfind = raw.rfind
        at: list[int] = []
        for needle in self._figure_needles_b:
            # from the end: only the newest SERIES_POINTS of a chunk can still be in a series
            kept = 0
            i = rfind(needle, start, stop)
            back = len(needle) - 1
            while i != -1:
                c = raw[i - 2 : i] if i - 2 >= start else b""
                if i == start or raw[i - 1] in (10, 13) or c == b"] " or c == b") ":
                    at.append(i)
                    kept += 1
                    if kept == SERIES_POINTS:
                        break
                i = rfind(needle, start, i + back)
        if not at:
            return
        at.sort()
        count = raw.count
        seen = -1
        last = start
        for p in at:
            s0 = max(rfind(b"\n", start, p) + 1, start)
            s0 = max(rfind(b"\r", s0, p) + 1, s0)  # a segment after a \r (searched within the line only)
            if s0 <= seen:
                continue
            seen = s0
            e = find(b"\n", p)
            r = find(b"\r", p, e)
            number += count(b"\n", last, s0)
            last = s0
            self._figure_segment(number, _decode(raw[s0 : r if r != -1 else e]))

    def _figure_segment(self, number: int, seg: str) -> None:
        for probes, needle, rule, series in self._figures:
            if probes[0] in seg or probes[1] in seg or seg.startswith(needle):
                series.add((number, seg, rule))

    def _frames_run(self, raw: bytes, pos: int, stop: int) -> int:
        """Consume, in one regex call, the frame lines that follow a traceback line of the only open
        traceback; returns the new position. Exactly what reading them one by one would do (the
        frames kept, the innermost frames, the last timestamp), only without a Python pass per line.
        """
        if self._furthest < 0 or self._stages[0].started_at is None or self._hdr is None:
            return pos
        (process, level, ts, msg, _tag), line = self._hdr
        owner = self._tb.raw_owner
        b = self._open_tb.get(process or (owner if owner is not None and not ts else ""))
        if b is None or b.state != FRAMES_STATE or b.last != self._number - 1 or level != b.level:
            return pos
        if level:
            if not ts or b.process != process:
                return pos
            head = len(line) - len(msg)
            at = line.find(ts)
            key = (line[:at], line[at + 14 : head])
        elif process:
            # a raw traceback behind a process prefix ("(EngineCore pid=7)   File ..."): multiprocessing's re-print
            if ts or b.process != process or line[:1] != "(" or b.raw:
                return pos
            head = len(line) - len(msg)
            key = (line[:head], "")
        else:
            if ts or b.process != (self._tb.raw_owner or ""):
                return pos
            head = 0
            key = ("", "")
        rxs = self._run_rx.get(key)
        if rxs is None:
            if len(self._run_rx) > 256:
                self._run_rx.clear()
            k0, k1 = re.escape(key[0].encode()), re.escape(key[1].encode())
            # each line: the same header, then an indented message. The strict form says where a
            # "\r" may be (only a CRLF's); the fast one (no capture, "[^\n]") is twice as fast in
            # ``re`` and gives the same run whenever the run has no other "\r"
            ts_rx = rb"\d\d-\d\d \d\d:\d\d:\d\d" if level else b""
            rxs = self._run_rx[key] = (
                re.compile(b"(?:" + k0 + ts_rx + k1 + rb"[ \t][^\n]*\n)+"),
                re.compile(b"(?:" + k0 + b"(" + ts_rx + b")" + k1 + rb"[ \t][^\n\r]*\r?\n)+"),
                len(key[0].encode()),
            )
        m = rxs[0].match(raw, pos, stop)
        if m is None:
            return pos
        run_end = m.end()
        run = raw[pos:run_end]
        if b"\r" in run and run.count(b"\r") != run.count(b"\r\n"):
            strict = rxs[1].match(raw, pos, stop)
            if strict is None:
                return pos
            run_end = strict.end()
            run = raw[pos:run_end]
        if b"Traceback (most recent" in run or b"cluster]\r\n" in run or b"cluster]\n" in run:
            return pos
        lines = _decode(run).split("\n")
        lines.pop()
        if len(self._open_tb) > 1:
            # other open tracebacks age while this one runs: a staleness check inside the run
            # (every 8th line) could close one of them, so stop the run before the first such check
            first, last_n = self._number, self._number + len(lines) - 1
            for other in self._open_tb.values():
                if other is b:
                    continue
                n = max(first, other.last + STALE_LINES + 1)
                n += -n % 8
                if n <= last_n:
                    lines = lines[: n - first]
            if not lines:
                return pos
            end = pos + len("\n".join(lines).encode()) + 1
            if lines and level:
                tsm = _RUN_TS.search(lines[-1])
            else:
                tsm = None
        else:
            end = run_end
            tsm = None
        frames = b.frames
        pkg = self._tb.package_marker
        expect = b.expect_code
        for ln in lines:
            st = ln[head:].strip()
            if st.startswith('File "'):
                b.where = st
                if pkg in st:
                    b.engine_where = st
                expect = True
            else:
                expect = False
        for ln in lines[-(frames.maxlen or 0) :]:
            st = ln[head:].strip()
            if st:
                frames.append(st)
        b.expect_code = expect
        self._number += len(lines)
        b.last = self._number - 1
        if end != run_end:
            if tsm is not None:
                self._last_ts = tsm.group(0)
        elif level:
            at = run.rfind(b"\n", 0, len(run) - 1) + 1 + rxs[2]  # the last line's timestamp
            self._last_ts = run[at : at + 14].decode()
        if len(self._open_tb) == 1 and self._number // 8 != (self._number - len(lines)) // 8:
            self._tb.expire(self._number - 1)
        return end

    def _segment(self, seg: str, known: bool = False, scanned: bool = False) -> None:
        """One \\r-segment (or a whole line) of the current physical line.

        Read when it matches the prefilter (``known``: the chunk scan said so; ``scanned``: the chunk
        scan looked at this whole line), while every line is read (the log's head), or while a
        traceback is open (unless it is another process's line).
        """
        if not seg:
            return
        self._partial = True
        if known or self._eager:
            self._line(self._number, seg)
        elif self._open_tb:
            if seg[:1] == "#":
                self._tb.gap(self._number)  # an excerpt's gap: no traceback goes on across it
                return
            # route it as the tracker would: a line no open traceback would take, and that matches
            # nothing else, changes nothing
            if scanned and seg[:1] == "(":
                # another process's line is told from its prefix alone (what parse_header reads first)
                close = seg.find(") ")
                k = seg.find(" pid=", 1, close) if close != -1 else -1
                if k != -1 and seg[1:k] not in self._open_tb:
                    return
            hdr = self._parse(seg.strip("`") if seg[:1] == "`" else seg)
            process = hdr[0]
            owner = self._tb.raw_owner
            if not process and owner is not None and not hdr[2]:
                process = owner
            if process not in self._open_tb and (scanned or not self._pre.matches(seg)):
                return
            self._line(self._number, seg, hdr)
        elif not scanned and self._pre.matches(seg):
            self._line(self._number, seg)

    def _end_physical(self) -> None:
        """The current physical line ended: a blank one still counts (it ends a traceback's message)."""
        if not self._partial and (self._eager or self._open_tb):
            self._line(self._number, "")
        if self._open_tb and not self._number & 7:
            self._tb.expire(self._number)  # every 8th line: cheap, and still decided by content only
        self._number += 1
        self._partial = False
        self._pending = False
        if self._eager and self._number > EAGER_LINES:
            self._eager = False

    def _line(self, number: int, text: str, hdr: Header | None = None) -> None:
        if text[:1] == "#":
            if self._open_tb:
                self._tb.gap(number)  # an excerpt's gap: no traceback goes on across it
            return
        self._text_now = text
        if self._furthest < 0 and text.strip():
            self._start(0, None, None)  # output means the process is up: the "process" stage runs
        if text[:1] == "`":
            text = text.strip("`")  # a line pasted inside markdown backticks
        if hdr is None:
            hdr = self._parse(text)
        process, level, ts, msg, tag = hdr
        self._hdr = (hdr, text)
        if ts:
            self._last_ts = ts
            if self._stages[0].started_at is None:
                self._stages[0].started_at = ts
                self._eager = False
        taken = self._tb.feed(number, process, level, ts, msg, tag)
        if taken and TB_START not in msg:
            return
        if msg[:2] == "^M":
            msg = msg[2:]  # a carriage return pasted as caret notation
        rules = self._index.get(msg[:_KEY])
        if rules is not None:
            for r in rules:
                if msg.startswith(r.needle):
                    self._apply(r, number, process, msg)
        for r in self._anywhere:
            if r.needle in msg:
                self._apply(r, number, process, msg)

    def _apply(self, r: _Rule, number: int, process: str, msg: str) -> None:
        kind = r.kind
        ts = self._last_ts
        if kind == _STAGE or kind == _BAR:
            if not is_primary_process(process):
                return
            m = r.regex.search(msg) if r.regex else None
            if r.regex is not None and m is None:
                return
            if kind == _BAR:
                assert m is not None
                self._bar(r.stages, m, ts)
                return
            detail = None
            if r.detail:
                try:
                    detail = r.detail.format(**(m.groupdict() if m else {}))
                except (KeyError, IndexError, ValueError):
                    detail = None
            if r.event == "start":
                self._start(self._pick_start(r.stages), ts, detail)
            elif r.event == "end":
                i = self._pick_running(r.stages)
                if i is None:
                    i = self._pick_start(r.stages)
                self._end(i, ts, detail)
            else:
                i = self._pick_running(r.stages)
                if i is None:
                    i = self._pick_start(r.stages)
                    self._start(i, ts, detail)
                elif detail:
                    self._stages[i].detail = detail
        elif kind == _READY:
            self._mark_ready(number, ts)
        elif kind == _SERVED:
            if r.regex is not None and r.regex.search(msg):
                self._serving(number)
        elif kind == _UP:
            if self._up_line is None:
                self._up_line = number
        elif kind == _SHUTDOWN:
            self._shutdown = True
            if self._shutdown_line is None:
                self._shutdown_line = number
        elif kind == _FATAL:
            f = r.extra
            if r.regex is not None:
                m = r.regex.search(msg)
                if m is None:
                    return
                gd = m.groupdict()
                self._tb.add_error(number, process, gd.get("exception") or f.exception or "Error", (gd.get("message") or msg).strip(), [msg])
            else:
                self._tb.add_marker(number, process, msg.strip(), f.wrapper)
        elif kind == _METRIC:
            m = r.regex.search(msg) if r.regex else None
            if m is None:
                return
            self._serving(number)
            (self._spec_series if r.extra == "spec" else self._tp_series).add((number, self._text_now, r))
        elif kind == _WARN:
            self._notable.append(msg)
        elif kind == _SETTING:
            m = r.regex.search(msg) if r.regex else None
            if m is not None:
                v = _num(m["v"])
                if v is not None:
                    self._settings[r.extra] = v

    # -- stages ---------------------------------------------------------------------------------
    def _pick_start(self, cands: tuple[int, ...]) -> int:
        for i in cands:
            if self._stages[i].status != "done":
                return i
        return cands[-1]

    def _pick_running(self, cands: tuple[int, ...]) -> int | None:
        for i in reversed(cands):
            if self._stages[i].status == "running":
                return i
        return None

    def _start(self, i: int, ts: str | None, detail: str | None) -> None:
        st = self._stages[i]
        if st.status == "pending" and i >= self._furthest:
            st.status = "running"
            st.started_at = ts
        elif st.status == "pending":
            st.status = "done"  # reported late (another process, out of order): it has happened
            st.started_at = st.ended_at = ts
        elif st.status == "done" and i >= self._furthest:
            st.status = "running"  # a second bar of the same stage (FULL after PIECEWISE, draft graphs)
            st.ended_at = None
        if detail:
            st.detail = detail
        if i > self._furthest:
            for j in range(i):
                sj = self._stages[j]
                if sj.status == "running":
                    sj.status = "done"
                    sj.ended_at = ts
            self._furthest = i

    def _end(self, i: int, ts: str | None, detail: str | None) -> None:
        st = self._stages[i]
        if st.status == "running":
            st.status = "done"
            st.ended_at = ts
        elif st.status == "pending" and i >= self._furthest:
            self._start(i, None, None)  # its start was not in the log
            st.status = "done"
            st.ended_at = ts
        if detail:
            st.detail = detail

    def _bar(self, cands: tuple[int, ...], m: re.Match[str], ts: str | None) -> None:
        i = self._pick_running(cands)
        if i is None:
            i = self._pick_start(cands)
        st = self._stages[i]
        if st.status != "running" or i < self._furthest:
            if st.status == "done" and i < self._furthest:
                return  # a late bar of an earlier stage (another rank): ignore
            self._start(i, ts, None)
        gd = m.groupdict()
        done, total = int(gd["n"]), int(gd["total"])
        rate = _num(gd.get("rate"))
        if rate is not None and gd.get("unit") == "s/it":
            rate = 1.0 / rate if rate else None
        eta = (total - done) / rate if rate else None
        st.progress = Progress(done, total, rate, eta)

    # -- figures --------------------------------------------------------------------------------
    def _serving(self, number: int) -> None:
        """Serving figures or an answered request mean the server was up, even when its ready line is
        not in the log (an excerpt, a rotated log)."""
        if self._ready_line is None:
            self._mark_ready(number, self._last_ts)

    def _mark_ready(self, number: int, ts: str | None) -> None:
        first = self._ready_line is None
        if first:
            self._ready_line = number
        ready = len(STAGES) - 1
        self._start(ready, ts, None)
        self._stages[ready].status = "done"
        self._stages[ready].ended_at = ts
        if first:
            # from now on an answered request tells nothing new (access lines are not read), and
            # figures lines are found a chunk at a time instead of one by one
            self._bulk = True
            self._use_rules([r for r in self._rules if r.kind not in _LATE])

    def _spec_figures(self, m: re.Match[str]) -> SpecFigures:
        gd = m.groupdict()
        mal = _num(gd.get("mal"))
        rate: float | None = None
        if gd.get("rate_pct") is not None:
            pct = _num(gd["rate_pct"])
            rate = pct / 100.0 if pct is not None else None
        else:
            steps = self._settings.get("num_steps")
            if mal is not None and steps:
                rate = max(0.0, min(1.0, (mal - 1.0) / steps))
            elif gd.get("rate") is not None:
                rate = _num(gd["rate"])
        pos = [float(x) for x in gd["pos"].replace(" ", "").split(",") if x] if gd.get("pos") else []
        return SpecFigures(rate, mal, pos)

    def _spec_point(self, raw: _Read) -> SpecPoint:
        ts, number, m = raw
        f = self._spec_figures(m)
        return SpecPoint(ts, number, f.acceptance_rate, f.mean_acceptance_length)

    @staticmethod
    def _tp_point(raw: _Read) -> ThroughputPoint:
        ts, number, m = raw
        return ThroughputPoint(ts, number, _num(m.group("gen")), _num(m.groupdict().get("prompt")))

    # -- answers --------------------------------------------------------------------------------
    def snapshot(self) -> Analysis:
        """The analysis so far (copies: safe to keep while feeding continues)."""
        tb = self._tb
        cause = tb.pick()
        ready = self._ready_line is not None
        # a stop that was asked for (SIGTERM, shutdown) before anything failed: errors after it are its echo
        fatal, first_fatal, last_fatal = tb.fatal_state()
        stopped = self._shutdown_line is not None and (not fatal or self._shutdown_line <= first_fatal)
        crashed = fatal and not stopped and (not ready or last_fatal > (self._ready_line or 0))
        if stopped:
            cause = None
        if self._exited and not crashed and not ready and self._exit_code not in (0,) and not self._shutdown:
            crashed = True
        # a crash after the HTTP server said it was up (SGLang: before its own ready line) was a crash
        # of a server that was up, not a startup failure
        was_ready = ready or (crashed and fatal and self._up_line is not None and last_fatal > self._up_line)
        stages = [Stage(s.name, s.status, s.started_at, s.ended_at, s.progress, s.detail) for s in self._stages]
        failed_stage: str | None = None
        if crashed:
            state = RunState.CRASHED
            if not was_ready:
                failed = self._failed_stage(stages, cause)
                if failed is not None:
                    failed.status = "failed"
                    failed.ended_at = failed.ended_at or self._last_ts
                    failed_stage = failed.name
        elif self._shutdown or self._exited:
            state = RunState.EXITED
        elif ready:
            state = RunState.READY
        elif self._furthest >= STAGES.index("weights"):
            state = RunState.LOADING
        else:
            state = RunState.STARTING
        last_spec = self._spec_series.last
        hint: str | None = None
        if cause is not None:
            where = [cause.context or "", STAGE_CONTEXT.get(failed_stage or "", "")]
            texts = [cause.exception or "", cause.message, *where, *cause.excerpt]
            hint = find_hint(texts, self.grammar.hints)
        elif crashed:
            wrapper = tb.wrapper_only()
            if wrapper is not None:
                hint = (
                    f"only a wrapper was logged ({wrapper.exception}: {wrapper.message.splitlines()[0][:80]}): "
                    "the real error was printed earlier or by another process; look further up the full log"
                )
        if hint is None and self._notable:
            hint = find_hint(list(self._notable), self.grammar.hints)
        return Analysis(
            engine=self.grammar.engine,
            state=state,
            was_ready=was_ready,
            stages=stages,
            root_cause=cause,
            hint=hint,
            spec_decode=self._spec_figures(last_spec[2]) if last_spec else None,
            spec_series=self._spec_series.points(),
            throughput_series=self._tp_series.points(),
            lines=self._number - 1,
            exit_code=self._exit_code,
            failed_stage=failed_stage,
        )

    def _failed_stage(self, stages: list[Stage], cause: RootCause | None) -> Stage | None:
        """The stage a crash before ready failed in: the one running, or, when the log shows no stage
        (an excerpt that starts inside the traceback), the one its innermost recognised frame names."""
        running = [s for s in stages if s.status == "running"]
        if self._furthest <= 0 and cause is not None and self.grammar.frame_stages:
            for line in reversed(cause.excerpt):
                for needle, name in self.grammar.frame_stages:
                    if needle in line:
                        for s in running:
                            s.status = "done"  # it ran (the process printed), and it is not where it failed
                        return stages[STAGES.index(name)]
        return running[-1] if running else None


# -- conveniences ------------------------------------------------------------------------------------


def guess_engine(head: bytes) -> str:
    """The engine whose adapter's ``log_signatures`` occur most often in ``head``."""
    text = head.decode("utf-8", "replace")
    best, best_score = "", -1
    for adapter in all_adapters():
        score = sum(text.count(sig) for sig in adapter.log_signatures)
        if score > best_score:
            best, best_score = adapter.name, score
    return best


def _grammar(engine: str) -> LogGrammar:
    grammar: LogGrammar = get_adapter(engine).grammar
    return grammar


def analyze_bytes(data: bytes, engine: str | None = None) -> Analysis:
    """Post-mortem of a whole log held in memory."""
    an = LogAnalyzer(_grammar(engine or guess_engine(data[:65536])))
    an.feed(data)
    an.finish()
    return an.snapshot()


#: Bytes read at a time: big enough that a long serving log's figures lines are mostly found and
#: dropped in C (only a chunk's newest can stay in a series), small enough to keep memory flat.
CHUNK = 8 << 20


def analyze_file(path: str | Path, engine: str | None = None) -> Analysis:
    """Post-mortem of a saved log, read in CHUNK-sized pieces (memory does not grow with the file)."""
    p = Path(path)
    with p.open("rb") as f:
        head = f.read(65536)
        an = LogAnalyzer(_grammar(engine or guess_engine(head)))
        an.feed(head)
        while chunk := f.read(CHUNK):
            an.feed(chunk)
    an.finish()
    return an.snapshot()
