"""Physical lines that are not one record: one too long to hold, and records glued into one.

A line longer than :data:`MAX_LINE` is read as several of that size. Records glued into one line: a
paste or a relay that lost its newlines.

``... in __init__ ERROR 11-04 18:02:56 [multiproc_executor.py:597] self.all_reduce(data) ERROR 11-04
18:02:56 [multiproc_executor.py:597] File "...", line 162, in all_reduce ERROR 11-04 ...`` is a dozen
records of one traceback, each behind the engine's own dated header, with a space where each newline
was. A line that holds two or more of the engine's dated headers (its grammar's ``relogged_starts``:
the headers that carry a time) is read as its records: split before every header after the first
(what stands before the first header stays with it, as a capture prefix or a process tag would). Only
long lines are looked at: a record glued to another is longer than any header.
"""

from __future__ import annotations

import re

from servelab.engines.logs.grammar import LogGrammar

__all__ = ["GLUED_MIN", "MAX_LINE", "OTHER_LEADS", "OTHER_RECORD", "Unglue", "cut_long_lines", "has_long_line"]

#: A physical line longer than this is read as several lines of this size (memory stays bounded
#: on a log with no newline at all). The cut points depend on the bytes only, not on the chunking.
MAX_LINE = 1 << 20


def has_long_line(buf: bytes, start: int = 0) -> bool:
    """True when some line of ``buf[start:]`` is longer than MAX_LINE: a few C-speed ``rfind`` hops of up
    to MAX_LINE bytes each (splitting the chunk into lines only to measure them cost more than reading it)."""
    pos, n = start, len(buf)
    while n - pos > MAX_LINE:
        nl = buf.rfind(b"\n", pos, pos + MAX_LINE + 1)
        if nl == -1:
            return True
        pos = nl + 1
    return False


def cut_long_lines(buf: bytes) -> bytes:
    parts = buf.split(b"\n")
    for i, p in enumerate(parts):
        if len(p) > MAX_LINE:
            parts[i] = b"\n".join(p[j : j + MAX_LINE] for j in range(0, len(p), MAX_LINE))
    return b"\n".join(parts)


#: Lines shorter than this are not read as several records (two headers and two short records are longer).
GLUED_MIN = 240
#: A record of another formatter (uvicorn's, Python logging's default "LEVEL:name:msg"): one engine header
#: after its start is a record glued to it, whatever the line's length.
#: (behind a rank's or a process's tag: "[rank0]:INFO:     ...")
#: (``OTHER_LEADS``: what such a line starts with, tested first: a C-speed ``startswith`` on every line read)
OTHER_LEADS = ("INFO:", "WARNING:", "ERROR:", "CRITICAL:", "DEBUG:", "[rank", "(")
OTHER_RECORD = re.compile(r"(?:\[rank\d+\]:|\([^()]{0,80}pid=\d+[^()]{0,80}\) )?(?:INFO|WARNING|ERROR|CRITICAL|DEBUG):")


#: The time every dated header holds. Its literal start lets ``re`` skip to each colon, where the
#: header search below tries every space: two of these are looked for first (13x cheaper on long lines).
_TIME = r":\d\d:\d\d"
_TIMES = re.compile(_TIME)


class Unglue:
    """Splits a line into the records glued in it, by one engine's dated headers."""

    __slots__ = ("_heads", "_timed")

    def __init__(self, grammar: LogGrammar) -> None:
        heads = [p.decode() for p in grammar.relogged_starts]
        self._heads = re.compile(r"(?:^| )(?=" + "|".join(heads) + ")") if heads else None
        #: every header holds a time: a line with fewer than two holds fewer than two headers
        self._timed = bool(heads) and all(_TIME in h for h in heads)

    def split(self, line: str) -> list[str] | None:
        """The records of ``line``, or None when it is one."""
        if self._heads is None:
            return None
        if line.startswith(OTHER_LEADS) and OTHER_RECORD.match(line) is not None:
            # another formatter's record (uvicorn's "INFO:     1.2.3.4:5 - ... 500") with the engine's
            # dated record glued after it: one header is enough (what stands before it is a record)
            at = [m.start() for m in self._heads.finditer(line, 1)]
            if at:
                at.insert(0, 0)
        elif len(line) < GLUED_MIN or line.count(":") < 4:  # (two stamps hold four)
            return None
        elif self._timed and ((first := _TIMES.search(line)) is None or _TIMES.search(line, first.end()) is None):
            return None
        else:
            at = [m.start() for m in self._heads.finditer(line)]
        if len(at) < 2:
            return None
        cuts = [0, *at[1:], len(line)]
        return [line[a:b].strip(" ") for a, b in zip(cuts, cuts[1:]) if line[a:b].strip(" ")]
