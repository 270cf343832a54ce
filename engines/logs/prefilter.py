"""Which lines of a chunk are worth the analyzer's attention, found in C-speed passes over the text.

A serving log is mostly lines that move nothing (access logs, chatter, request dumps). The analyzer
handles a line in Python only when one of its grammar's needles starts a message (after ``] ``, a
process prefix ``) ``, a line start or a ``\\r``), when an exception-like word starts a line, or when
an "anywhere" marker (a traceback header, a ``File "`` frame, a few fatal phrases) is in it. The
same predicate is used line by line (:meth:`Prefilter.matches`) and over a whole chunk
(:meth:`Prefilter.line_starts`), so the answer never depends on how the bytes were chunked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["Prefilter"]

#: An exception-like word: the whole dotted word is taken at once (possessive, no backtracking over
#: it at every line start), then its ending is checked.
_EXC = r"[A-Za-z_](?:\w|\.(?=\w))*+(?:(?<=Error)|(?<=Exception)|(?<=Exit)|(?<=Interrupt)|(?<=Failure))\b"


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


class Prefilter:
    """Built once per grammar from its needles (message starts) and its anywhere-markers."""

    def __init__(self, needles: Iterable[str], anywhere: Iterable[str]) -> None:
        body = r"(?:\^M|`)?(?:" + _trie_alternation(needles) + "|" + _EXC + ")"
        # Where a message starts: after a logger header "] ", after a process prefix "(X pid=N) ",
        # at a line start or after a \r. One regex per anchor, each starting with a literal, so the
        # regex engine skips ahead in C between candidates.
        self._rxs = (
            re.compile(r"\] " + body),
            re.compile(r"pid=\d+(?:, ip=[\d.]+)?\) " + body),
            re.compile(r"\n" + body),
            re.compile(r"\r" + body),
        )
        self._anywhere = tuple(dict.fromkeys(anywhere))

    def matches(self, line: str) -> bool:
        """One line (or one ``\\r`` segment) without its newline."""
        src = "\n" + line
        for rx in self._rxs:
            if rx.search(src) is not None:
                return True
        for a in self._anywhere:
            if a in line:
                return True
        return False

    def line_starts(self, text: str) -> list[int]:
        """Sorted offsets of the starts of lines in ``text`` (lines end with ``\\n``) that match."""
        starts: set[int] = set()
        rfind = text.rfind
        src = "\n" + text
        starts.update(m.start() for m in self._rxs[2].finditer(src))  # "\n" at src[k] starts text[k:]
        for rx in (self._rxs[0], self._rxs[1], self._rxs[3]):
            for m in rx.finditer(src):
                starts.add(rfind("\n", 0, m.start() - 1) + 1)
        find = text.find
        for a in self._anywhere:
            i = find(a)
            while i != -1:
                s = rfind("\n", 0, i) + 1
                starts.add(s)
                e = find("\n", i)
                if e == -1:
                    break
                i = find(a, e)
        return sorted(starts)
