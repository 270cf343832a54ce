"""A log spooled to a local file plus a compact line index: the data behind :class:`LogView`.

Holding a multi-hour log as widgets or rich text costs kilobytes per line (see the TUI notes);
here a line costs the low 4 bytes of its offset and a kind byte (typed arrays, no Python object
per line; a row slot only for the few hidden lines), and its text is read back from the spool file
only when it is on screen. Textual-free, so
it can be tested and benchmarked alone, and run in the ingest worker process.

Two steps per chunk, so the cheap one never waits for the dear one:
- *offsets* (:meth:`LineIndex.append`): the chunk goes to the spool and its line starts are found
  with C-level primitives (``bytes.split`` + ``itertools.accumulate`` into an ``array``), about
  0.5 µs a line. Also where a view shows a long log's end before the rest is read. From then on every line can be shown and jumped to.
- *kinds* (:class:`LineClassifier`): each line's kind (colour, noise folding, errors) and the
  progress-bar collapsing. Inline by default; with ``deferred=True`` the owner classifies in
  another process (:mod:`tui.widgets.log_ingest`) and hands the result to :meth:`LineIndex.apply`.
  Lines not classified yet are shown unfolded, coloured by classifying them as they are drawn.

Display rules, kept in the index so the view only maps rows to lines:
- a line's ``\\r`` updates show only the latest one (a tqdm bar redrawn in place);
- consecutive updates of one progress bar on separate lines collapse to the latest, with the
  bare ``(Worker pid=N)`` prefix lines between them (vLLM prints those);
- noise lines (``classify(..).is_noise``) can be folded away;
- with a filter, only lines matching the search pattern remain.
"""

from __future__ import annotations

import os
import re
import threading
from array import array
from bisect import bisect_left, bisect_right, insort
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate, compress, repeat
from operator import add
from pathlib import Path
from typing import Any

from servelab.engines.logs import lines as _lines
from servelab.engines.logs.lines import LineKind, classify, strip_ansi

#: Kinds by code; the code is what the index stores per line.
KINDS: tuple[LineKind, ...] = tuple(LineKind)
_CODE = {kind: i for i, kind in enumerate(KINDS)}
_SUPERSEDED = 0x80
_NOISE_CODES = frozenset(_CODE[k] for k in KINDS if k.is_noise)
_ERROR_CODES = frozenset({_CODE[LineKind.ERROR], _CODE[LineKind.TRACEBACK]})
_PROGRESS = _CODE[LineKind.PROGRESS]
_INFO = _CODE[LineKind.INFO]
_PREFIX = re.compile(r"^\((?:[A-Za-z0-9_]+ )?pid=\d+\)\s*")
_BAR_KEY = re.compile(r"^(.*?)\s*\d+(?:\.\d+)?%")
_READ_BLOCK = 1 << 22
#: Line starts are kept as their low ``_OFFSET_BITS`` bits (4 bytes a line); the lines where the
#: high part steps up (every 4 GiB of spool) are listed apart.
_OFFSET_BITS = 32
#: Display texts kept (a few screens' worth; the view keeps its own rendered lines besides).
TEXT_CACHE_LINES = 512

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
    for group in (_lines._NOISE_WARNING_MARKS, _lines._WARN_ECHOES, _lines._CHATTER, _lines._ERROR_MARKS,
                  _lines._TB_MARKS):
        for mark in group:
            raw = mark.encode()
            if not any(a in raw for a in _ANCHORS) and raw not in extra:
                extra.append(raw)
    return _ANCHORS + tuple(extra)


ANCHORS = _anchors()

_hs: Any
try:  # every anchor in one pass over a block; ``bytes.find`` per anchor answers the same without it
    import hyperscan as _hs
except ImportError:  # pragma: no cover - hyperscan ships wheels for the platforms servelab runs on
    _hs = None


def _anchor_db() -> Any:
    """The anchors as one Hyperscan database (literals as ``\\xHH`` escapes; compiling: a few ms)."""
    db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
    db.compile(
        expressions=[b"".join(b"\\x%02x" % c for c in a) for a in ANCHORS],
        ids=list(range(len(ANCHORS))),
        elements=len(ANCHORS),
        flags=[0] * len(ANCHORS),
    )
    return db


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
    #: One code per line (``_SUPERSEDED`` set on bar updates hidden by a later one in the block).
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

    def classify(self, block: bytes) -> Classified:
        """``block`` holds whole lines, each ending with ``\\n``."""
        first = self.next_line
        parts = block.split(b"\n")
        parts.pop()
        n = len(parts)
        self.next_line = first + n
        codes = bytearray([_INFO]) * n
        lens = array("q", map(len, parts))
        if n == 0:
            return Classified(first, b"", (), 0)
        ends = array("q", map(int.__add__, accumulate(lens), range(n)))  # offset of each \n
        special = {bisect_left(ends, end - 1) for end in self._scanner.ends(block)}
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
                code = _CODE[classify(text)]
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
                        codes[old - first] |= _SUPERSEDED
                    else:
                        hidden.append(old)
            self._bar, self._bar_line, self._bar_blanks = key, line, []
        elif code == _INFO and self._bar is not None and not _PREFIX.sub("", text).strip():
            self._bar_blanks.append(line)
        else:
            self._bar, self._bar_line, self._bar_blanks = None, -1, []


