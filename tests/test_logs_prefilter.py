"""The prefilter's three readings agree: Hyperscan over a chunk, ``re`` over a chunk, ``re`` line by line.

The analyzer takes the chunk scan's word for which lines to read and the per-line test for ``\\r``
segments and viewer-fed lines: if the two disagreed, the answer would depend on the chunking.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from servelab.engines.adapters.base import get_adapter
from servelab.engines.logs import prefilter
from servelab.engines.logs.analyzer import LogAnalyzer
from servelab.engines.logs.classify import ANCHOR_SOURCES, anchor_ends_find
from tests.conftest import SHARED_LOGS

DATA = Path(__file__).resolve().parent / "data" / "logs"
ALL_LOGS = sorted(DATA.glob("*.log")) + sorted(SHARED_LOGS.glob("*.log"))


def _per_line(pre: prefilter.Prefilter, text: str) -> list[int]:
    out, at = [], 0
    for line in text.split("\n")[:-1]:
        if pre.matches(line):
            out.append(at)
        at += len(line) + 1
    return out


def _texts() -> list[str]:
    texts = [p.read_bytes().decode("utf-8", "replace") for p in ALL_LOGS]
    pool = "".join(t if t.endswith("\n") else t + "\n" for t in texts).split("\n")
    rnd = random.Random(11)
    texts += ["\n".join(rnd.choice(pool) for _ in range(400)) + "\n" for _ in range(40)]
    # an exception word, a needle and a frame on lines with non-ASCII text (byte and char offsets differ)
    texts.append(
        "héllo — wörld\nValueError: ünïcode\n(EngineCore pid=3) RuntimeError: x\n  File \"/ä.py\", line 1\nplain ü\n"
        "ÄKeyError: no\nKeyErrorÄ: yes\nfoo.Ä: no\n(Wörker pid=4) ValueError: yes\nx] Loading weights tookä\n"
    )
    return [t if t.endswith("\n") else t + "\n" for t in texts]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("late", [True, False], ids=["starting", "up"])
def test_hyperscan_re_and_per_line_agree_on_real_lines(engine: str, late: bool) -> None:
    """``line_starts`` is Hyperscan's answer (the dependency), ``re``'s where it is not installed."""
    pre = LogAnalyzer(get_adapter(engine).grammar)._pre
    pre.optional_on = late
    found = 0
    for text in _texts():
        want = _per_line(pre, text)
        assert pre._re_line_starts(text) == want
        assert pre.line_starts(text) == want
        # the analyzer's reading: the raw UTF-8 bytes, byte offsets of the same lines
        data = text.encode()
        want_b = [len(text[:i].encode()) for i in want]
        assert pre.byte_line_starts(data) == want_b
        assert pre._re_byte_line_starts(data) == want_b
        # a window of whole lines (a chunk read in place) finds the lines inside it, whatever is around
        starts = [0] + [i + 1 for i, c in enumerate(data) if c == 10]
        a, b = starts[len(starts) // 4], starts[3 * len(starts) // 4]
        assert pre.byte_line_starts(data, a, b) == [i for i in want_b if a <= i < b]
        found += len(want)
    assert found > 1000  # the logs do have lines that matter


def test_needles_count_only_where_a_message_starts() -> None:
    pre = prefilter.Prefilter(["Loading weights took"], ['File "'])
    text = (
        "(Worker pid=7) INFO 01-02 03:04:05 [loader.py:1] Loading weights took 1.0 s\n"  # after "] "
        "chatter that mentions Loading weights took in passing\n"  # not a message start
        "(EngineCore pid=12, ip=10.0.0.1) Loading weights took 2 s\n"  # after a process prefix
        "x\r`Loading weights took 3 s`\n"  # after a \r, inside backticks
        "someErrors: no\n"  # the word goes on past "Error"
        "a.b.KeyError: 'w'\n"  # a dotted exception word
        "torch.Error.more: no\n"  # the dotted word goes on
        'nothing "File here\n'
        '    File "/x.py", line 3\n'
    )
    want = [0, text.index("(EngineCore"), text.index("x\r"), text.index("a.b."), text.index('    File "')]
    assert _per_line(pre, text) == want
    assert pre.line_starts(text) == want


def _lines_of(data: bytes, ends: list[int]) -> set[int]:
    """The starts of the lines that the offsets just past a match fall in."""
    return {data.rfind(b"\n", 0, e - 1) + 1 for e in ends}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("late", [True, False], ids=["starting", "up"])
def test_one_database_for_the_analyzer_and_the_classifier_answers_as_each_alone(engine: str, late: bool) -> None:
    """The analyzer's patterns and the line classifier's anchors in one database (the ingest worker's):
    one pass gives the prefilter's lines as ``re`` finds them line by line, and the anchors' lines as
    one ``bytes.find`` per anchor finds them; the prefilter's own scans ignore the anchors' matches.
    (Without Hyperscan nothing is shared: each reader scans on its own, as tested above.)"""
    assert prefilter.HYPERSCAN, "hyperscan is a dependency: the shared database must be the one tested"
    pre = LogAnalyzer(get_adapter(engine).grammar).prefilter
    pre.share(ANCHOR_SOURCES)
    pre.optional_on = late
    found = anchored = 0
    for text in _texts():
        data = text.encode()
        want_b = [len(text[: i].encode()) for i in _per_line(pre, text)]
        assert pre._re_byte_line_starts(data) == want_b
        starts, ends = pre.shared_scan(data)
        assert starts == prefilter.LineStarts(want_b, late)
        assert pre.byte_line_starts(data) == want_b
        assert pre.line_starts(text) == _per_line(pre, text)
        assert ends == sorted(ends) and len(_lines_of(data, ends)) == len(ends)  # one end per line, in order
        assert _lines_of(data, ends) == _lines_of(data, anchor_ends_find(data))
        found += len(want_b)
        anchored += len(ends)
    assert found > 1000 and anchored > 1000
