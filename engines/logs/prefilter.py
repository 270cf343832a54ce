"""Which lines of a chunk are worth the analyzer's attention, found in C-speed passes over the text.

A serving log is mostly lines that move nothing (access logs, chatter, request dumps). The analyzer
handles a line in Python only when one of its grammar's needles starts a message (after ``] ``, a
process prefix ``) ``, a line start or a ``\\r``), when an exception-like word starts a message, or
when an "anywhere" marker (a traceback header, a ``File "`` frame, a few fatal phrases) is in it.

The predicate is written once, as regex sources both engines read the same way (ASCII classes, no
look-around): :meth:`Prefilter.matches` tests one line with ``re``; :meth:`Prefilter.line_starts`
finds the matching lines of a whole chunk with Hyperscan (all patterns in one pass over the bytes,
several times faster than one ``re`` pass per anchor) when it is installed, else with ``re``. The
answer never depends on how the bytes were chunked, nor on which engine scanned them.

A reader of the same blocks with patterns of its own (the dashboard's line classifier) can share the
one database: :meth:`Prefilter.share` compiles the prefilter's sources and the other reader's into one
(ids partitioned: the prefilter's first), and :meth:`Prefilter.shared_scan` answers both from one pass.
"""

from __future__ import annotations

import hashlib
import platform
import re
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import platformdirs

from servelab.engines.atomic_write import write_atomic

_hs: Any
try:  # a compiled multi-pattern matcher; ``re`` answers the same when it is missing
    import hyperscan as _hs
except ImportError:  # pragma: no cover - hyperscan ships wheels for the platforms servelab runs on
    _hs = None

__all__ = ["Prefilter", "HYPERSCAN", "LineStarts", "compiled_database", "new_scratch"]

#: True when chunk scans run on Hyperscan (the bench prints it).
HYPERSCAN = _hs is not None

#: An exception-like word: a dotted word (every dot followed by a word character) that ends in one of
#: the suffixes, and ends there (the next character is neither a word character nor a dot that goes on).
_EXC = (
    r"(?:[A-Za-z_](?:\w|\.\w)*\.?)?(?:Error|Exception|Exit|Interrupt|Failure)"
    r"(?:[^\w.\n]|\.[^\w\n]|\.?$)"
)
#: Where a message starts: after a logger header "] ", after a process prefix "(X pid=N) ", after
#: PyTorch's rank tag "[rank3]:", at a line start or after a \r.
_ANCHORS = (r"\] ", r"pid=\d+(?:, ip=[\d.]+)?\) ", r"rank\d+\]: ?", r"^", r"\r")


def _trie_alternation(needles: Iterable[str]) -> str:
    """Alternation grouped by first character, so the regex engine tests one char per group."""
    groups: dict[str, list[str]] = {}
    for n in sorted(set(needles), key=len, reverse=True):
        groups.setdefault(n[0], []).append(n[1:])
    parts = []
    for first, rests in sorted(groups.items()):
        alts = "|".join(re.escape(r) for r in rests)
        parts.append(f"{re.escape(first)}(?:{alts})")
    return "|".join(parts)


def _cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("servelab")) / "prefilter"


@lru_cache(maxsize=16)
def _hs_database(patterns: tuple[str, ...]) -> bytes:
    """The compiled Hyperscan database for ``patterns``, serialised.

    Compiling takes a tenth of a second or more, which every ``servelab analyze`` would pay: the
    compiled form is kept in the user's cache folder, keyed by the patterns, the Hyperscan version
    and the machine (a stale or foreign file fails to load and is compiled again). Each Prefilter
    loads its own copy, so no scratch space is shared between analyzers.
    """
    assert _hs is not None
    key = hashlib.sha256(repr((patterns, _hs.__version__, platform.machine())).encode()).hexdigest()[:32]
    path = _cache_dir() / f"{key}.hsdb"
    try:
        blob = path.read_bytes()
        _hs.loadb(blob, _hs.HS_MODE_BLOCK)
        return blob
    except (OSError, _hs.error):
        pass
    db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
    db.compile(
        expressions=[p.encode() for p in patterns],
        ids=list(range(len(patterns))),
        elements=len(patterns),
        flags=[_hs.HS_FLAG_MULTILINE] * len(patterns),
    )
    blob = bytes(_hs.dumpb(db))
    try:
        write_atomic(path, blob, durable=False)
    except OSError:
        pass  # a read-only home: compile again next time
    return blob


