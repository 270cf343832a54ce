"""A traceback's frame lines read in one regex call instead of one Python pass per line.

A crash prints long runs of frame lines (``File "...", line N, in f`` and the code under it), each
behind the same header. While exactly the kind of traceback that reads frames is open,
:class:`FrameRuns` matches the whole run at once and does what reading the lines one by one would
do: the frames kept, the innermost frame (and the engine's own), the last timestamp.
"""

from __future__ import annotations

import re

from servelab.engines.logs.grammar import Header
from servelab.engines.logs.rootcause import FRAMES_STATE, STALE_LINES, TracebackTracker

__all__ = ["FrameRuns"]

_RUN_TS = re.compile(r"\d\d-\d\d \d\d:\d\d:\d\d")


class FrameRuns:
    """The frame-run fast path of one analyzer's traceback tracker (it keeps its compiled runs)."""

    def __init__(self, tb: TracebackTracker) -> None:
        self._tb = tb
        self._open_tb = tb.open_processes  # the tracker's dict of open tracebacks
        self._run_rx: dict[tuple[str, str], tuple[re.Pattern[bytes], re.Pattern[bytes], int]] = {}

    def consume(self, raw: bytes, pos: int, stop: int, hdr: Header, line: str, number: int) -> tuple[int, int, str | None]:
        """Consume the frame lines of ``raw[pos:stop]`` that follow line ``number`` (``line``, parsed
        as ``hdr``), a line of the only open traceback reading its frames.

        Returns (the new position, the lines consumed, the last timestamp they carry or None);
        ``(pos, 0, None)`` when there is no run to take.
        """
        process, level, ts, msg, _tag = hdr
        owner = self._tb.raw_owner
        b = self._open_tb.get(process or (owner if owner is not None and not ts else ""))
        if b is None or b.state != FRAMES_STATE or b.last != number - 1 or level != b.level:
            return pos, 0, None
        if level:
            if not ts or b.process != process:
                return pos, 0, None
            head = len(line) - len(msg)
            at = line.find(ts)
            key = (line[:at], line[at + 14 : head])
        elif process:
            # a raw traceback behind a process prefix ("(EngineCore pid=7)   File ..."): multiprocessing's re-print
            if ts or b.process != process or line[:1] != "(" or b.raw:
                return pos, 0, None
            head = len(line) - len(msg)
            key = (line[:head], "")
        else:
            if ts or b.process != (self._tb.raw_owner or ""):
                return pos, 0, None
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
            return pos, 0, None
        run_end = m.end()
        run = raw[pos:run_end]
        if b"\r" in run and run.count(b"\r") != run.count(b"\r\n"):
            strict = rxs[1].match(raw, pos, stop)
            if strict is None:
                return pos, 0, None
            run_end = strict.end()
            run = raw[pos:run_end]
        if b"Traceback (most recent" in run or b"cluster]\r\n" in run or b"cluster]\n" in run:
            return pos, 0, None
        lines = run.decode("utf-8", "replace").split("\n")
        lines.pop()
        if len(self._open_tb) > 1:
            # other open tracebacks age while this one runs: a staleness check inside the run
            # (every 8th line) could close one of them, so stop the run before the first such check
            first, last_n = number, number + len(lines) - 1
            for other in self._open_tb.values():
                if other is b:
                    continue
                n = max(first, other.last + STALE_LINES + 1)
                n += -n % 8
                if n <= last_n:
                    lines = lines[: n - first]
            if not lines:
                return pos, 0, None
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
        serving = self._tb.watch_frames
        for k, ln in enumerate(lines):
            st = ln[head:].strip()
            if st.startswith('File "'):
                if b.where is None:
                    self._tb.outermost_frame(b, st)
                b.where = st
                if pkg in st:
                    b.engine_where = st
                if serving:
                    self._tb.serving_frame(number + k, st, b)
                expect = True
            else:
                if expect and serving and st:
                    self._tb.serving_code(number + k, st)
                expect = False
        for ln in lines[-(frames.maxlen or 0) :]:
            st = ln[head:].strip()
            if st:
                frames.append(st)
        b.expect_code = expect
        after = number + len(lines)
        b.last = after - 1
        last_ts: str | None = None
        if end != run_end:
            if tsm is not None:
                last_ts = tsm.group(0)
        elif level:
            at = run.rfind(b"\n", 0, len(run) - 1) + 1 + rxs[2]  # the last line's timestamp
            last_ts = run[at : at + 14].decode()
        if len(self._open_tb) == 1 and after // 8 != number // 8:
            self._tb.expire(after - 1)
        return end, len(lines), last_ts
