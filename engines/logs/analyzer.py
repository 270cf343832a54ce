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

import re
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable

from servelab.engines.logs.frames import FrameRuns
from servelab.engines.logs.glued import GLUED_MIN, MAX_LINE, OTHER_LEADS, OTHER_RECORD, Unglue, cut_long_lines, has_long_line
from servelab.engines.logs.grammar import STAGES, Header, LogGrammar
from servelab.engines.logs.hints import find_hint
from servelab.engines.logs.lines import Line, strip_ansi, strip_caret
from servelab.engines.logs.needles import Needles
from servelab.engines.logs.prefilter import LineStarts, Prefilter
from servelab.engines.logs.prefix import PrefixNormalizer
from servelab.engines.logs.rootcause import ERROR_LEVELS, TB_START, TracebackTracker
from servelab.engines.logs.rules import (
    BAR, DEATH, KILLED, NATIVE, FATAL, LATE, METRIC, READY, SERVED, SERVING_ERROR, FATAL_THEN, SETTING,
    SHUTDOWN, STAGE, STAGE_CONTEXT, UP, WARN, WARNED, Rule, compile_rules, to_number,
)
from servelab.engines.logs.series import SERIES_POINTS, Read, Series, spec_figures, spec_point, throughput_point
from servelab.engines.logs.stages import StageTracker
from servelab.engines.logs.analysis import Analysis, SpecPoint, ThroughputPoint
from servelab.engines.runs.state import RunState, StageState

__all__ = ["EAGER_LINES", "MAX_LINE", "LogAnalyzer"]

#: Needles are indexed by this many leading characters (every needle is at least this long).
_KEY = 6
#: Lines read one by one at the start of a log, until the first timestamp (then only lines that matter).
EAGER_LINES = 2000


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "replace")


#: The warm-up stage's index: what runs in it (the server's own warm-up request) is not serving.
_WARMUP = STAGES.index("warmup")

#: Notable warning lines kept for hints when no exception explains a problem.
NOTABLE_LINES = 32


