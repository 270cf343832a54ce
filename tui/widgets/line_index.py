"""A log spooled to a local file plus a compact line index: the data behind :class:`LogView`.

Holding a multi-hour log as widgets or rich text costs kilobytes per line (see the TUI notes);
here a line costs the low 4 bytes of its offset and a kind byte (typed arrays, no Python object
per line; a row slot only for the few hidden lines), and its text is read back from the spool file
only when it is on screen. Textual-free, so it can be tested and benchmarked alone; what a line
*is* (its kind) is the core's :mod:`engines.logs.classify`.

Two steps per chunk, so the cheap one never waits for the dear one:
- *offsets* (:meth:`LineIndex.append`): the chunk goes to the spool and its line starts are found
  with C-level primitives (``bytes.split`` + ``itertools.accumulate`` into an ``array``), about
  0.5 µs a line. Also where a view shows a long log's end before the rest is read. From then on every line can be shown and jumped to.
- *kinds* (:class:`~engines.logs.classify.LineClassifier`, the core's): each line's kind (colour,
  noise folding, errors) and the progress-bar collapsing. Inline by default; with ``deferred=True``
  the owner classifies in another process (:mod:`engines.logs.ingest`, started by
  :mod:`tui.widgets.log_ingest`) and hands the result to :meth:`LineIndex.apply`.
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
from itertools import accumulate, compress, repeat
from operator import add
from pathlib import Path

from servelab.engines.logs.classify import ERROR_CODES, KINDS, NOISE_CODES, SUPERSEDED, Classified, LineClassifier, display_text
from servelab.engines.logs.lines import LineKind, classify

#: Line starts are kept as their low ``_OFFSET_BITS`` bits (4 bytes a line); the lines where the
#: high part steps up (every 4 GiB of spool) are listed apart.
_OFFSET_BITS = 32
_READ_BLOCK = 1 << 22
#: Display texts kept (a few screens' worth; the view keeps its own rendered lines besides).
TEXT_CACHE_LINES = 512


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
            return KINDS[self._kinds[line] & ~SUPERSEDED]

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
                self._kinds[old] |= SUPERSEDED
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
            if not (self.fold_noise and code in NOISE_CODES):
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


_ERROR_TABLE = bytes(1 if code in ERROR_CODES else 0 for code in range(256))
#: bytes.translate tables over 0/1 flags: _NOT swaps them.
_NOT = bytes([1, 0]) + bytes(254)