def compiled_database(patterns: tuple[str, ...]) -> Any:
    """A Hyperscan block-mode database of ``patterns`` (ids: their positions), compiled once and
    cached on disk like the prefilter's own (see :func:`_hs_database`); Hyperscan must be installed.

    The one way servelab builds a Hyperscan database: the viewer's line kinds
    (:mod:`engines.logs.classify`) use it too.
    """
    return _hs.loadb(_hs_database(patterns), _hs.HS_MODE_BLOCK)


def new_scratch(db: Any) -> Any:
    """Scratch space for ``db``: one per database, so no two scanners share it."""
    return _hs.Scratch(db)


_PID_END = re.compile(rb"pid=\d+(?:, ip=[\d.]+)?\) \Z", re.ASCII)
_RANK_END = re.compile(rb"rank\d+\]: ?\Z", re.ASCII)


def _anchored(data: bytes, i: int) -> bool:
    """A needle found at ``data[i:]`` starts a message: one of _ANCHORS ends at ``i``, maybe with a
    ``^M``, a backtick or Markdown's bold between (what the ``re`` patterns say, checked backwards)."""
    for e in (i, i - 1 if i >= 1 and data[i - 1 : i] == b"`" else -1, i - 2 if i >= 2 and data[i - 2 : i] in (b"^M", b"**") else -1):
        if e < 0:
            continue
        if e == 0 or data[e - 1 : e] in (b"\n", b"\r"):
            return True
        two = data[e - 2 : e] if e >= 2 else b""
        if two == b"] ":
            return True
        if two == b") " and _PID_END.search(data, data.rfind(b"\n", 0, e) + 1, e) is not None:
            return True
        if two in (b"]:", b": ") and _RANK_END.search(data, data.rfind(b"\n", 0, e) + 1, e) is not None:
            return True
    return False


@dataclass(frozen=True, slots=True)
class LineStarts:
    """What one scan of a chunk found for the prefilter: the byte offsets of the starts of its
    matching lines (sorted), and the predicate they answer (whether the optional needles counted)."""

    offsets: list[int]
    optional_on: bool


