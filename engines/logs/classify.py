"""What a line of a log IS, for a viewer: its kind (colour, noise folding, errors), block by block.

:class:`LineClassifier` gives the kinds of whole lines of a block (one code byte a line, see
:data:`CODE`) and collapses the updates of one progress bar; :func:`display_text` is the text a
line shows. Textual-free: the dashboard's ingest worker (:mod:`engines.logs.ingest`) runs it, and
the view's line index (``tui/widgets/line_index.py``) stores its codes.

Only lines holding one of :data:`ANCHORS` are looked at in Python; the others are plain INFO. The
anchors are found in one Hyperscan pass over a block, compiled (and cached on disk) by the same
code as the analyzer's prefilter (:func:`engines.logs.prefilter.compiled_database`). Where the
analyzer reads the same blocks (the ingest worker), the anchors are patterns of the analyzer's own
database (:data:`ANCHOR_SOURCES`, :meth:`~engines.logs.prefilter.Prefilter.share`): one pass over a
block finds both, and :meth:`LineClassifier.classify` takes the anchors' ends from it.
"""

from __future__ import annotations

import re
import threading
from array import array
from bisect import bisect_left
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any

from servelab.engines.logs.lines import CLASSIFY_MARKS, LineKind, classify, strip_ansi
from servelab.engines.logs.prefilter import compiled_database

__all__ = [
    "ANCHORS", "ANCHOR_SOURCES", "CODE", "ERROR_CODES", "HS_FROM_BYTES", "KINDS", "NOISE_CODES", "SUPERSEDED",
    "AnchorScanner", "Classified", "LineClassifier", "anchor_ends_find", "display_text", "fold_after_stop",
]

#: Kinds by code; the code is what a line index stores per line (:data:`CODE`: a kind's code;
#: :data:`SUPERSEDED` is or-ed in for a bar update that a later one hides).
KINDS: tuple[LineKind, ...] = tuple(LineKind)
CODE = {kind: i for i, kind in enumerate(KINDS)}
SUPERSEDED = 0x80
NOISE_CODES = frozenset(CODE[k] for k in KINDS if k.is_noise)
ERROR_CODES = frozenset({CODE[LineKind.ERROR], CODE[LineKind.TRACEBACK]})
_PROGRESS = CODE[LineKind.PROGRESS]
_SHUTDOWN = CODE[LineKind.NOISE_SHUTDOWN]
_INFO = CODE[LineKind.INFO]
_PREFIX = re.compile(r"^\((?:[A-Za-z0-9_]+ )?pid=\d+\)\s*")
_BAR_KEY = re.compile(r"^(.*?)\s*\d+(?:\.\d+)?%")

#: A line containing none of these byte strings is plain INFO for :func:`classify` (it only does
#: substring tests: each of its marks contains one of these) and shows as its own bytes (no
#: ``\\r``, ANSI or tab). Finding them per chunk with ``bytes.find`` leaves Python work only for
#: the few lines that have one. ``tests/test_tui_line_index.py`` checks, on every recorded log,
#: that this gives exactly what :func:`classify` gives line by line.
_ANCHORS: tuple[bytes, ...] = (
    b"\r", b"\x1b", b"\t",
    b"WARN", b"arn", b"rror", b"RROR", b"xception", b"NCCL", b"INFO:", b"<frozen", b"loo", b"Route: ",
    b"flashinfer", b"it/s]", b"s/it]", b"% Completed", b"%|", b'File "', b"Traceback", b"CRITICAL", b"Killed",
    b"Segmentation", b"core dumped", b"deprecated",
)


def _anchors() -> tuple[bytes, ...]:
    """The anchors, plus any of classify's marks that none of them covers (new ones stay exact)."""
    extra: list[bytes] = []
    for mark in CLASSIFY_MARKS:
        raw = mark.encode()
        if not any(a in raw for a in _ANCHORS) and raw not in extra:
            extra.append(raw)
    return _ANCHORS + tuple(extra)


