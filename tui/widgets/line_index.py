"""A log spooled to a local file plus a compact line index: the data behind :class:`LogView`.

Holding a multi-hour log as widgets or rich text costs kilobytes per line (see the TUI notes);
here a line costs a byte offset, a kind byte and a row slot, and its text is read back from the
spool file only when it is on screen. Textual-free, so it can be tested and benchmarked alone.

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
from pathlib import Path

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


class LineIndex:
    """Append-only spool + index. Thread-safe: a worker appends while the UI reads."""

    def __init__(self, spool: Path, *, fold_noise: bool = True) -> None:
        self.spool = Path(spool)
        self.spool.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.spool, "ab")  # noqa: SIM115 - closed in close()
        self._rfd = os.open(self.spool, os.O_RDONLY)
        self._lock = threading.RLock()
        self._starts = array("q")  # byte offset of each complete line
        self._kinds = array("B")
        self._rows = array("i")  # visible line numbers, ascending
        self._matches = array("i")  # lines matching the search, ascending
        self._errors = array("i")
        self._size = 0  # bytes spooled
        self._tail_start = 0  # offset of the unfinished last line
        self._cache: OrderedDict[int, str] = OrderedDict()
        self.max_width = 0
        self.fold_noise = fold_noise
        self.filter = False
        self.search: re.Pattern[str] | None = None
        self.version = 0  # bumped on every change a view must repaint for
        self._bar: str | None = None
        self._bar_line = -1
        self._bar_blanks: list[int] = []

    # -- reading ---------------------------------------------------------------------------------
    @property
    def line_count(self) -> int:
        """Complete lines (the unfinished tail is not counted)."""
        return len(self._starts)

    @property
    def row_count(self) -> int:
        """Rows a view shows: visible lines, plus the unfinished tail while it has text."""
        with self._lock:
            return len(self._rows) + (1 if self._tail_visible() else 0)

    @property
    def size(self) -> int:
        return self._size

    def line_at_row(self, row: int) -> int:
        with self._lock:
            if row < len(self._rows):
                return self._rows[row]
            return len(self._starts)  # the tail

    def row_of_line(self, line: int) -> int:
        """The row showing ``line``, or the nearest row after it."""
        with self._lock:
            return bisect_left(self._rows, line)

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
    def matches(self) -> array:
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

    def _read(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        return os.pread(self._rfd, end - start, start)

    def _tail_visible(self) -> bool:
        if self._size <= self._tail_start:
            return False
        if self.filter and self.search is not None:
            return bool(self.search.search(self.text(len(self._starts))))
        return True

    # -- writing ---------------------------------------------------------------------------------
    def append(self, data: bytes) -> int:
        """Spool a chunk and index its complete lines; returns how many rows were added (net)."""
        if not data:
            return 0
        with self._lock:
            rows_before = len(self._rows)
            self._file.write(data)
            self._file.flush()
            base = self._size
            self._size += len(data)
            pos = data.find(b"\n")
            if pos < 0:
                self.version += 1
                return 0
            # The first complete line may have started in an earlier chunk.
            head = self._read(self._tail_start, base) if self._tail_start < base else b""
            line_start = self._tail_start
            first = head + data[:pos]
            self._add_line(line_start, first)
            offset = pos + 1
            find = data.find
            while True:
                nxt = find(b"\n", offset)
                if nxt < 0:
                    break
                self._add_line(base + offset, data[offset:nxt])
                offset = nxt + 1
            self._tail_start = base + offset
            self.version += 1
            return len(self._rows) - rows_before

    def _add_line(self, start: int, raw: bytes) -> None:
        line = len(self._starts)
        self._starts.append(start)
        if b"\r" in raw or b"\x1b" in raw or b"\t" in raw:
            text = display_text(raw)
        else:
            text = raw.decode("utf-8", "replace")
        kind = classify(text)
        code = _CODE[kind]
        self._kinds.append(code)
        if len(text) > self.max_width:
            self.max_width = len(text)
        if code in _ERROR_CODES:
            self._errors.append(line)
        matched = self.search is not None and self.search.search(text) is not None
        if matched:
            self._matches.append(line)
        if code == _PROGRESS or self._bar is not None:
            self._collapse(line, code, text)
        if self._visible(line, code, matched):
            self._rows.append(line)

    def _collapse(self, line: int, code: int, text: str) -> None:
        """Hide the previous update of the same progress bar (and the blank prefix lines after it)."""
        if code == _PROGRESS:
            key = _bar_key(text)
            if key is not None and key == self._bar and self._bar_line >= 0:
                for old in (self._bar_line, *self._bar_blanks):
                    self._kinds[old] |= _SUPERSEDED
                hidden = {self._bar_line, *self._bar_blanks}
                while self._rows and self._rows[-1] in hidden:
                    self._rows.pop()
            self._bar, self._bar_line, self._bar_blanks = key, line, []
        elif code == _INFO and self._bar is not None and not _PREFIX.sub("", text).strip():
            self._bar_blanks.append(line)
        else:
            self._bar, self._bar_line, self._bar_blanks = None, -1, []

    def _visible(self, line: int, code: int, matched: bool) -> bool:
        if code & _SUPERSEDED:
            return False
        if self.fold_noise and code in _NOISE_CODES:
            return False
        if self.filter and self.search is not None and not matched:
            return False
        return True

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

    def _iter_raw_lines(self):  # type: ignore[no-untyped-def]
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
        rows = array("i")
        append = rows.append
        kinds = self._kinds
        fold = self.fold_noise
        if self.filter and self.search is not None:
            for line in self._matches:
                code = kinds[line]
                if not code & _SUPERSEDED and not (fold and code in _NOISE_CODES):
                    append(line)
        else:
            hidden = set(_NOISE_CODES) if fold else set()
            hidden |= {c | _SUPERSEDED for c in range(len(KINDS))}
            for line, code in enumerate(kinds):
                if code not in hidden:
                    append(line)
        self._rows = rows
        self.version += 1

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()
                os.close(self._rfd)
