"""The figures every list shows, as text (engines/runs/history.py): acceptance with its length, the
speedup with its band. Held over whole families of values: the text reads back to the figures."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from servelab.engines.runs.history import LatestRun, accept_text, speedup_text
from servelab.engines.runs.state import RunState

FIGURE = st.one_of(st.none(), st.floats(min_value=0, max_value=50, allow_nan=False))


@given(FIGURE, FIGURE)
def test_the_speedup_reads_back_with_its_band(value: float | None, band: float | None) -> None:
    text = speedup_text(value, band)
    if value is None:
        assert text == ""
        return
    m = re.fullmatch(r"(\d+\.\d\d)x(?: ±(\d+\.\d\d))?", text)
    assert m is not None, text
    assert abs(float(m.group(1)) - value) <= 0.005
    assert (m.group(2) is None) == (band is None)
    if band is not None:
        assert abs(float(m.group(2)) - band) <= 0.005
    assert LatestRun("r", RunState.READY, speedup=value, speedup_band=band).speedup_text == text


@given(FIGURE, FIGURE)
def test_acceptance_reads_back_rate_then_length(rate: float | None, length: float | None) -> None:
    text = accept_text(rate, length)
    if rate is None and length is None:
        assert text == ""
        return
    head, _, tail = text.partition(" · ")
    assert (head == "-") == (rate is None) and (tail == "") == (length is None)
    if rate is not None:
        assert head.endswith("%") and abs(float(head[:-1]) - rate) <= 0.05
    if length is not None:
        assert abs(float(tail) - length) <= 0.005