ANCHORS = _anchors()
#: The anchors as Hyperscan patterns (literals as ``\\xHH`` escapes; ids: their positions).
ANCHOR_SOURCES: tuple[str, ...] = tuple("".join("\\x%02x" % c for c in a) for a in ANCHORS)

_hs: Any
try:  # every anchor in one pass over a block; ``bytes.find`` per anchor answers the same without it
    import hyperscan as _hs
except ImportError:  # pragma: no cover - hyperscan ships wheels for the platforms servelab runs on
    _hs = None


def _anchor_db() -> Any:
    """The anchors as one Hyperscan database (literals as ``\\xHH`` escapes), compiled the prefilter's way."""
    return compiled_database(ANCHOR_SOURCES)


def anchor_ends_find(block: bytes) -> list[int]:
    """Offsets just past an anchor, at least one per line holding one (``bytes.find`` per anchor).

    Each anchor is one scan of the whole block: ~50 scans, ~5 s for a 1,000,000-line log. Kept
    for a machine without Hyperscan, and as the reference :func:`anchor_ends` is tested against.
    """
    out: list[int] = []
    find = block.find
    for anchor in ANCHORS:
        pos = find(anchor)
        while pos >= 0:
            out.append(pos + len(anchor))
            nl = block.find(b"\n", pos)
            if nl < 0:
                break
            pos = find(anchor, nl + 1)
    return out


_DB: Any = None
_DB_LOCK = threading.Lock()


#: Blocks from this size on are scanned with Hyperscan (its database compiled on the first one):
#: compiling costs ~0.1 s, which a small block (a long log's end on opening, a followed log's
#: latest lines) would never win back; ``bytes.find`` scans 256 kB for every anchor in ~5 ms.
HS_FROM_BYTES = 1 << 19


class AnchorScanner:
    """What :func:`anchor_ends_find` finds, in one Hyperscan pass (~20x faster on a plain log).

    The compiled database is shared; the scratch space is this scanner's own (a scratch must not
    be used by two scans at once, and indexes may classify in several threads).
    """

    __slots__ = ("_scratch",)

    def __init__(self) -> None:
        self._scratch: Any = None

    def ends(self, block: bytes) -> list[int]:
        global _DB
        if _hs is None or (_DB is None and len(block) < HS_FROM_BYTES):
            return anchor_ends_find(block)
        if self._scratch is None:
            with _DB_LOCK:
                if _DB is None:
                    _DB = _anchor_db()
            self._scratch = _hs.Scratch(_DB)
        out: list[int] = []
        append = out.append
        find = block.find
        line_end = [-1]  # the \n closing the line of the last match: later matches in it add nothing

        def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            if to <= line_end[0]:
                return
            append(to)
            nl = find(b"\n", to)
            line_end[0] = nl if nl >= 0 else len(block)

        _DB.scan(block, match_event_handler=on_match, scratch=self._scratch)
        return out


def fold_after_stop(classified: Classified, stop_line: int) -> Classified:
    """The block's lines after the log's stop line (1-based, the analyzer's
    :attr:`~engines.logs.analyzer.LogAnalyzer.stop_line`) as shutdown noise, folded under the stop
    line: what a stopped engine prints while dying (SGLang's "scheduler_0 ... crashed with exit code
    -15", "Sleeping 5 seconds before crash diagnostics"; vLLM's EngineDeadError) is its echo."""
    start = max(stop_line - classified.first, 0)  # line index stop_line is the first line after it
    codes = classified.codes
    if start >= len(codes):
        return classified
    out = bytearray(codes[:start]) + bytes(_SHUTDOWN | (c & SUPERSEDED) for c in codes[start:])
    return replace(classified, codes=bytes(out))