class LineIndex:
    """Append-only spool + index. Thread-safe: a worker appends while the UI reads."""

    def __init__(self, spool: Path, *, fold_noise: bool = True, deferred: bool = False) -> None:
        self.spool = Path(spool)
        self.spool.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.spool, "ab")  # noqa: SIM115 - closed in close()
        self._rfd = os.open(self.spool, os.O_RDONLY)
        self._lock = threading.RLock()
        #: Byte offset of each complete line, its low _OFFSET_BITS bits; _wraps[j] is the first line
        #: at or past (j + 1) << _OFFSET_BITS (see _start).
        self._starts = array("I")
        self._wraps: list[int] = []
        self._kinds = array("B")  # code of each classified line (the first len(_kinds) lines)
        #: Classified lines not shown (folded noise, superseded bar updates), ascending. Rows are
        #: the other lines: most are shown, so this costs far less than a row per visible line.
        self._hidden = array("i")
        #: With a filter on: the rows themselves (visible classified matches), ascending.
        self._rows = array("i")
        self._matches = array("i")  # lines matching the search, ascending
        self._errors = array("i")
        self._size = 0  # bytes spooled
        self._tail_start = 0  # offset of the unfinished last line
        self._cache: OrderedDict[int, str] = OrderedDict()
        self._width = 0  # widest classified line
        self._pending_width = 0  # widest line not classified yet (bytes)
        self.fold_noise = fold_noise
        self.filter = False
        self.search: re.Pattern[str] | None = None
        self.version = 0  # bumped on every change a view must repaint for
        #: Kinds come from :meth:`apply` (another process classifies) instead of from :meth:`append`.
        self.deferred = deferred
        self._classifier = LineClassifier()

    # -- reading ---------------------------------------------------------------------------------
    @property
    def line_count(self) -> int:
        """Complete lines (the unfinished tail is not counted)."""
        return len(self._starts)

    @property
    def unclassified(self) -> int:
        """Complete lines whose kind is not known yet (shown unfolded meanwhile)."""
        return len(self._starts) - len(self._kinds)

    @property
    def classified_bytes(self) -> int:
        """Spool offset up to which lines are classified."""
        with self._lock:
            k = len(self._kinds)
            return self._start(k) if k < len(self._starts) else self._tail_start

    @property
    def max_width(self) -> int:
        return max(self._width, self._pending_width) if self.unclassified else self._width

    @property
    def row_count(self) -> int:
        """Rows a view shows: visible lines, plus the unfinished tail while it has text."""
        with self._lock:
            return self._classified_rows() + self._pending_count() + (1 if self._tail_visible() else 0)

    @property
    def size(self) -> int:
        return self._size

    @property
    def tail_start(self) -> int:
        """Spool offset where the unfinished last line starts (all before it is whole lines)."""
        return self._tail_start

    def line_at_row(self, row: int) -> int:
        with self._lock:
            shown = self._classified_rows()
            if row < shown:
                if self._filtering():
                    return self._rows[row]
                hidden = self._hidden
                # hidden[j] - j (lines shown before the j-th hidden one) never decreases: the hidden
                # lines before this row's line are those with hidden[j] - j <= row
                return row + bisect_right(range(len(hidden)), row, key=lambda j: hidden[j] - j)
            row -= shown
            k = len(self._kinds)
            if self._filtering():
                m0 = bisect_left(self._matches, k)
                return self._matches[m0 + row] if m0 + row < len(self._matches) else len(self._starts)
            return k + row if k + row < len(self._starts) else len(self._starts)  # else the tail

    def row_of_line(self, line: int) -> int:
        """The row showing ``line``, or the nearest row after it."""
        with self._lock:
            k = len(self._kinds)
            if line < k:
                return bisect_left(self._rows, line) if self._filtering() else line - bisect_left(self._hidden, line)
            if self._filtering():
                m0 = bisect_left(self._matches, k)
                return len(self._rows) + bisect_left(self._matches, line) - m0
            return self._classified_rows() + line - k

    def text(self, line: int) -> str:
        """Display text of a line (the tail when ``line == line_count``)."""
        with self._lock:
            if line >= len(self._starts):
                return display_text(self._read(self._tail_start, self._size))
            cached = self._cache.get(line)
            if cached is not None:
                self._cache.move_to_end(line)
                return cached
            start = self._start(line)
            end = self._start(line + 1) - 1 if line + 1 < len(self._starts) else self._tail_start - 1
            text = display_text(self._read(start, end))
            self._cache[line] = text
            if len(self._cache) > TEXT_CACHE_LINES:
                self._cache.popitem(last=False)
            return text

    def start_of(self, line: int) -> int:
        """Spool offset where ``line`` starts (the tail's start for ``line == line_count``)."""
        with self._lock:
            return self._start(line) if line < len(self._starts) else self._tail_start

    def line_at_offset(self, offset: int) -> int:
        """The line holding spool byte ``offset`` (``line_count``: the unfinished tail)."""
        with self._lock:
            if offset >= self._tail_start:
                return len(self._starts)
            bits = _OFFSET_BITS
            high = offset >> bits
            wraps = self._wraps
            lo = wraps[high - 1] if 0 < high <= len(wraps) else (0 if high == 0 else len(self._starts))
            hi = wraps[high] if high < len(wraps) else len(self._starts)
            line = bisect_right(self._starts, offset & ((1 << bits) - 1), lo, hi) - 1
            return max(line if line >= lo else lo - 1, 0)

    def kind(self, line: int) -> LineKind:
        with self._lock:
            if line >= len(self._kinds):
                return classify(self.text(line))
            return KINDS[self._kinds[line] & ~_SUPERSEDED]

    @property
    def matches(self) -> array[int]:
        return self._matches

    def first_error(self) -> int | None:
        with self._lock:
            return self._errors[0] if self._errors else None

    def next_match(self, after_line: int, forward: bool = True) -> int | None:
        """The next (or previous) matching line, wrapping around; None when nothing matches."""
        with self._lock:
            m = self._matches
            if not m:
                return None
            if forward:
                i = bisect_right(m, after_line)
                return m[i] if i < len(m) else m[0]
            i = bisect_left(m, after_line) - 1
            return m[i] if i >= 0 else m[-1]

    def read(self, start: int, end: int) -> bytes:
        """Spooled bytes ``[start, end)``."""
        return self._read(start, end)

    def _read(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        return os.pread(self._rfd, end - start, start)

    def _filtering(self) -> bool:
        return self.filter and self.search is not None

    def _start(self, line: int) -> int:
        low = self._starts[line]
        return low + (bisect_right(self._wraps, line) << _OFFSET_BITS) if self._wraps else low

    def _classified_rows(self) -> int:
        """Rows of the classified lines."""
        return len(self._rows) if self._filtering() else len(self._kinds) - len(self._hidden)

    def _pending_count(self) -> int:
        """Rows of the lines not classified yet: all of them, or their matches when filtering."""
        k = len(self._kinds)
        if self._filtering():
            return len(self._matches) - bisect_left(self._matches, k)
        return len(self._starts) - k

    def _tail_visible(self) -> bool:
        if self._size <= self._tail_start:
            return False
        if self.search is not None and self.filter:
            return bool(self.search.search(self.text(len(self._starts))))
        return True

    # -- writing ---------------------------------------------------------------------------------
    def append(self, data: bytes) -> int:
        """Spool a chunk and index its complete lines; returns how many rows were added (net)."""
        if not data:
            return 0
        with self._lock:
            rows_before = self._row_total()
            self._file.write(data)
            self._file.flush()
            base = self._size
            self._size += len(data)
            cut = data.rfind(b"\n")
            if cut < 0:
                self.version += 1
                return 0
            first_line = len(self._starts)
            # Line starts: the old tail's start, then one after each \n but the last.
            parts = data[:cut].split(b"\n")
            self._add_starts(base, parts, base + cut + 1)
            self._tail_start = base + cut + 1
            widest = max(map(len, parts))
            if widest > self._pending_width:
                self._pending_width = min(widest, 1 << 16)
            if self.search is not None:
                self._match_new(first_line)
            if not self.deferred:
                self._apply(self._classifier.classify(self._read(self._start(first_line), self._tail_start)))
            self.version += 1
            return self._row_total() - rows_before

    def _add_starts(self, base: int, parts: list[bytes], end: int) -> None:
        """The old tail's start, then the start after each of ``parts`` but the last (``end``)."""
        bits = _OFFSET_BITS
        high = len(self._wraps)
        if self._tail_start >> bits == high and (end - 1) >> bits == high:  # all in one 4 GiB: C loops
            off = high << bits
            self._starts.append(self._tail_start - off)
            starts = accumulate(map(add, map(len, parts), repeat(1)), initial=base - off)
            next(starts)  # == base: the old tail's continuation, already counted
            self._starts.extend(starts)
            self._starts.pop()  # the last accumulated value is the start of the new tail
            return
        values = [self._tail_start, *accumulate(map(add, map(len, parts), repeat(1)), initial=base)][:-1]
        values.pop(1)  # == base, as above
        mask = (1 << bits) - 1
        for value in values:
            while value >> bits > len(self._wraps):
                self._wraps.append(len(self._starts))
            self._starts.append(value & mask)

    def _row_total(self) -> int:
        return self._classified_rows() + self._pending_count()

    def _match_new(self, first_line: int) -> None:
        search = self.search
        assert search is not None
        append = self._matches.append
        for offset, line in enumerate(self._iter_lines(first_line, self._tail_start)):
            if search.search(line):
                append(first_line + offset)

    def _iter_lines(self, first_line: int, end: int) -> Iterator[str]:
        block = self._read(self._start(first_line), end)
        parts = block.split(b"\n")
        parts.pop()
        for raw in parts:
            yield display_text(raw)

    def apply(self, classified: Classified) -> int:
        """Kinds found by another process's :class:`LineClassifier`; returns the net rows added."""
        with self._lock:
            before = self._row_total()
            self._apply(classified)
            self.version += 1
            return self._row_total() - before

    def _apply(self, c: Classified) -> None:
        first = len(self._kinds)
        if c.first != first or first + len(c.codes) > len(self._starts):
            raise ValueError(f"classified lines {c.first}.. do not follow the {first} known kinds")
        codes = c.codes
        filtering = self._filtering()
        if c.hidden_before:
            hidden = set(c.hidden_before)
            for old in hidden:
                if not filtering and not self._is_hidden(old):
                    insort(self._hidden, old)
                self._kinds[old] |= _SUPERSEDED
            while filtering and self._rows and self._rows[-1] in hidden:
                self._rows.pop()
        self._kinds.frombytes(codes)
        lines = range(first, first + len(codes))
        table = self._visible_table()
        if filtering:
            visible = codes.translate(table)
            m = self._matches
            matched = set(m[bisect_left(m, first) : bisect_left(m, first + len(codes))])
            self._rows.extend(line for line in compress(lines, visible) if line in matched)
        else:
            self._hidden.extend(compress(lines, codes.translate(table).translate(_NOT)))
        for i in compress(lines, codes.translate(_ERROR_TABLE)):
            self._errors.append(i)
        if c.width > self._width:
            self._width = c.width
        if len(self._kinds) == len(self._starts):
            self._pending_width = 0

    def _is_hidden(self, line: int) -> bool:
        i = bisect_left(self._hidden, line)
        return i < len(self._hidden) and self._hidden[i] == line

    def _visible_table(self) -> bytes:
        """bytes.translate table: code -> 1 when a line of that code is shown."""
        table = bytearray(256)
        for code in range(len(KINDS)):
            if not (self.fold_noise and code in _NOISE_CODES):
                table[code] = 1
        return bytes(table)

    # -- view settings (call from a worker: they may scan the whole spool) -------------------------
    def set_fold_noise(self, fold: bool) -> None:
        with self._lock:
            self.fold_noise = fold
            self._rebuild_rows()

    def set_filter(self, on: bool) -> None:
        with self._lock:
            self.filter = on
            self._rebuild_rows()

    def set_search(self, pattern: re.Pattern[str] | None) -> int:
        """Set the search pattern, find every match in the spool; returns the match count."""
        with self._lock:
            self.search = pattern
            self._matches = array("i")
            if pattern is not None:
                search = pattern.search
                append = self._matches.append
                for line, raw in self._iter_raw_lines():
                    if search(display_text(raw)):
                        append(line)
            self._rebuild_rows()
            return len(self._matches)

    def _iter_raw_lines(self) -> Iterator[tuple[int, bytes]]:
        """(line number, raw bytes) of every complete line, read in large blocks."""
        line = 0
        offset = 0
        carry = b""
        end = self._tail_start
        while offset < end:
            block = os.pread(self._rfd, min(_READ_BLOCK, end - offset), offset)
            if not block:
                break
            offset += len(block)
            parts = (carry + block).split(b"\n")
            carry = parts.pop()
            for raw in parts:
                yield line, raw
                line += 1

    def _rebuild_rows(self) -> None:
        kinds = self._kinds
        lines = range(len(kinds))
        visible = kinds.tobytes().translate(self._visible_table())
        if self._filtering():
            k = len(kinds)
            self._rows = array("i", (line for line in self._matches if line < k and visible[line]))
            self._hidden = array("i")
        else:
            self._rows = array("i")
            self._hidden = array("i", compress(lines, visible.translate(_NOT)))
        self.version += 1

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()
                os.close(self._rfd)


_ERROR_TABLE = bytes(1 if code in _ERROR_CODES else 0 for code in range(256))
#: bytes.translate tables over 0/1 flags: _NOT swaps them.
_NOT = bytes([1, 0]) + bytes(254)
