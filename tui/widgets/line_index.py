"""A log spooled to a local file plus a compact line index: the data behind :class:`LogView`.

Holding a multi-hour log as widgets or rich text costs kilobytes per line (see the TUI notes);
here a line costs a byte offset, a kind byte and a row slot (typed arrays, no Python object per
line), and its text is read back from the spool file only when it is on screen. Textual-free, so
it can be tested and benchmarked alone, and run in the ingest worker process.

Two steps per chunk, so the cheap one never waits for the dear one:
- *offsets* (:meth:`LineIndex.append`): the chunk goes to the spool and its line starts are found
  with C-level primitives (``bytes.split`` + ``itertools.accumulate`` into an ``array``), about
  0.5 µs a line. From then on every line can be shown and jumped to.
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
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate, compress, repeat
from operator import add
from pathlib import Path

from engines.logs import lines as _lines
from engines.logs.lines import LineKind, classify, strip_ansi

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

    __slots__ = ("_bar", "_bar_line", "_bar_blanks", "next_line")

    def __init__(self) -> None:
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
        special: set[int] = set()
        find = block.find
        for anchor in ANCHORS:
            pos = find(anchor)
            while pos >= 0:
                i = bisect_left(ends, pos)
                special.add(i)
                pos = find(anchor, ends[i] + 1)
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
        self._starts = array("q")  # byte offset of each complete line
        self._kinds = array("B")  # code of each classified line (the first len(_kinds) lines)
        self._rows = array("i")  # visible classified lines, ascending
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
            return self._starts[k] if k < len(self._starts) else self._tail_start

    @property
    def max_width(self) -> int:
        return max(self._width, self._pending_width) if self.unclassified else self._width

    @property
    def row_count(self) -> int:
        """Rows a view shows: visible lines, plus the unfinished tail while it has text."""
        with self._lock:
            return len(self._rows) + self._pending_count() + (1 if self._tail_visible() else 0)

    @property
    def size(self) -> int:
        return self._size

    @property
    def tail_start(self) -> int:
        """Spool offset where the unfinished last line starts (all before it is whole lines)."""
        return self._tail_start

    def line_at_row(self, row: int) -> int:
        with self._lock:
            if row < len(self._rows):
                return self._rows[row]
            row -= len(self._rows)
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
                return bisect_left(self._rows, line)
            if self._filtering():
                m0 = bisect_left(self._matches, k)
                return len(self._rows) + bisect_left(self._matches, line) - m0
            return len(self._rows) + line - k

    def text(self, line: int) -> str:
        """Display text of a line (the tail when ``line == line_count``)."""
        with self._lock:
            if line >= len(self._starts):
                return display_text(self._read(self._tail_start, self._size))
            cached = self._cache.get(line)
            if cached is not None:
                self._cache.move_to_end(line)
                return cached
            start = self._starts[line]
            end = self._starts[line + 1] - 1 if line + 1 < len(self._starts) else self._tail_start - 1
            text = display_text(self._read(start, end))
            self._cache[line] = text
            if len(self._cache) > 4096:
                self._cache.popitem(last=False)
            return text

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
            self._starts.append(self._tail_start)
            starts = accumulate(map(add, map(len, parts), repeat(1)), initial=base)
            next(starts)  # == base: the old tail's continuation, already counted
            self._starts.extend(starts)
            self._starts.pop()  # the last accumulated value is the start of the new tail
            self._tail_start = base + cut + 1
            widest = max(map(len, parts))
            if widest > self._pending_width:
                self._pending_width = min(widest, 1 << 16)
            if self.search is not None:
                self._match_new(first_line)
            if not self.deferred:
                self._apply(self._classifier.classify(self._read(self._starts[first_line], self._tail_start)))
            self.version += 1
            return self._row_total() - rows_before

    def _row_total(self) -> int:
        return len(self._rows) + self._pending_count()

    def _match_new(self, first_line: int) -> None:
        search = self.search
        assert search is not None
        append = self._matches.append
        for offset, line in enumerate(self._iter_lines(first_line, self._tail_start)):
            if search.search(line):
                append(first_line + offset)

    def _iter_lines(self, first_line: int, end: int) -> Iterator[str]:
        block = self._read(self._starts[first_line], end)
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
        if c.hidden_before:
            hidden = set(c.hidden_before)
            for old in hidden:
                self._kinds[old] |= _SUPERSEDED
            while self._rows and self._rows[-1] in hidden:
                self._rows.pop()
        self._kinds.frombytes(codes)
        lines = range(first, first + len(codes))
        visible = codes.translate(self._visible_table())
        if self._filtering():
            m = self._matches
            matched = set(m[bisect_left(m, first) : bisect_left(m, first + len(codes))])
            self._rows.extend(line for line in compress(lines, visible) if line in matched)
        else:
            self._rows.extend(compress(lines, visible))
        for i in compress(lines, codes.translate(_ERROR_TABLE)):
            self._errors.append(i)
        if c.width > self._width:
            self._width = c.width
        if len(self._kinds) == len(self._starts):
            self._pending_width = 0

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
        else:
            self._rows = array("i", compress(lines, visible))
        self.version += 1

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()
                os.close(self._rfd)


_ERROR_TABLE = bytes(1 if code in _ERROR_CODES else 0 for code in range(256))
