"""A whole log analysed at once: a saved file or bytes in memory, the engine guessed when not given.

``servelab analyze`` and the tests start here; a live run's log is followed incrementally by
:mod:`servelab.engines.logs.live` instead.
"""

from __future__ import annotations

from pathlib import Path

from servelab.engines.adapters.base import all_adapters, get_adapter
from servelab.engines.logs.analyzer import LogAnalyzer
from servelab.engines.logs.grammar import LogGrammar
from servelab.engines.logs.analysis import Analysis

__all__ = ["CHUNK", "analyze_bytes", "analyze_file", "guess_engine"]

def guess_engine(head: bytes) -> str:
    """The engine whose adapter's ``log_signatures`` occur most often in ``head``."""
    text = head.decode("utf-8", "replace")
    best, best_score = "", -1
    for adapter in all_adapters():
        score = sum(text.count(sig) for sig in adapter.log_signatures)
        if score > best_score:
            best, best_score = adapter.name, score
    return best


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