class Prefilter:
    """Built once per grammar from its needles (message starts) and its anywhere-markers.

    ``optional`` needles are matched only while :attr:`optional_on` is true: the analyzer stops
    reading access and figures lines one by one once the run is up, without compiling anew.
    """

    def __init__(self, needles: Iterable[str], anywhere: Iterable[str], optional: Iterable[str] = ()) -> None:
        prefix = r"(?:\^M|`|\*\*)?"
        always = "(?:" + _trie_alternation(needles) + "|" + _EXC + ")"
        opt = tuple(optional)
        # for ``re``: one regex per anchor, each starting with a literal (a line start is the "\n" before
        # it, over the text with a "\n" in front), so it skips ahead in C between candidates; compiled
        # only when Hyperscan is missing (compiling them costs more than a small log's analysis)
        anchors = [a if a != "^" else r"\n" for a in _ANCHORS]
        self._sources = (
            tuple(a + prefix + always for a in anchors),
            tuple(a + prefix + "(?:" + _trie_alternation(opt) + ")" for a in anchors) if opt else (),
        )
        self._compiled: tuple[tuple[re.Pattern[str], ...], tuple[re.Pattern[str], ...]] | None = None
        self._compiled_b: tuple[tuple[re.Pattern[bytes], ...], tuple[re.Pattern[bytes], ...]] | None = None
        self._anywhere = tuple(dict.fromkeys(anywhere))
        self._anywhere_b = tuple(a.encode() for a in self._anywhere)
        #: Whether the ``optional`` needles count.
        self.optional_on = bool(opt)
        self._db: Any = None  # compiled on the first scan (or shared, see :meth:`share`)
        self._hs_sources: tuple[str, ...] | None = None
        self._n_own = 0  # patterns of the database that are this prefilter's (ids 0 ..)
        self._ascii_proxy = False
        if _hs is not None:
            # Hyperscan compiles plain literals fast and anchored literal sets slowly: the needles are
            # found as literals and their anchor is checked in Python (one hit per line that has one);
            # the exception word keeps its anchors in the pattern.
            lits = tuple(dict.fromkeys([*needles, *opt]))
            self._lit_len = tuple(len(n.encode()) for n in lits)
            self._lit_late = tuple(n not in set(needles) for n in lits)
            sources = tuple(re.escape(n) for n in lits) + tuple(a + prefix + _EXC for a in _ANCHORS) + tuple(re.escape(a) for a in self._anywhere)
            self._ascii_proxy = all(x.isascii() and "?" not in x for x in (*lits, *self._anywhere))
            self._hs_sources = sources
            self._n_own = len(sources)

    @property
    def hs_sources(self) -> tuple[str, ...] | None:
        """The Hyperscan patterns of this prefilter (ids: their positions); None without Hyperscan."""
        return self._hs_sources

    def share(self, extra: tuple[str, ...]) -> None:
        """Scan from now on with one database of this prefilter's patterns and ``extra`` (ids from
        ``len(hs_sources)`` on): another reader of the same chunks gets its matches from the same
        pass (:meth:`shared_scan`); this prefilter's own answers ignore them. Hyperscan must be installed."""
        assert self._hs_sources is not None
        self._db = compiled_database(self._hs_sources + extra)
        self._db.scratch = _hs.Scratch(self._db)

    def _database(self) -> Any:
        if self._db is None:
            assert self._hs_sources is not None
            self._db = compiled_database(self._hs_sources)
            self._db.scratch = _hs.Scratch(self._db)
        return self._db

    def _regexes(self) -> tuple[re.Pattern[str], ...]:
        """The ``re`` patterns that count now (the optional ones only while they are on)."""
        if self._compiled is None:
            flags = re.ASCII | re.MULTILINE
            self._compiled = (tuple(re.compile(x, flags) for x in self._sources[0]), tuple(re.compile(x, flags) for x in self._sources[1]))
        return self._compiled[0] + self._compiled[1] if self.optional_on else self._compiled[0]

    def matches(self, line: str) -> bool:
        """One line (or one ``\\r`` segment) without its newline."""
        src = "\n" + line  # ``re``, even with Hyperscan: for one short line it answers sooner
        for rx in self._regexes():
            if rx.search(src) is not None:
                return True
        for a in self._anywhere:
            if a in line:
                return True
        return False

    def line_starts(self, text: str, ascii_bytes: bytes | None = None) -> list[int]:
        """Sorted offsets of the starts of lines in ``text`` (lines end with ``\\n``) that match.

        ``ascii_bytes``: ``text`` as ASCII bytes, when the caller has them (saves encoding it).
        """
        if self._hs_sources is None:
            return self._re_line_starts(text)
        if ascii_bytes is not None:
            return self._hs_line_starts(ascii_bytes)
        if self._ascii_proxy or text.isascii():
            # Hyperscan reads bytes. Each non-ASCII character becomes one "?": the offsets stay the
            # characters' offsets, and no pattern tells "?" from a non-ASCII character (classes are
            # ASCII; every needle and marker is ASCII without a "?", else this path is not taken).
            return self._hs_line_starts(text.encode("ascii", "replace"))
        return self._re_line_starts(text)

    def byte_line_starts(self, data: bytes, start: int = 0, stop: int | None = None) -> list[int]:
        """:meth:`line_starts` over the raw UTF-8 bytes of a chunk: byte offsets, no decoding.

        Every class is ASCII and every needle a literal, so a non-ASCII character (or a byte that
        does not decode) reads the same as one byte or several: the lines found are the lines whose
        decoded text :meth:`matches`. ``start``/``stop``: only the whole lines of ``data[start:stop]``
        count (``start`` is a line start, ``stop`` just after a newline); the bytes are not copied.
        """
        found = self._hs_line_starts(data) if self._hs_sources is not None else self._re_byte_line_starts(data)
        if start or (stop is not None and stop < len(data)):
            found = found[bisect_left(found, start) : bisect_left(found, len(data) if stop is None else stop)]
        return found

    def shared_scan(self, data: bytes) -> tuple[LineStarts, list[int]]:
        """One pass over the whole lines ``data`` for this prefilter and the reader it is shared with
        (:meth:`share`): what :meth:`byte_line_starts` finds, and for the shared patterns the end of
        the first match in each line holding one (in order). Hyperscan must be installed."""
        ends: list[int] = []
        return LineStarts(self._hs_line_starts(data, ends), self.optional_on), ends

    def _hs_line_starts(self, data: bytes, ends: list[int] | None = None) -> list[int]:
        # Matches come in order of their end: the first one in a line names the line, and the rest of
        # that line's matches are skipped with one comparison each (any order would still be right).
        # A shared pattern's match (id >= n_own) goes to ``ends``, once per line, or is ignored.
        starts: list[int] = []
        append = starts.append
        rfind = data.rfind
        find = data.find
        line = [-1, -1]  # the line of the last match: [start, end)
        unsorted = False
        n_lit = len(self._lit_len)
        lit_len = self._lit_len
        late = self._lit_late
        late_on = self.optional_on
        anchored = _anchored
        n_own = self._n_own
        other = [-1]  # the \n closing the line of the last shared match: later ones in it add nothing
        append_end = ends.append if ends is not None else None

        def on_match(pattern: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            nonlocal unsorted
            if pattern >= n_own:
                if append_end is not None and to > other[0]:
                    append_end(to)
                    e = find(b"\n", to)
                    other[0] = e if e != -1 else len(data)
                return
            if line[0] < to <= line[1]:
                return  # another match in the line just found (a match never takes a newline)
            if pattern < n_lit and ((late[pattern] and not late_on) or not anchored(data, to - lit_len[pattern])):
                return
            s = rfind(b"\n", 0, to) + 1
            e = find(b"\n", to)
            line[0], line[1] = s, e if e != -1 else len(data)
            if starts and s <= starts[-1]:
                unsorted = True
            append(s)

        self._database().scan(data, match_event_handler=on_match)
        return sorted(set(starts)) if unsorted else starts

    def _re_byte_line_starts(self, data: bytes) -> list[int]:
        if self._compiled_b is None:
            self._compiled_b = (
                tuple(re.compile(x.encode(), re.MULTILINE) for x in self._sources[0]),
                tuple(re.compile(x.encode(), re.MULTILINE) for x in self._sources[1]),
            )
        regexes = self._compiled_b[0] + self._compiled_b[1] if self.optional_on else self._compiled_b[0]
        starts: set[int] = set()
        rfind = data.rfind
        src = b"\n" + data
        for rx in regexes:
            for m in rx.finditer(src):
                starts.add(rfind(b"\n", 0, m.start()) + 1)
        find = data.find
        for a in self._anywhere_b:
            i = find(a)
            while i != -1:
                starts.add(rfind(b"\n", 0, i) + 1)
                e = find(b"\n", i)
                if e == -1:
                    break
                i = find(a, e)
        return sorted(starts)

    def _re_line_starts(self, text: str) -> list[int]:
        starts: set[int] = set()
        rfind = text.rfind
        src = "\n" + text  # a match at src[k] is at text[k - 1]: its line starts after the "\n" before text[k]
        for rx in self._regexes():
            for m in rx.finditer(src):
                starts.add(rfind("\n", 0, m.start()) + 1)
        find = text.find
        for a in self._anywhere:
            i = find(a)
            while i != -1:
                starts.add(rfind("\n", 0, i) + 1)
                e = find("\n", i)
                if e == -1:
                    break
                i = find(a, e)
        return sorted(starts)
