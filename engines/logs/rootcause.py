"""Finding the exception that actually failed a run in interleaved multi-process output.

Engines report one failure several times: the worker's real exception first, then engine-core and front-end wrappers
("See root cause above"), and multiprocessing re-prints. Tracebacks are segmented per process, chained tracebacks keep
their first (innermost-cause) exception, wrappers are demoted, and the pick prefers worker processes, then engine
core, then the front end, earliest first. Memory is bounded: each open traceback keeps a few frames, and only the
earliest finished one per (kind, tier, process) is kept, at most ``MAX_CANDIDATES``."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from servelab.engines.logs.grammar import FatalRule, LogGrammar
from servelab.engines.logs.analysis import EVIDENCE_WORDS, RootCause
from servelab.engines.logs.tbstate import AFTER as _AFTER, CHAIN as _CHAIN, EXC as _EXC, FRAMES as _FRAMES, Block as _Block, Exc as _Exc
from servelab.engines.logs.tblines import (
    BARE_EXCEPTION, CHAIN_MARKERS, DEATH_REPORT, EXC_SUFFIXES, EXCEPTION_LINE, FAULT_FRAME, FRAME_LINE, NATIVE_FRAME, POINTS_ELSEWHERE,
    REPR_WHOLE, bare_key, cpp_record_text, exception_type, is_caret, last_code, logging_call, other_exception, raised_name, restates,
)

__all__ = ["EVIDENCE_WORDS", "TracebackTracker", "EXCEPTION_LINE"]

TB_START = "Traceback (most recent call last)"
#: Frames only a request in flight reaches, whatever the engine: uvicorn handing an HTTP request to the app.
SERVING_FRAMES = ("run_asgi",)
MAX_CANDIDATES = 64
#: A traceback whose process printed nothing for this many lines is over (the process died).
STALE_LINES = 40
MAX_MESSAGE_LINES = 40
EXCERPT_LINES = 16

#: Candidate kinds, best first: a traceback with its exception line, a wrapper's harvested inner
#: text, fatal evidence without a traceback (a device assertion, NCCL's watchdog...), a traceback
#: cut before its exception line or a one-line marker, a wrapper alone (never the cause).
COMPLETE, HARVESTED, EVIDENCE, INCOMPLETE, WRAPPER = range(5)
#: The log levels of an error record (the one a traceback is logged with is read whatever it says).
ERROR_LEVELS = ("ERROR", "CRITICAL", "FATAL")
#: Exceptions that are a stop's echo, never a cause: a task cancelled while the server shuts down.
ECHO_EXCEPTIONS = ("CancelledError",)
#: A record that introduces a traceback without saying why: it ends a sentence or a label, names an
#: exception, or says only that something failed ("Invocation of collective_rpc method failed").
_HEADER = re.compile(r"[.:]$|xception|\b(?:failed|errored|crashed|error)$", re.I)
#: Lines a bare traceback may start after the error record it was logged with (other ranks' between).
_PREFACE_GAP = 4
#: Ray's dedup note at a record's end ("[repeated 3x across cluster]"): Ray's words, not the record's.
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
#: The state of a traceback that is reading its frames (the analyzer's frame runs apply only then).
FRAMES_STATE = _FRAMES


@dataclass
class _Candidate:
    cause: RootCause
    tier: int
    kind: int  # COMPLETE, HARVESTED, EVIDENCE, INCOMPLETE (or a marker), WRAPPER
    marker: bool = False  # a one-line fatal marker, superseded by a traceback of the same process
    rank: int = 0  # among EVIDENCE: the rule's strength (0 strongest)
    weak: bool = False  # evidence that counts only when something else was fatal
    unnamed: bool = False  # a death that names no child: a child's own traceback, even cut, says more
    engine: bool = False  # a traceback whose frames reach the engine's own package


def _where(frame: str) -> str | None:
    m = FRAME_LINE.match(frame)
    if not m:
        return None
    path = m["path"].replace("\\", "/")
    parts = path.split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else path
    func = f" in {m['func'].strip()}" if m["func"] else ""
    return f"{short}:{m['line']}{func}"


class TracebackTracker:
    """Fed every line (process, level, timestamp, message); collects root-cause candidates."""

    def __init__(self, grammar: LogGrammar) -> None:
        self._g = grammar
        self._pkg = f"/{grammar.engine}/"
        self._wrappers = grammar.wrappers
        self._serving_wrappers = tuple(w.needle for w in grammar.wrappers if w.serving)
        self._open: dict[str, _Block] = {}
        self._raw_owner: str | None = None
        self._cands: dict[tuple[int, int, int, str, bool], _Candidate] = {}
        self._wrapped_procs: set[str] = set()
        #: process -> the line of its last error record that only wraps ("Failed to start model
        #: server: Engine core initialization failed. See root cause above"): a traceback that starts
        #: right after it is that record's own (logger.exception), cut or not a cause
        self._wrapper_marks: dict[str, int] = {}
        #: process -> (line, (level, tag, ts), message) of its last error record outside a traceback
        self._last_error: dict[str, tuple[int, tuple[str, str, str], str]] = {}
        #: per process, the error record of another call site before its last one (line, text)
        self._error_before: dict[str, tuple[int, str]] = {}
        #: per process, its last lines when they were a frame's code and caret lines outside any open
        #: traceback (the window starts inside one): (line, level, the lines)
        self._code_tail: dict[str, tuple[int, str, list[str]]] = {}
        self._warning: tuple[int, str] | None = None  # the last warning that named a failure
        self._tier_cache: dict[str, int] = {}
        #: ", in NAME" for the grammar's serving frames: a traceback through one failed while serving.
        self.serving_frame_needles = tuple(f", in {n}" for n in (*grammar.serving_frames, *SERVING_FRAMES))
        self.serving_frames = grammar.serving_frames
        #: (", in CALLER", ", in CALLEE") for the grammar's serving calls.
        self.serving_call_needles = tuple((f", in {a}", f", in {b}") for a, b in grammar.serving_calls)
        #: Whether frame lines still need a look for serving evidence.
        #: ('"...FRAGMENT', ", in FUNC") for the grammar's serving files.
        self.serving_file_needles = tuple((path, f", in {f}") for path, f in grammar.serving_files)
        self.watch_frames = bool(self.serving_frame_needles or self.serving_call_needles or self.serving_file_needles)
        #: A traceback's frames showed it failed while serving (the line of the first such frame).
        self.serving_line: int | None = None
        #: A fatal traceback or marker was seen.
        self.fatal = False
        self.fatal_line = 0
        self.last_fatal_line = 0

    # -- public ---------------------------------------------------------------------------------
    @property
    def open(self) -> bool:
        """A traceback is being read: every following line matters until it ends."""
        return bool(self._open)

    @property
    def open_processes(self) -> dict[str, _Block]:
        return self._open

    @property
    def raw_owner(self) -> str | None:
        """The process whose traceback continues in unprefixed lines (SGLang ranks)."""
        return self._raw_owner

    def owner_of(self, rank: str) -> str | None:
        """The open traceback of ``rank``'s own process ("TP6@rank1" for "rank1"), if one is open."""
        suffix = "@" + rank
        for p in self._open:
            if p.endswith(suffix):
                return p
        return None

    @property
    def package_marker(self) -> str:
        return self._pkg

    def feed(self, number: int, process: str, level: str, ts: str, msg: str, tag: str = "") -> bool:
        """Returns True when the line belonged to a traceback (callers may skip other checks)."""
        proc = process
        if not proc and self._raw_owner is not None and not ts:
            proc = self._raw_owner
        block = self._open.get(proc)
        if block is None and proc and not ts and self._open:
            # a rank's raw continuation line ("[rank1]:   File ...") of its own process's traceback
            # ("[rank1]:[ts TP6] ... Traceback"): the traceback is "TP6@rank1"
            owner = self.owner_of(proc)
            if owner is not None:
                proc, block = owner, self._open[owner]
        if proc in self._last_error and not (level in ERROR_LEVELS and tag) and TB_START not in msg:
            del self._last_error[proc]  # another line of the process came between
        if block is not None:
            if self._continue(block, number, level, ts, msg, tag):
                block.last = number
                return True
            if (
                block.state == _EXC
                and TB_START in msg
                and level == block.level
                and tag == block.tag
                and block.exceptions[-1].lines[0].rstrip().endswith(":")
            ):
                # the exception's own message goes on with a traceback (a subprocess's, re-raised
                # as "Error raised in subprocess:"): that inner traceback is the deeper cause
                block.embeds = True
            self._close(proc)
        if TB_START in msg:
            # (raw: its lines go on with no prefix: a rank's traceback re-logged inside a record, or one
            # logged alone by a process whose records have a stamp and no level, SGLang's "[ts TP0] Traceback")
            raw = (process == "" and proc != "") or (bool(proc) and not tag and (not msg.startswith(TB_START) or bool(ts) and not level))
            b = self._start(proc, number, level, msg, raw)
            b.tag = tag
            last = self._last_error.get(proc)
            if last is not None and msg.startswith(TB_START) and (last[1] == (level, tag, ts) or not level and not ts and number - last[0] <= _PREFACE_GAP):
                # logger.exception(e): the record before its traceback is str(e) (the traceback goes on
                # with the record's own prefix, or bare on the next line of its process: Python's own
                # formatter, other ranks' lines maybe between)
                b.preface = last[2]
                before = self._error_before.get(proc)
                if before is not None and 0 < last[0] - before[0] <= _PREFACE_GAP:
                    b.error_above = before
            elif not msg.startswith(TB_START) and (said := msg[: msg.find(TB_START)].strip()):
                b.preface, b.preface_at = said, number  # a header glued before it ("Scheduler hit an exception: Traceback ...")
            return True
        if level in ERROR_LEVELS and tag:
            prev = self._last_error.get(proc)
            if prev is not None and prev[1][1] != tag:
                self._error_before[proc] = (prev[0], prev[2])
            self._last_error[proc] = (number, (level, tag, ts), msg.strip())
        stripped = msg.lstrip()
        if stripped.startswith('File "') and ", line " in stripped and not stripped.startswith(NATIVE_FRAME):
            # a traceback whose first lines are missing (excerpt, or lost to another stream)
            b = self._start(proc, number, level, "", False)
            b.tag = tag
            self._continue(b, number, level, ts, msg, tag)
            return True
        tail = self._code_tail.pop(proc, None) if self._code_tail else None
        if msg[:4] == "    " and stripped or is_caret(msg):
            # a frame's code line (or its caret line) with no traceback open: the window may start
            # inside one, whose exception line then ends it
            kept = tail[2][-2:] if tail is not None and tail[1] == level else []
            self._code_tail[proc] = (number, level, [*kept, stripped])
            return False
        error_record = level in ERROR_LEVELS
        colon = msg.find(": ", 0, 120)
        if (
            (error_record or not ts and not level) and colon > 0 and (msg[:1].isupper() or msg[:1].islower() and "." in msg[:colon])
            or msg in ("AssertionError", "KeyboardInterrupt")
            or not ts and not level and BARE_EXCEPTION.fullmatch(msg) is not None
        ):
            # an exception line on its own: the end of a traceback the excerpt does not show
            m = EXCEPTION_LINE.match(msg)
            if m and not m["type"].endswith("Warning") and (not error_record or "." in m["type"] or m["type"][-5:] in EXC_SUFFIXES):
                # read as a traceback whose frames the window does not show: the lines that go on
                # with its message are read as the whole traceback's would be
                b = self._start(proc, number, level, "", False)
                b.tag = tag
                if tail is not None and tail[1] == level and number - tail[0] <= _PREFACE_GAP:
                    b.frames.extend(tail[2])  # the last frame's code right above: a traceback's end, its top cut
                b.exceptions.append(_Exc(exception_type(m), [(m["text"] or "").rstrip()], number))  # (as a traceback's own: stripped)
                b.state = _EXC
                if m["cause"]:  # Ray's wrapper line: the task's traceback follows
                    b.state, b.relayed = _FRAMES, m["cause"]
                    b.frames.append(msg.strip())
                return True
            near = tail is not None and tail[1] == level and number - tail[0] <= _PREFACE_GAP
            other = other_exception(msg.rstrip(), tail[2][-1] if near and tail is not None else "") if not level and not ts else None
            if other is not None:  # a class without the usual suffix, dotted or the one raised right above
                b = self._start(proc, number, level, "", False)
                if near and tail is not None:
                    b.frames.extend(tail[2])
                b.exceptions.append(_Exc(other[0], [other[1]], number))
                b.state = _EXC
                return True
        return False

    def gap(self, number: int) -> None:
        """A ``#`` line: an excerpt's gap. Whatever comes after it belongs to no open traceback."""
        for proc in list(self._open):
            self._close(proc)

    def expire(self, number: int) -> None:
        """Close tracebacks whose process has been silent for ``STALE_LINES`` lines."""
        for proc in [p for p, b in self._open.items() if number - b.last > STALE_LINES]:
            self._close(proc)

    def note_warning(self, number: int, text: str) -> None:
        """A warning-level record that names a failure: a traceback cut right after it is said with it."""
        self._warning = (number, text)

    def said_above(self, number: int, message: str) -> tuple[int, str]:
        """(line, ``message``) after the warning-level record right above it, if any: (its line, "recvValue failed ... (Exception raised from ...)")."""
        w = self._warning
        return (w[0], f"{cpp_record_text(w[1])} ({message})") if w is not None and w[0] == number - 1 else (number, message)

    def add_marker(self, number: int, process: str, message: str, is_wrapper: bool) -> None:
        """A fatal line without its own exception ("WorkerProc failed to start.")."""
        self._mark_fatal(number)
        cause = RootCause(None, message, process, number, [message], evidence=EVIDENCE_WORDS[""])
        self._push(_Candidate(cause, self._tier(process), WRAPPER if is_wrapper else INCOMPLETE, marker=True))

    def add_error(self, number: int, process: str, exception: str, message: str, excerpt: list[str]) -> None:
        """A fatal error line that states its own cause (pydantic's ``Value error, ...``)."""
        self._mark_fatal(number)
        cause = RootCause(exception, message, process, number, excerpt, evidence=EVIDENCE_WORDS[""])
        self._push(_Candidate(cause, self._tier(process), COMPLETE))

    def add_evidence(self, number: int, process: str, exception: str | None, message: str, line: str, rule: FatalRule, where: str | None) -> None:
        """Fatal evidence without a traceback (a device assertion, NCCL's watchdog), found by ``rule``:
        ranked by its rank below any traceback with its exception line, above one cut before it; a
        ``weak`` rule's is not fatal on its own."""
        if self._wrapper(message) is not None:
            # the record quotes an exception that only wraps ("Failed to start model server: Engine
            # core initialization failed. See root cause above"): the traceback logged with it is that
            # wrapper's own (unlike "EngineCore failed to start.", logged with the real one's)
            self.add_marker(number, process, message, True)
            self._wrapper_marks[process] = number
            return
        if not rule.weak:
            self._mark_fatal(number)
        cause = RootCause(exception, message, process, number, [line.strip()], where, evidence=EVIDENCE_WORDS.get(rule.kind, EVIDENCE_WORDS[""]))
        rank = rule.rank if rule.rank is not None else 0
        self._push(_Candidate(cause, self._tier(process), EVIDENCE, rank=rank, weak=rule.weak, unnamed=rule.unnamed))

    def complete_evidence(self, number: int, needle: str, text: str, line: str) -> None:
        """The line after fatal evidence says what it was (C++'s ``what():``): the evidence of the line
        before, when its line holds ``needle``, takes it into its message and excerpt."""
        for key, c in self._cands.items():
            cause = c.cause
            if c.kind == EVIDENCE and cause.line == number - 1 and needle in cause.excerpt[0]:
                message = f"{cause.message} (what(): {text})"
                self._cands[key] = replace(c, cause=replace(cause, message=message, excerpt=[*cause.excerpt, line.strip()]))
                return

    def serving_frame(self, number: int, frame: str, block: _Block) -> None:
        """A traceback frame line of ``block``: note when it is one of the grammar's serving frames, or
        the callee of a serving call whose caller came before it in the same traceback."""
        if self.serving_line is not None:
            return
        for n in self.serving_frame_needles:
            if n in frame:
                self._served_at(number)
                return
        for path, func in self.serving_file_needles:
            if func in frame and path in frame[: frame.find('",')]:
                self._served_at(number)
                return
        for i, (caller, callee) in enumerate(self.serving_call_needles):
            if block.callers >> i & 1 and callee in frame:
                self._served_at(number)
                return
            if caller in frame:
                block.callers |= 1 << i

    @staticmethod
    def outermost_frame(b: _Block, frame: str) -> None:
        """A traceback's first frame. multiprocessing prints its child's traceback from ``_bootstrap``
        itself ("Process SpawnProcess-1:" above it): no error record before it is its exception's text."""
        if b.preface and frame.endswith(", in _bootstrap") and "multiprocessing" in frame:
            b.preface = ""

    def serving_code(self, number: int, code: str) -> None:
        """A frame's code line: a call of one of the grammar's serving frames
        (``scheduler.event_loop_overlap()``) means the frames after it are inside it, even when the
        window cuts them."""
        if self.serving_line is not None:
            return
        for n in self.serving_frames:
            k = code.find(n)
            if k != -1 and code.find("(", k) != -1:
                self._served_at(number)
                return

    def _served_at(self, number: int) -> None:
        self.serving_line = number
        self.watch_frames = False

    def finish(self) -> None:
        for proc in list(self._open):
            self._close(proc)

    def fatal_state(self) -> tuple[bool, int, int]:
        """(failed, first fatal line, last fatal line), open tracebacks included. Reads only:
        asking mid-stream never changes what the rest of the stream will conclude."""
        fatal, first, last = self.fatal, self.fatal_line, self.last_fatal_line
        for b in self._open.values():
            _c, line, _w = self._candidate(b)
            if line is not None:
                first = line if not fatal else min(first, line)
                last = max(last, line)
                fatal = True
        return fatal, first, last

    def pick(self) -> RootCause | None:
        """The best candidate so far (open tracebacks included, without closing them; reads only)."""
        cands = list(self._cands.values())
        wrapped = set(self._wrapped_procs)
        for b in self._open.values():
            c, _line, w = self._candidate(b)
            if c is not None:
                cands.append(c)
            if w:
                wrapped.add(b.process)
        traced = {c.cause.process for c in cands if not c.marker and c.kind in (COMPLETE, HARVESTED, INCOMPLETE)}
        # a wrapper's own traceback, complete (its exception line printed), in a deeper process
        wrappers = [(c.cause.line, c.tier, c.cause.process) for c in cands if c.kind == WRAPPER and not c.marker and c.cause.exception]
        fatal = self.fatal or any(c.kind != EVIDENCE or not c.weak for c in cands)
        best: _Candidate | None = None
        for c in cands:
            if c.kind == WRAPPER or (c.marker and c.cause.process in traced) or (c.weak and not fatal):
                continue
            if c.kind == INCOMPLETE and c.cause.process in wrapped and c.cause.exception is None:
                continue  # multiprocessing's re-print of a wrapper it already reported
            if c.kind == INCOMPLETE and not c.marker and self._wrapper_marks.get(c.cause.process, -9) + 1 == c.cause.line:
                continue  # the wrapper record's own traceback
            if c.kind == INCOMPLETE and not c.marker and c.cause.exception is None and any(
                line < c.cause.line and tier <= c.tier and proc != c.cause.process for line, tier, proc in wrappers
            ):
                continue  # a front process's traceback, cut, after a deeper one's wrapper: it re-raises that wrapper
            if best is None or (c.kind, c.rank, c.tier, c.cause.line) < (best.kind, best.rank, best.tier, best.cause.line):
                best = c
        if best is None:
            return None
        if best.kind == EVIDENCE and best.unnamed:
            # "a child failed", not which: a traceback of the engine's own code, even cut, is that child's
            own = [c for c in cands if c.kind == INCOMPLETE and c.engine and not c.marker and c.cause.exception is None]
            if own:
                return min(own, key=lambda c: (c.tier, c.cause.line)).cause
        if best.kind == EVIDENCE:
            # a traceback cut before its exception line is the evidence's context (its frames say where)
            cut = [c for c in cands if c.kind == INCOMPLETE and not c.marker and c.cause.exception is None]
            if cut:
                tb = min(cut, key=lambda c: (c.cause.process != best.cause.process, c.cause.line)).cause
                excerpt = (best.cause.excerpt + tb.excerpt)[:EXCERPT_LINES]
                return replace(best.cause, excerpt=excerpt, where=best.cause.where or tb.where)
        return best.cause

    def wrapper_only(self) -> RootCause | None:
        """When nothing but wrappers was seen: the first wrapper (for a hint, never as the cause)."""
        ws = [c for c in self._cands.values() if c.kind == WRAPPER]
        return min(ws, key=lambda c: c.cause.line).cause if ws else None

    # -- blocks ---------------------------------------------------------------------------------
    def _start(self, proc: str, number: int, level: str, msg: str, raw: bool) -> _Block:
        if proc in self._open:
            self._close(proc)
        b = _Block(proc, number, level, raw or (bool(proc) and not level and TB_START in msg and not msg.startswith(TB_START)), last=number)
        if msg:
            b.frames.append(msg.strip())
        self._open[proc] = b
        if proc:
            self._raw_owner = proc if b.raw else self._raw_owner
        return b

    def _continue(self, b: _Block, number: int, level: str, ts: str, msg: str, tag: str = "") -> bool:
        """Apply one line to an open block; False when the line is not part of it (block ends)."""
        if b.level and level and (level != b.level or (tag and b.tag and tag != b.tag)):
            return False  # another log record of the same process
        if ts and not b.level:
            return False  # a timestamped log record ends a raw traceback
        stripped = msg.strip()
        st = b.state
        if st == _FRAMES:
            if stripped.startswith('File "'):
                if b.relayed is not None and b.exceptions and b.exceptions[-1].type == b.relayed:
                    b.exceptions.pop()  # Ray's wrapper line: the remote traceback it relays follows, its own line ends it
                if b.where is None:
                    self.outermost_frame(b, stripped)
                b.frames.append(stripped)
                b.where = stripped  # parsed only when reported
                if self.watch_frames:
                    self.serving_frame(number, stripped, b)
                if self._pkg in stripped:
                    b.engine_where = stripped
                # faulthandler's frames ('File "x.py", line 120 in spawn_main') come without code lines:
                # what follows one is never its code ("Fatal Python error: Segmentation fault")
                b.expect_code = FAULT_FRAME.fullmatch(stripped) is None
                return True
            if stripped[:9] == "Message: " and b.frames and logging_call(b.frames[-1]):
                # logging's "--- Logging error ---" dump ends "Call stack:" with the logger call's
                # frames, then the record it could not print (its repr): that record is the line to read
                b.call_stack = True
                return False
            m = EXCEPTION_LINE.match(stripped) if stripped and not msg[:1].isspace() else None
            other = other_exception(stripped, b.frames[-1]) if m is None and stripped and not msg[:1].isspace() and not b.expect_code and b.frames else None
            if m or other:
                name, text = (exception_type(m), m["text"] or "") if m else other  # type: ignore[misc]
                b.exceptions.append(_Exc(name, [text], number, b.engine_where or b.where))
                b.state = _FRAMES if m and m["cause"] else _EXC
                if m and m["cause"]:
                    b.relayed = name  # "RayTaskError(TimeoutError): ray::A.f() (pid=7)": the task's traceback follows
                    b.frames.append(stripped)
                b.expect_code = False
                return True
            if b.expect_code or msg[:1].isspace() or is_caret(msg):
                if stripped:
                    b.frames.append(stripped)
                    if b.expect_code and self.watch_frames:
                        self.serving_code(number, stripped)
                b.expect_code = False
                return True
            if TB_START in msg:
                return False
            return False
        if st == _EXC:
            if not stripped:
                b.state = _AFTER
                return True
            if any(c in stripped for c in CHAIN_MARKERS):
                b.state, b.chained = _CHAIN, True
                return True
            if TB_START in msg or stripped.startswith('File "'):
                return False
            if msg[:1].isspace() or (not level and not ts) or (b.level and level == b.level):
                exc = b.exceptions[-1]
                if len(exc.lines) < MAX_MESSAGE_LINES:
                    exc.lines.append(stripped)
                return True
            return False
        if st == _AFTER:
            if not stripped:
                return True
            if any(c in stripped for c in CHAIN_MARKERS):
                b.state, b.chained = _CHAIN, True
                return True
            return False
        # _CHAIN
        if not stripped:
            return True
        if TB_START in msg:
            b.state = _FRAMES
            b.frames.append(stripped)
            return True
        b.state = _FRAMES
        return self._continue(b, number, level, ts, msg, tag)

    def _close(self, proc: str) -> None:
        b = self._open.pop(proc, None)
        if b is None:
            return
        if self._raw_owner == proc:
            self._raw_owner = None
        c, line, wrapped = self._candidate(b)
        if line is not None:
            self._mark_fatal(line)
        if self.serving_line is None and self._serving_wrappers:
            for e in b.exceptions:
                text = f"{e.type}: {chr(10).join(e.lines)}"
                if any(w in text for w in self._serving_wrappers):
                    self._served_at(e.line)
                    break
        if wrapped:
            self._wrapped_procs.add(b.process)
        if c is not None:
            self._push(c)

    def _candidate(self, b: _Block) -> tuple[_Candidate | None, int | None, bool]:
        """What a traceback amounts to: (candidate, the line that makes the run fatal, it only wraps).

        Pure: the callers that close a traceback apply the result.
        """
        if b.call_stack:
            return None, None, False
        tier = self._tier(b.process)
        excerpt = list(b.frames)[-EXCERPT_LINES:]
        if not b.exceptions:
            if self._benign([b.preface, *excerpt]):
                return None, None, False
            where = _where(b.engine_where or b.where or "")
            said = _RAY_REPEATED.sub("", b.preface) if self._wrapper(b.preface) is None else ""
            named = REPR_WHOLE.fullmatch(said)
            if named is not None or said and not _HEADER.search(said):
                # the record the traceback was logged with is the exception's own text (V0's
                # logger.exception(e)) or its repr ("AssertionError()", which names the exception):
                # it says what the cut traceback does not
                exc, text = (named["exception"], named["message"] or said) if named is not None else (None, said)
                at = b.preface_at or b.start_line - 1
                cause = RootCause(exc, text, b.process, at, [said, *excerpt][-EXCERPT_LINES:], where, evidence=EVIDENCE_WORDS["error line"])
                return _Candidate(cause, tier, INCOMPLETE, rank=-1), at, False
            code = last_code(excerpt)
            last_frame = f" (last frame: {where}{f', at `{code}`' if code else ''})" if where else ""
            warned = self._warning
            start = b.start_line
            if (not said or b.preface_at) and warned is not None and 0 < start - warned[0] <= _PREFACE_GAP:
                # what the traceback does not say, a warning just above it may ("... with
                # ImportError('libcuda.so.1: ...')", "socket ... timed out after 1800000ms"): the
                # answer starts at that warning
                last_frame += f"; the warning before it: {warned[1]}"
                start = warned[0]
            elif b.error_above is not None and not said and self._wrapper(b.error_above[1]) is None:
                # the same for an error record of another call site right above the wrapper the
                # traceback was logged with ("NIXL is not available", then "EngineCore failed to start.")
                last_frame += f"; the error before it: {b.error_above[1]}"
                start = b.error_above[0]
            # a header it was logged with ("Exception in worker VllmWorkerProcess while processing
            # method determine_num_available_blocks.") says where: kept, and a cut traceback that
            # says something ranks above one that says nothing (its window starts at the header)
            # (the header's own words as it printed them: "WorkerProc hit an exception." stays a sentence)
            # a wrapper's record above it ("EngineCore failed to start.") is said too, in its own words:
            # it ranks no higher for it (a wrapper says less than a header that names where)
            words = said or (_RAY_REPEATED.sub("", b.preface).strip() if b.preface else "")
            if words and not said:
                start = min(start, b.preface_at or b.start_line - 1)  # the answer starts at the wrapper's record
            head = (f"{words} " if words.endswith(".") else f"{words.rstrip(': ')}: ") if words else ""
            cut = "The traceback is cut off" if head.endswith(". ") else "the traceback is cut off"
            cause = RootCause(
                raised_name(code) or b.relayed, f"{head}{cut} before its exception line{last_frame}", b.process, start, excerpt, where,
                evidence=EVIDENCE_WORDS["traceback cut"],
            )
            return _Candidate(cause, tier, INCOMPLETE, rank=-1 if said else 0, engine=b.engine_where is not None), (b.preface_at or b.start_line - 1) if said else b.start_line, False
        chosen: _Exc | None = None
        harvested: str | None = None
        for i, e in enumerate(b.exceptions):
            text = "\n".join(e.lines)
            inner = "" if e.type.rsplit(".", 1)[-1] in ECHO_EXCEPTIONS else self._wrapper(f"{e.type}: {text}")
            if inner is None:
                chosen = self._restated(e, b.exceptions[i + 1 :])
                break
            if inner and harvested is None:
                harvested = inner
        first = b.exceptions[0]
        all_text = [f"{x.type}: {chr(10).join(x.lines)}" for x in b.exceptions]
        if self._benign([b.preface, *excerpt, *all_text]):
            return None, None, False
        if b.embeds:
            chosen = None  # only a wrapper of the traceback printed inside its message
        if chosen is not None and DEATH_REPORT.search(chosen.lines[0]) is not None:
            # the launcher's exception only reports its child's death: evidence of that death, ranked
            # with a launcher's other words for one (the child's own traceback, even cut, says more)
            said = chosen.lines[0].strip()
            cause = RootCause(None, said, b.process, chosen.line, [*excerpt, f"{chosen.type}: {said}"][-EXCERPT_LINES:], _where(chosen.where or ""), evidence=EVIDENCE_WORDS["process death"])
            return _Candidate(cause, tier, EVIDENCE, rank=4), chosen.line, False
        if chosen is not None:
            message = "\n".join(chosen.lines)
            # an exception line an error record logged on its own, no frame in the window: what the
            # answer rests on is that line (a traceback's own last line keeps its frames above it)
            alone = not b.frames and b.where is None and b.level in ERROR_LEVELS and len(b.exceptions) == 1
            excerpt = excerpt + [f"{chosen.type}: {message}"]
            cause = RootCause(
                chosen.type, message, b.process, chosen.line, excerpt[-EXCERPT_LINES:], _where(chosen.where or ""),
                evidence=EVIDENCE_WORDS["error line" if alone else "traceback"],
            )
            return _Candidate(cause, tier, COMPLETE), first.line, False
        last = b.exceptions[-1]
        if harvested:
            context = self._context(all_text[-1])
            cause = RootCause(
                last.type, harvested, b.process, last.line, (excerpt + all_text)[-EXCERPT_LINES:], _where(last.where or ""), harvested=True, context=context,
                evidence=EVIDENCE_WORDS["traceback"],
            )
            return _Candidate(cause, tier, HARVESTED), first.line, True
        cause = RootCause(last.type, "\n".join(last.lines), b.process, last.line, (excerpt + all_text)[-EXCERPT_LINES:], _where(last.where or ""))
        return _Candidate(cause, tier, WRAPPER), first.line, True

    # -- helpers --------------------------------------------------------------------------------
    def _restated(self, e: _Exc, later: list[_Exc]) -> _Exc:
        """The exception that says what ``e`` meant: an exception whose whole message is a bare key
        (``KeyError: 'gfx1101'``, ``KeyError: 'qwen3'``) handled and raised again with a sentence that
        names that key ("Unknown GPU architecture: gfx1101 ...", "... has model type `qwen3` but
        Transformers does not recognize this architecture") is said by that sentence; a wrapper's
        words never replace it."""
        key = bare_key("\n".join(e.lines))
        for nxt in later:
            text = "\n".join(nxt.lines)
            if key is None or not restates(key, text) or self._wrapper(f"{nxt.type}: {text}") is not None:
                break
            e, key = nxt, bare_key(text)
        return e

    def _wrapper(self, text: str) -> str | None:
        """None when ``text`` is not a wrapper; "" for a wrapper; its inner text when harvestable."""
        for w in self._wrappers:
            if w.needle in text:
                if w.harvest:
                    m = re.search(w.harvest, text, re.S)
                    if m and m["inner"].strip():
                        return m["inner"].strip()
                return ""
        return "" if POINTS_ELSEWHERE.search(text) else None

    def _context(self, text: str) -> str | None:
        """Where the wrapper in ``text`` says the failure happened ("during CUDA graph capture")."""
        for w in self._wrappers:
            if w.needle in text:
                return w.context or None
        return None

    def _benign(self, lines: list[str]) -> bool:
        for needle in self._g.benign_tracebacks:
            for ln in lines:
                if needle in ln:
                    return True
        return False

    def _tier(self, process: str) -> int:
        t = self._tier_cache.get(process)
        if t is None:
            tiers = self._g.process_tiers
            t = len(tiers)
            for i, needles in enumerate(tiers):
                if any(process.startswith(n) for n in needles):
                    t = i
                    break
            if len(self._tier_cache) < 1024:
                self._tier_cache[process] = t
        return t

    def _mark_fatal(self, number: int) -> None:
        if not self.fatal:
            self.fatal = True
            self.fatal_line = number
        else:
            # a traceback is marked when it closes, after the records that came while it was open
            self.fatal_line = min(self.fatal_line, number)
        self.last_fatal_line = max(self.last_fatal_line, number)

    def _push(self, c: _Candidate) -> None:
        """Keep the earliest candidate per (kind, tier, process, marker): all that pick() can choose."""
        key = (c.kind, c.rank, c.tier, c.cause.process, c.marker)
        if key in self._cands:
            return
        if len(self._cands) < MAX_CANDIDATES:
            self._cands[key] = c