class LogAnalyzer:
    """Incremental analyzer for one engine's log. Feed bytes; ask ``snapshot()`` any time."""

    def __init__(self, grammar: LogGrammar, *, rank_zero_only: bool = False) -> None:
        """``rank_zero_only``: stage lines from rank 0 only, even in a log without any (a per-rank
        reader, :func:`engines.nodes.view.rank_analyzer`); by default such a log's stages follow the
        first rank that printed one."""
        self.grammar = grammar
        self._parse = grammar.parse
        self._unglue = Unglue(grammar)
        self._index: dict[str, list[Rule]] = {}
        self._anywhere: list[Rule] = []
        self._anywhere_groups: tuple[tuple[Rule, ...], ...] = ()  # the anywhere rules, by needle
        self._anywhere_needles = Needles(())
        self._rescan = False  # the scan's rules changed: the rest of the chunk is scanned again
        rules = compile_rules(grammar)
        # one prefilter for the whole run: the access and figures needles are dropped from it once
        # the run is up (then figures lines are found a chunk at a time and access lines not read)
        self._pre = Prefilter(
            [r.needle for r in rules if not r.anywhere and r.kind not in LATE],
            [r.needle for r in rules if r.anywhere] + [TB_START, 'File "', *ERROR_LEVELS],
            [r.needle for r in rules if not r.anywhere and r.kind in LATE],
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
        self._hdr: tuple[Header, str] | None = None  # the last line read, parsed
        self._frame_runs = FrameRuns(self._tb)
        self._timeline = StageTracker(rank_zero_only=rank_zero_only)
        self._last_ts: str | None = None
        self._ready_line: int | None = None
        self._up_line: int | None = None  # the HTTP server said it is up (before the engine's ready line)
        self._warmup_line: int | None = None  # the start-up's warm-up began here, before any ready line
        self._serving_error_line: int | None = None  # an error only raised while serving
        self._served = False  # an answered request or figures: the server was serving
        self._served_more = False  # served evidence other than the engine's batches (warmup_work), or a ready line
        self._warmup_failed = False  # the warm-up said it failed: batches before it were its own
        self._never_up = False  # the HTTP server could not bind: a ready line before that was premature
        self._shutdown = False
        self._shutdown_line: int | None = None  # first line of an orderly stop
        self._exit_code: int | None = None
        self._exited = False
        self._spec_series: Series[SpecPoint] = Series(self._parse, self._spec_point)
        self._tp_series: Series[ThroughputPoint] = Series(self._parse, throughput_point)
        # once the run is known to be up, figures lines are found a chunk at a time and only kept
        # (parsed at snapshot time): (probes, needle, rule, series)
        self._figures = [
            (("] " + r.needle, ") " + r.needle), r.needle, r, self._spec_series if r.extra == "spec" else self._tp_series)
            for r in self._rules
            if r.kind == METRIC
        ]
        self._figure_needles_b = tuple(dict.fromkeys(f[1].encode() for f in self._figures))
        self._bulk = False  # figures lines are read in bulk (the run is up)
        self._text_now = ""  # the line being read (kept with a figures line)
        self._settings: dict[str, float] = {}
        self._notable: deque[str] = deque(maxlen=NOTABLE_LINES)
        self._finished = False
        self._engine_output = False  # a line in the engine's own shape, a rule's line or a traceback
        # a capture tool's line prefix, learnt and stripped before anything else reads a line;
        # ``_prefix`` is None once the log is known to have none (or has ended)
        self._norm = PrefixNormalizer()
        self._prefix: PrefixNormalizer | None = self._norm

    def _use_rules(self, rules: list[Rule]) -> None:
        """Index the rules and build the chunk scan for them.

        Needles are message prefixes: one dict lookup on the first _KEY characters finds the few
        rules worth a startswith(); "anywhere" rules are found by one scan of the message for all their
        distinct needles (:class:`Needles`).
        """
        self._rules = rules
        self._index = {}
        self._anywhere = []
        for r in rules:
            if r.anywhere:
                self._anywhere.append(r)
            else:
                self._index.setdefault(r.needle[:_KEY], []).append(r)
        groups: dict[str, list[Rule]] = {}
        for r in self._anywhere:
            groups.setdefault(r.needle, []).append(r)
        self._anywhere_groups = tuple(tuple(rs) for rs in groups.values())
        self._anywhere_needles = Needles(tuple(groups))
        # native crash reports, by needle: glued into a traceback's line by the thread that crashed, still one
        self._glued = tuple(rs for rs in groups.values() if all(r.kind == FATAL and r.extra.kind == NATIVE for r in rs))
        self._glued_needles = Needles(tuple(rs[0].needle for rs in self._glued))
        self._pre.optional_on = any(r.kind in LATE for r in rules)
        self._rescan = True

    @property
    def prefilter(self) -> Prefilter:
        """The chunk scan's predicate (a reader of the same chunks may share its database)."""
        return self._pre

    # -- feeding --------------------------------------------------------------------------------
    def feed(self, data: bytes, starts: LineStarts | None = None) -> None:
        """Raw bytes as they arrive: any chunking, partial lines, CR updates, ANSI, CRLF.

        Complete lines are decoded and scanned a chunk at a time; ``\\r`` updates of the unfinished
        last line are read at once (a CUDA-graph bar ends its line only when it closes).

        ``starts``: what :attr:`prefilter` finds in these very bytes, from a scan made for another
        reader too (:meth:`Prefilter.shared_scan`); only the offsets of lines that start in ``data``
        count. Used on the plain path (the chunk is read in place), else the chunk is scanned here.
        """
        if not data or self._finished:
            return
        if self._prefix is not None:
            prefix, self._prefix = self._prefix, None
            for part in prefix.feed(data):
                self.feed(part)
            if not prefix.bare:
                self._prefix = prefix
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
        if len(buf) - start > MAX_LINE and has_long_line(buf, start):
            buf = cut_long_lines(buf[start:])
            start = 0
        cut = buf.rfind(b"\n", start)
        if cut >= 0:
            if self._tail_seen:
                raw = buf[self._tail_seen : cut + 1]  # a segment's rest: the scan must see it start a line
                self._text(raw, 0, len(raw))
            else:
                given = starts is not None and buf is data and starts.optional_on == self._pre.optional_on
                self._text(buf, start, cut + 1, starts.offsets if given and starts is not None else None)
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
        if self._prefix is not None:
            lines = self._prefix.feed_lines(lines)
            if self._prefix.bare:
                self._prefix = None
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
        if self._prefix is not None:
            prefix, self._prefix = self._prefix, None
            if prefix.lines_fed:
                self.feed_lines(prefix.finish_lines())
            else:
                for part in prefix.finish():
                    self.feed(part)
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
    def _text(self, raw: bytes, start: int, stop: int, starts: list[int] | None = None) -> None:
        """Complete physical lines ``raw[start:stop]`` (ending with a newline), the first maybe already begun.

        The chunk stays bytes: the scan reads it as it is, and only the lines that reach Python are
        decoded, each on its own (UTF-8 resynchronises at every newline, so a line decodes to what it
        would inside the whole chunk). ANSI sequences are removed from the bytes, as the
        :class:`~engines.logs.lines.LineSplitter` does. ``starts``: the prefilter's line starts in
        ``raw``, found already (see :meth:`feed`).
        """
        if raw.find(b"\x1b", start, stop) != -1:  # (caret notation is read per line: _segment)
            raw = strip_ansi(raw[start:stop])
            start, stop = 0, len(raw)
            starts = None  # offsets of the bytes before
        if starts is None:
            hits = self._pre.byte_line_starts(raw, start, stop)
        else:
            hits = starts[bisect_left(starts, start) : bisect_left(starts, stop)]
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
        """Consume the frame lines that follow a traceback line in one regex call (:class:`FrameRuns`);
        returns the new position. Only once the process stage has its start (its timestamp)."""
        if self._timeline.furthest < 0 or self._timeline.stages[0].started_at is None or self._hdr is None:
            return pos
        hdr, line = self._hdr
        end, count, ts = self._frame_runs.consume(raw, pos, stop, hdr, line, self._number)
        self._number += count
        if ts is not None:
            self._last_ts = ts
        return end

    def _segment(self, seg: str, known: bool = False, scanned: bool = False) -> None:
        """One \\r-segment (or a whole line) of the current physical line.

        Read when it matches the prefilter (``known``: the chunk scan said so; ``scanned``: the chunk
        scan looked at this whole line), while every line is read (the log's head), or while a
        traceback is open (unless it is another process's line).
        """
        if not seg:
            return
        if "^" in seg and ("^[" in seg or "^M" in seg) or "#033[" in seg:
            seg = strip_caret(seg)  # escapes a paste kept in caret notation (or syslog's octal)
        if (len(seg) >= GLUED_MIN or seg.startswith(OTHER_LEADS) and OTHER_RECORD.match(seg) is not None) and (records := self._unglue.split(seg)) is not None:
            for record in records:  # records a paste glued into one line: each read as its own
                self._segment(record)
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
                if k != -1 and seg[1:k] not in self._open_tb and seg[close + 2 : close + 3] != "(":
                    return  # (a stack of prefixes is read whole: its innermost process wrote the line)
            hdr = self._parse(seg.strip("`") if seg[:1] == "`" else seg)
            process = hdr[0]
            owner = self._tb.raw_owner
            if not process and owner is not None and not hdr[2]:
                process = owner
            elif process not in self._open_tb and not hdr[2]:
                process = self._tb.owner_of(process) or process
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
        timeline = self._timeline
        if timeline.furthest < 0 and text.strip():
            timeline.start(0, None, None)  # output means the process is up: the "process" stage runs
        if text[:1] == "`":
            text = text.strip("`")  # a line pasted inside markdown backticks
        if hdr is None:
            hdr = self._parse(text)
        if hdr.msg[:2] == "**":
            hdr = hdr._replace(msg=hdr.msg.strip("*"))  # a message pasted in Markdown bold ("**TypeError: ...**")
        process, level, ts, msg, tag = hdr
        self._hdr = (hdr, text)
        if ts:
            self._last_ts = ts
            if timeline.stages[0].started_at is None:
                timeline.stages[0].started_at = ts
                self._eager = False
        taken = self._tb.feed(number, process, level, ts, msg, tag)
        if not self._engine_output and (taken or level or ts):
            self._engine_output = True
        if taken and TB_START not in msg:
            for i in self._glued_needles.find(msg):
                for r in self._glued[i]:
                    self._apply(r, number, process, msg, level)
            return
        if msg[:2] == "^M":
            msg = msg[2:]  # a carriage return pasted as caret notation
        elif msg[:9] == "Message: " and len(msg) > 11 and msg[9] in "'\"" and msg.rstrip()[-1] == msg[9]:
            msg = msg[9:].strip()[1:-1]  # logging's dump of a record it failed to print (its repr): its text
        rules = self._index.get(msg[:_KEY])
        if rules is not None:
            for r in rules:
                if msg.startswith(r.needle):
                    self._apply(r, number, process, msg, level)
        groups = self._anywhere_groups
        for i in self._anywhere_needles.find(msg):
            for r in groups[i]:
                self._apply(r, number, process, msg, level)

    def _apply(self, r: Rule, number: int, process: str, msg: str, level: str = "") -> None:
        kind = r.kind
        if kind != FATAL or r.extra.kind not in (DEATH, KILLED):
            self._engine_output = True  # (a launcher's word that a process died is not the engine's line)
        ts = self._last_ts
        timeline = self._timeline
        if kind == STAGE or kind == BAR:
            began = timeline.apply(r, process, msg, ts)
            if began == _WARMUP and self._warmup_line is None and self._ready_line is None:
                self._warmup_line = number
        elif kind == READY:
            self._served_more = True
            self._mark_ready(number, ts)
        elif kind == SERVED:
            if r.regex is None or r.regex.search(msg):
                self._serving(number, r.needle)
        elif kind == UP:
            if self._up_line is None and (r.regex is None or r.regex.search(msg)):
                self._up_line = number
        elif kind == SERVING_ERROR:
            if self._serving_error_line is None and (r.regex is None or r.regex.search(msg)):
                self._serving_error_line = number
        elif kind == SHUTDOWN:
            self._shutdown = True
            if self._shutdown_line is None:
                self._shutdown_line = number
        elif kind == FATAL:
            f = r.extra
            if f.levels and level not in f.levels:
                return
            if f.startup:
                self._never_up = True
            if f.warmup:
                self._warmup_failed = True
            if r.regex is not None:
                m = r.regex.search(msg)
                if m is None:
                    return
                gd = m.groupdict()
                if (gd.get("message") or "").lstrip().startswith(TB_START):
                    return  # the record goes on as a traceback ("warmup error: Traceback ..."): that traceback says it
                if f.wrapper:  # a wrapper with a shape of its own: matched, it only marks the failure
                    self._tb.add_marker(number, process, msg.strip(), True)
                elif f.rank is not None:
                    said = (gd.get("message") or msg).strip()
                    at, message = self._tb.said_above(number, said) if f.above else (number, said)
                    self._tb.add_evidence(at, process, gd.get("exception") or f.exception or None, message, msg, f, gd.get("where"))
                else:
                    self._tb.add_error(number, process, gd.get("exception") or f.exception or "Error", (gd.get("message") or msg).strip(), [msg])
            else:
                self._tb.add_marker(number, process, msg.strip(), f.wrapper)
        elif kind == FATAL_THEN:
            text = msg[msg.index(r.needle) + len(r.needle) :].strip()
            if text:
                self._tb.complete_evidence(number, r.extra.needle, text, msg)
        elif kind == METRIC:
            m = r.regex.search(msg) if r.regex else None
            if m is None:
                return
            self._serving(number, r.needle)
            (self._spec_series if r.extra == "spec" else self._tp_series).add((number, self._text_now, r))
        elif kind == WARNED:
            if level in ("WARNING", "WARN") or (r.regex is not None and r.regex.search(msg)):
                self._tb.note_warning(number, msg.strip())
        elif kind == WARN:
            self._notable.append(msg)
        elif kind == SETTING:
            m = r.regex.search(msg) if r.regex else None
            if m is not None:
                v = to_number(m["v"])
                if v is not None:
                    self._settings[r.extra] = v

    # -- figures --------------------------------------------------------------------------------
    def _warming(self) -> bool:
        """The start-up's warm-up is running and nothing said ready: the engine's batches now are the
        warm-up request's (the grammar's ``warmup_work``), not serving."""
        return self._ready_line is None and self._timeline.stages[_WARMUP].status == StageState.RUNNING

    def _serving(self, number: int, needle: str = "") -> None:
        """Serving figures or an answered request mean the server was up, even when its ready line is
        not in the log (an excerpt, a rotated log); not the warm-up's own batches."""
        work = needle in self.grammar.warmup_work
        if work and self._warming():
            return
        self._served = True
        self._served_more = self._served_more or not work
        if self._ready_line is None:
            self._mark_ready(number, self._last_ts)

    def _mark_ready(self, number: int, ts: str | None) -> None:
        first = self._ready_line is None
        if first:
            self._ready_line = number
        self._timeline.ready(ts)
        if first:
            # from now on an answered request tells nothing new (access lines are not read), and
            # figures lines are found a chunk at a time instead of one by one
            self._bulk = True
            self._use_rules([r for r in self._rules if r.kind not in LATE])

    def _spec_point(self, raw: Read) -> SpecPoint:
        return spec_point(raw, self._settings)

    # -- answers --------------------------------------------------------------------------------
    @property
    def ready_line(self) -> int | None:
        """The first line that showed the server ready or serving (None: none so far)."""
        return self._ready_line

    @property
    def stop_line(self) -> int | None:
        """The line (1-based) of an orderly stop that came before anything failed, else None: what
        the engine prints after it (SGLang's scheduler "crashed with exit code -15", vLLM's
        EngineDeadError) is the stop's echo, which a viewer folds under it."""
        if self._shutdown_line is None:
            return None
        fatal, first, _last = self._tb.fatal_state()
        return self._shutdown_line if not fatal or self._shutdown_line <= first else None

    @property
    def fatal_line(self) -> int | None:
        """The first line that made the run fatal (None: nothing failed so far)."""
        fatal, first, _last = self._tb.fatal_state()
        return first if fatal else None

    def snapshot(self) -> Analysis:
        """The analysis so far (copies: safe to keep while feeding continues)."""
        tb = self._tb
        cause = tb.pick()
        # the evidence, strongest first: the server served (or said it is ready), it raised an error
        # only raised while serving, its HTTP server was up
        fatal, first_fatal, last_fatal = tb.fatal_state()
        serving_line = tb.serving_line
        warmup = self._warmup_line if self.grammar.warmup_work else None
        if serving_line is not None and warmup is not None and serving_line > warmup and (self._ready_line is None or serving_line < self._ready_line):
            serving_line = None  # a crash in the warm-up request's batch: the server was still starting
        serving_error = self._serving_error_line is not None or serving_line is not None
        ready_line = self._ready_line
        if self._warmup_failed and not self._served_more and not serving_error:
            ready_line = None  # only batches before the warm-up failed: they were the warm-up's
        if self._never_up and not self._served and not serving_error:
            ready_line = None  # it said it started, then could not bind: a crash at start-up
        ready = ready_line is not None or (serving_error and not fatal)
        # a stop that was asked for (SIGTERM, shutdown) before anything failed: errors after it are its echo
        stopped = self._shutdown_line is not None and (not fatal or self._shutdown_line <= first_fatal)
        crashed = fatal and not stopped and (not ready or last_fatal > (ready_line or 0))
        if stopped:
            cause = None
        if self._exited and not crashed and not ready and self._exit_code not in (0,) and not self._shutdown:
            crashed = True
        # a crash after the HTTP server said it was up (SGLang: before its own ready line) was a crash
        # of a server that was up, not a startup failure
        was_ready = ready or (crashed and serving_error) or (crashed and fatal and self._up_line is not None and last_fatal > self._up_line)
        stages = self._timeline.copy()
        failed_stage: str | None = None
        if crashed:
            state = RunState.CRASHED
            if not was_ready:
                failed = self._timeline.failed(stages, cause, self.grammar.frame_stages)
                if failed is not None:
                    failed.status = StageState.FAILED
                    failed.ended_at = failed.ended_at or self._last_ts
                    failed_stage = failed.name
        elif self._shutdown or self._exited:
            state = RunState.EXITED
        elif ready:
            state = RunState.READY
        elif self._timeline.furthest >= STAGES.index("weights"):
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
                first = (wrapper.message.splitlines() or [""])[0][:80]
                said = f"{wrapper.exception}: {first}" if wrapper.exception else first
                hint = (
                    f"only a wrapper was logged ({said}): "
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
            spec_decode=spec_figures(last_spec[2], self._settings) if last_spec else None,
            spec_series=self._spec_series.points(),
            throughput_series=self._tp_series.points(),
            lines=self._number - 1,
            exit_code=self._exit_code,
            failed_stage=failed_stage,
            prefix=self._norm.value(),
            engine_output=self._engine_output,
        )

