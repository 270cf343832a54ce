"""Raw engine output bytes to clean, numbered lines, and a fast per-line classifier.

Engine logs arrive in arbitrary chunks over SSH or from a file: lines are cut anywhere, tqdm bars
overwrite themselves with ``\\r``, vLLM colours its process prefixes even into files, and Windows
pastes carry CRLF. :class:`LineSplitter` turns all of that into :class:`Line` objects, identically
whatever the chunking.

``\\r`` policy: every ``\\r``-separated update of a physical line is reported as its own
:class:`Line` with the same ``number``; all but the first carry ``replaces_previous=True`` so a
viewer can overwrite the previous row instead of appending (the analyzer sees every update, so
shard progress is live). Empty segments (a bare ``\\r`` at a line start) are not reported.

:func:`classify` is used per visible row by the TUI, so it only does substring tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["CLASSIFY_MARKS", "Line", "LineKind", "LineSplitter", "classify", "classify_run", "is_noise", "strip_ansi", "strip_caret"]

# CSI sequences (colours, cursor moves) and OSC sequences (titles, links).
_ANSI = re.compile(rb"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[@-Z\\-_])")


@dataclass(slots=True)
class Line:
    """One line (or one ``\\r`` update of a line) of engine output."""

    text: str
    #: 1-based physical line number (counted by ``\\n``) in the stream.
    number: int
    #: Offset of the first byte of this segment in the stream.
    byte_offset: int
    #: True when this is a ``\\r`` update that overwrites the previous Line (same ``number``).
    replaces_previous: bool = False
    #: True when ``text`` equals the previous reported line's text (a repeated identical line).
    is_repeat: bool = False


#: The same sequences in a terminal's caret notation, as ``cat -v`` or a pager shows them and a paste
#: keeps them: ESC as the two characters ``^[`` ("^[[1;36m(EngineCore_DP0 pid=7)^[[0;0m"), and a CR
#: before the line's end as ``^M``; syslog's octal escape of ESC is ``#033`` ("#033[1;36m(VllmWorker rank=2
#: pid=7)#033[0;0m", rsyslog's escaping of control characters). One pattern, for raw bytes and for a decoded line.
_CARET_PATTERN = r"(?:\^\[|#033)\[[0-9;?]*[ -/]*[@-~]|\^M(?=\r?\n|$)"
_CARET = re.compile(_CARET_PATTERN.encode(), re.M)
_CARET_TEXT = re.compile(_CARET_PATTERN, re.M)


def strip_caret(text: str) -> str:
    """One decoded line without escape sequences in caret notation (the caller checks for ``^[`` or
    ``^M`` first: the analyzer's per-line path)."""
    return _CARET_TEXT.sub("", text)


def strip_ansi(data: bytes) -> bytes:
    """Remove ANSI escape sequences from raw bytes (and their caret notation, a paste of a terminal's)."""
    if b"\x1b" in data:
        data = _ANSI.sub(b"", data)
    return _CARET.sub(b"", data) if b"^[" in data or b"^M" in data or b"#033[" in data else data


class LineSplitter:
    """Incremental splitter: ``feed`` chunks, then ``flush`` at end of stream.

    Holds only the unfinished tail of the current line (and a lone trailing ``\\r`` until the next
    byte shows whether it starts a CRLF), so memory does not grow with the stream.
    """

    __slots__ = ("_buf", "_buf_offset", "_number", "_in_cr_run", "_last_text", "_offset", "_line_start")

    def __init__(self) -> None:
        self._buf = b""  # unfinished bytes (no \n, possibly a trailing \r held back)
        self._buf_offset = 0  # stream offset of _buf[0]
        self._offset = 0  # total bytes fed
        self._number = 1  # number of the physical line currently being read
        self._in_cr_run = False  # a \r segment of the current physical line was already reported
        self._last_text: str | None = None
        self._line_start = 0  # stream offset of the current physical line

    @property
    def lines_seen(self) -> int:
        """Physical lines completed so far."""
        return self._number - 1

    def feed(self, data: bytes) -> list[Line]:
        """Split a chunk; returns the lines (and ``\\r`` updates) completed by it."""
        if not data:
            return []
        self._offset += len(data)
        buf = self._buf + data if self._buf else data
        start = self._buf_offset
        out: list[Line] = []
        parts = buf.split(b"\n")
        tail = parts.pop()
        pos = start
        for raw in parts:
            self._emit_physical(raw, pos, out)
            pos += len(raw) + 1
        # The tail has no \n yet: report its completed \r segments now, keep the rest.
        if b"\r" in tail:
            cut = tail.rfind(b"\r")
            if cut == len(tail) - 1:
                # A trailing \r may be the first half of CRLF: hold it back.
                cut = tail.rfind(b"\r", 0, cut)
            if cut >= 0:
                done = tail[: cut + 1]
                self._flush_segments(done, pos, out)
                tail = tail[cut + 1 :]
                pos += cut + 1
        self._buf = tail
        self._buf_offset = pos
        return out

    def flush(self) -> list[Line]:
        """End of stream: report the unfinished last line, if any."""
        out: list[Line] = []
        if self._buf:
            self._emit_physical(self._buf, self._buf_offset, out)
            self._buf_offset += len(self._buf)
            self._buf = b""
        return out

    # -- internals -------------------------------------------------------------------------------
    def _flush_segments(self, raw: bytes, pos: int, out: list[Line]) -> None:
        """Report ``\\r``-terminated segments of the current physical line (the line goes on)."""
        segs = raw.split(b"\r")
        segs.pop()  # raw ends with \r: the last element is empty
        for seg in segs:
            self._emit_segment(seg, pos, out)
            pos += len(seg) + 1

    def _emit_physical(self, raw: bytes, pos: int, out: list[Line]) -> None:
        """Report the rest of one physical line ending at ``\\n`` (or at end of stream)."""
        end = pos + len(raw) + 1
        if raw.endswith(b"\r"):
            raw = raw[:-1]  # CRLF
        if b"\r" in raw:
            segs = raw.split(b"\r")
            for seg in segs:
                self._emit_segment(seg, pos, out)
                pos += len(seg) + 1
            if not self._in_cr_run:
                # Every segment was empty: still a (blank) physical line.
                self._emit_segment(b"", self._line_start, out, force=True)
        else:
            self._emit_segment(raw, pos, out, force=True)
        self._number += 1
        self._in_cr_run = False
        self._line_start = end

    def _emit_segment(self, seg: bytes, pos: int, out: list[Line], force: bool = False) -> None:
        if not seg and not force:
            return
        if not seg:
            if self._in_cr_run:
                return
            pos = self._line_start  # a blank physical line is located at its start
        seg = strip_ansi(seg)
        try:
            text = seg.decode()
        except UnicodeDecodeError:
            text = seg.decode("utf-8", "replace")
        repeat = text == self._last_text and text != ""
        out.append(Line(text, self._number, pos, self._in_cr_run, repeat))
        self._in_cr_run = True
        self._last_text = text


class LineKind(str, Enum):
    """What a line is, for colouring and folding. ``noise_*`` kinds may be folded by a viewer."""

    ERROR = "error"
    TRACEBACK = "traceback"
    WARNING = "warning"
    INFO = "info"
    PROGRESS = "progress"
    NOISE_WARNING = "noise_warning"
    NOISE_IMPORT = "noise_import"
    NOISE_NCCL = "noise_nccl"
    NOISE_ACCESS = "noise_access"
    NOISE_ROUTES = "noise_routes"
    NOISE_CHATTER = "noise_chatter"
    #: A line an engine printed after an orderly stop (its shutdown echo), folded under the stop;
    #: set by the ingest worker from the analyzer's stop line, never by :func:`classify`.
    NOISE_SHUTDOWN = "noise_shutdown"

    @property
    def is_noise(self) -> bool:
        return self.value.startswith("noise_")


_NOISE_WARNING_MARKS = ("FutureWarning:", "DeprecationWarning:", "UserWarning:", "is deprecated! Use")
_WARN_ECHOES = ("  warnings.warn(", "  torch._dynamo.utils.warn_once(", "  warn_once(")
_CHATTER = (
    "Ignore import error when loading sglang.srt.models.",
    "No available shared memory broadcast block found",
    "Endpoint '/get_model_info' is deprecated",
    "MOE_RUNNER_BACKEND is not initialized",
    "NumExpr detected",
    "Using default chat sampling params",
    "Using default completion sampling params",
    "Default sampling parameters have been overridden",
    "Registering ",
    "Priority not set for op",
    "Checkpoint does not provide a q scaling factor",
    "Using KV cache scaling factor 1.0",
    "Using uncalibrated q_scale",
)
_POLL_PATHS = ('"GET /health', '"GET /metrics', '"GET /v1/models', '"GET /get_server_info', '"GET /server_info',
               '"GET /get_model_info', '"GET /model_info', '"POST ', '"GET /')
_ERROR_MARKS = ("Traceback (most recent call last)", "Error: ", "Exception: ", "Error(", "ERROR ", "CRITICAL ",
                "Scheduler hit an exception", "exception:", "Killed", "Segmentation fault", "core dumped")
#: The record header (process prefix + level) sits within this many characters of a line's start.
_LEVEL_HEAD = 60
_TB_MARKS = ('  File "', "Traceback (most recent call last)", "During handling of the above exception",
             "The above exception was the direct cause")


#: Every mark :func:`classify` looks for in a group (a viewer's prefilter must find each of them).
CLASSIFY_MARKS: tuple[str, ...] = (*_NOISE_WARNING_MARKS, *_WARN_ECHOES, *_CHATTER, *_ERROR_MARKS, *_TB_MARKS)


def _has_any(text: str, marks: tuple[str, ...]) -> bool:
    for m in marks:
        if m in text:
            return True
    return False


def classify(text: str) -> LineKind:
    """Kind of one ANSI-free line. Substring tests only: cheap enough for every visible row."""
    if "WARNING" in text or "Warning" in text or "warn" in text:
        if _has_any(text, _NOISE_WARNING_MARKS) or _has_any(text, _WARN_ECHOES):
            return LineKind.NOISE_WARNING
    if "<frozen importlib" in text:
        return LineKind.NOISE_IMPORT
    if "NCCL INFO" in text or "[Gloo]" in text or "gloo" in text and "INFO" in text:
        return LineKind.NOISE_NCCL
    if "Route: " in text and "Methods:" in text:
        return LineKind.NOISE_ROUTES
    if "INFO:" in text and " - \"" in text and "HTTP/" in text and _has_any(text, _POLL_PATHS):
        return LineKind.NOISE_ACCESS
    if "flashinfer.jit" in text or _has_any(text, _CHATTER):
        return LineKind.NOISE_CHATTER
    if _has_any(text, _TB_MARKS):
        return LineKind.TRACEBACK
    if "it/s]" in text or "s/it]" in text or "% Completed |" in text or ("%|" in text and "/" in text):
        return LineKind.PROGRESS
    if "WARNING" in text[:_LEVEL_HEAD] and "ERROR" not in text[:_LEVEL_HEAD]:
        # a warning record that merely mentions an error ("can cause `OSError: ...`") is a warning
        return LineKind.WARNING
    if _has_any(text, _ERROR_MARKS):
        return LineKind.ERROR
    if "WARNING" in text or "NCCL WARN" in text:
        return LineKind.WARNING
    return LineKind.INFO


def is_noise(text: str) -> bool:
    """True when a viewer may fold this line."""
    return classify(text).is_noise


def classify_run(texts: list[str], previous: LineKind | None = None) -> list[LineKind]:
    """Kinds of consecutive lines. Python prints a warning as two lines, ``file.py:N: FutureWarning:
    msg`` and then the indented source line that raised it: that echo folds with its warning.
    ``previous`` is the kind of the line before ``texts[0]`` (for a viewer that classifies in pages).
    """
    out: list[LineKind] = []
    prev = previous
    for text in texts:
        kind = classify(text)
        if prev is LineKind.NOISE_WARNING and text[:1] in (" ", "\t") and kind in (LineKind.INFO, LineKind.TRACEBACK):
            kind = LineKind.NOISE_WARNING
        out.append(kind)
        prev = kind if kind is not LineKind.NOISE_WARNING or not text[:1].isspace() else None
    return out