def display_text(raw: bytes) -> str:
    """The text a line shows: its last non-empty ``\\r`` update, without ANSI codes."""
    if raw.endswith(b"\r"):
        raw = raw.rstrip(b"\r")
    if b"\r" in raw:
        segments = [s for s in raw.split(b"\r") if s]
        raw = segments[-1] if segments else b""
    return strip_ansi(raw).decode("utf-8", "replace").replace("\t", "    ")


def _bar_key(text: str) -> str | None:
    m = _BAR_KEY.match(_PREFIX.sub("", text))
    return m.group(1) if m else None


@dataclass(frozen=True, slots=True)
class Classified:
    """Kinds of the consecutive lines ``first ..``: what the classifier hands to the index."""

    first: int
    #: One code per line (``SUPERSEDED`` set on bar updates hidden by a later one in the block).
    codes: bytes
    #: Earlier lines (before ``first``) that this block's bar update supersedes.
    hidden_before: tuple[int, ...]
    #: Display width of the widest line (bytes for plain lines: an upper bound).
    width: int


class LineClassifier:
    """Kinds of complete lines, block by block, in order; holds only the open progress bar."""

    __slots__ = ("_bar", "_bar_line", "_bar_blanks", "next_line", "_scanner")

    def __init__(self) -> None:
        self._scanner = AnchorScanner()
        self._bar: str | None = None
        self._bar_line = -1
        self._bar_blanks: list[int] = []
        #: The line the next block must start with.
        self.next_line = 0

    def classify(self, block: bytes, ends: list[int] | None = None) -> Classified:
        """``block`` holds whole lines, each ending with ``\\n``.

        ``ends``: the anchors' ends in ``block`` as :meth:`AnchorScanner.ends` finds them (at least
        one per line holding an anchor), when a scan shared with the analyzer found them already.
        """
        first = self.next_line
        parts = block.split(b"\n")
        parts.pop()
        n = len(parts)
        self.next_line = first + n
        codes = bytearray([_INFO]) * n
        lens = array("q", map(len, parts))
        if n == 0:
            return Classified(first, b"", (), 0)
        newlines = array("q", map(int.__add__, accumulate(lens), range(n)))  # offset of each \n
        special = {bisect_left(newlines, end - 1) for end in (self._scanner.ends(block) if ends is None else ends)}
        hidden_before: list[int] = []
        todo = sorted(special)
        i = k = 0  # next line to look at; next special line in todo
        while True:
            if self._bar is None:  # jump to the next special line (an open bar looks at every line)
                while k < len(todo) and todo[k] < i:
                    k += 1
                if k == len(todo):
                    break
                i = todo[k]
            if i >= n:
                break
            raw = parts[i]
            if i in special:
                plain = not (b"\r" in raw or b"\x1b" in raw or b"\t" in raw)
                text = raw.decode("utf-8", "replace") if plain else display_text(raw)
                code = CODE[classify(text)]
                lens[i] = len(text)
            else:
                text = raw.decode("utf-8", "replace")
                code = _INFO
            codes[i] = code
            if code == _PROGRESS or self._bar is not None:
                self._collapse(first, first + i, code, text, codes, hidden_before)
            i += 1
        return Classified(first, bytes(codes), tuple(hidden_before), max(lens))

    def _collapse(self, first: int, line: int, code: int, text: str, codes: bytearray, hidden: list[int]) -> None:
        """Hide the previous update of the same progress bar (and the blank prefix lines after it)."""
        if code == _PROGRESS:
            key = _bar_key(text)
            if key is not None and key == self._bar and self._bar_line >= 0:
                for old in (self._bar_line, *self._bar_blanks):
                    if old >= first:
                        codes[old - first] |= SUPERSEDED
                    else:
                        hidden.append(old)
            self._bar, self._bar_line, self._bar_blanks = key, line, []
        elif code == _INFO and self._bar is not None and not _PREFIX.sub("", text).strip():
            self._bar_blanks.append(line)
        else:
            self._bar, self._bar_line, self._bar_blanks = None, -1, []
