"""A whole log analysed at once: a saved file or bytes in memory, the engine guessed when not given.

``servelab analyze`` and the tests start here; a live run's log is followed incrementally by
:mod:`servelab.engines.logs.live` instead.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from servelab.engines.adapters.base import all_adapters, get_adapter
from servelab.engines.logs.analyzer import LogAnalyzer
from servelab.engines.logs.grammar import LogGrammar
from servelab.engines.logs.analysis import Analysis

__all__ = ["CHUNK", "analyze_bytes", "analyze_file", "guess_engine"]

def guess_engine(head: bytes) -> str:
    """The engine whose adapter's ``log_signatures`` occur most often in ``head``, each line in its own
    dated header counting twice: the writer's own header outweighs the tag of a process that relays it
    ("(APIServer pid=7) (SGLangEngine pid=9) [2026-03-22 13:53:42 TP0] Decode batch ...")."""
    text = head.decode("utf-8", "replace")
    lines = head.splitlines()
    best, best_score = "", -1
    for adapter in all_adapters():
        score = sum(text.count(sig) for sig in adapter.log_signatures) + 2 * _header_lines(adapter.grammar, lines)
        if score > best_score:
            best, best_score = adapter.name, score
    return best


@functools.lru_cache(maxsize=8)
def _headers(starts: tuple[bytes, ...]) -> re.Pattern[bytes] | None:
    return re.compile(b"|".join(starts)) if starts else None


def _header_lines(grammar: LogGrammar, lines: list[bytes]) -> int:
    """How many of ``lines`` hold one of the grammar's own dated headers."""
    rx = _headers(grammar.relogged_starts)
    return 0 if rx is None else sum(1 for line in lines if rx.search(line))


def _grammar(engine: str) -> LogGrammar:
    grammar: LogGrammar = get_adapter(engine).grammar
    return grammar


def analyze_bytes(data: bytes, engine: str | None = None) -> Analysis:
    """Post-mortem of a whole log held in memory."""
    an = LogAnalyzer(_grammar(engine or guess_engine(data[:65536])))
    an.feed(data)
    an.finish()
    return an.snapshot()


#: Bytes read at a time: big enough that a long serving log's figures lines are mostly found and
#: dropped in C (only a chunk's newest can stay in a series), small enough to keep memory flat.
CHUNK = 8 << 20


def analyze_file(path: str | Path, engine: str | None = None) -> Analysis:
    """Post-mortem of a saved log, read in CHUNK-sized pieces (memory does not grow with the file)."""
    p = Path(path)
    with p.open("rb") as f:
        head = f.read(65536)
        an = LogAnalyzer(_grammar(engine or guess_engine(head)))
        an.feed(head)
        while chunk := f.read(CHUNK):
            an.feed(chunk)
    an.finish()
    return an.snapshot()
