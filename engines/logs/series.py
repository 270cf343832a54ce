"""Figures over time: bounded series of the periodic figures lines, read only when asked for.

A long serving log is mostly figures lines (throughput, speculative-decoding acceptance). A
:class:`Series` keeps the newest of them as raw text and parses them at snapshot time;
:func:`spec_figures` and :func:`throughput_point` read one matched line into its values.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from servelab.engines.logs.grammar import Header
from servelab.engines.logs.rules import Rule, to_number
from servelab.engines.logs.analysis import SpecFigures, SpecPoint, ThroughputPoint

__all__ = ["SERIES_POINTS", "Raw", "Read", "Series", "spec_figures", "spec_point", "throughput_point"]

#: Points kept in each time series (the newest win).
SERIES_POINTS = 4096

P = TypeVar("P")
#: A figures line as seen: (line number, the line's text, the rule it matched).
Raw = tuple[int, str, Rule]
#: A figures line read: (its timestamp, line number, the rule's match).
Read = tuple[str | None, int, "re.Match[str]"]


class Series(Generic[P]):
    """A bounded time series kept as raw lines and read only when asked for.

    Periodic figures lines are most of a long serving log: keeping the newest lines is all a line
    costs, and ``snapshot()`` parses only the lines added since the previous call (a line that does
    not parse after all is dropped then).
    """

    def __init__(self, parse: Callable[[str], Header], convert: Callable[[Read], P]) -> None:
        self._parse = parse
        self._convert = convert
        self._raw: deque[Raw] = deque(maxlen=SERIES_POINTS)
        self._points: deque[P] = deque(maxlen=SERIES_POINTS)
        self._added = 0
        self._converted = 0
        self._last: Read | None = None

    def add(self, raw: Raw) -> None:
        self._raw.append(raw)
        self._added += 1

    def read(self, raw: Raw) -> Read | None:
        """(timestamp, line, match) of one kept line, None when its message is not the rule's."""
        number, text, rule = raw
        hdr = self._parse(text.strip("`") if text[:1] == "`" else text)
        msg = hdr[3][2:] if hdr[3][:2] == "^M" else hdr[3]
        if not msg.startswith(rule.needle) or rule.regex is None:
            return None
        m = rule.regex.search(msg)
        return (hdr[2] or None, number, m) if m is not None else None

    def _catch_up(self) -> None:
        new = min(self._added - self._converted, SERIES_POINTS)
        if new:
            for raw in list(self._raw)[-new:]:
                read = self.read(raw)
                if read is not None:
                    self._points.append(self._convert(read))
                    self._last = read
            self._converted = self._added

    def points(self) -> list[P]:
        self._catch_up()
        return list(self._points)

    @property
    def last(self) -> Read | None:
        """The newest line that parsed."""
        self._catch_up()
        return self._last


def spec_figures(m: re.Match[str], settings: Mapping[str, float]) -> SpecFigures:
    """A spec-decode figures line's values; ``settings`` (the engine's printed ``num_steps``) lets
    an acceptance rate be recomputed from the mean acceptance length."""
    gd = m.groupdict()
    mal = to_number(gd.get("mal"))
    rate: float | None = None
    if gd.get("rate_pct") is not None:
        pct = to_number(gd["rate_pct"])
        rate = pct / 100.0 if pct is not None else None
    else:
        steps = settings.get("num_steps")
        if mal is not None and steps:
            rate = max(0.0, min(1.0, (mal - 1.0) / steps))
        elif gd.get("rate") is not None:
            rate = to_number(gd["rate"])
    pos = [float(x) for x in gd["pos"].replace(" ", "").split(",") if x] if gd.get("pos") else []
    return SpecFigures(rate, mal, pos)


def spec_point(raw: Read, settings: Mapping[str, float]) -> SpecPoint:
    ts, number, m = raw
    f = spec_figures(m, settings)
    return SpecPoint(ts, number, f.acceptance_rate, f.mean_acceptance_length)


def throughput_point(raw: Read) -> ThroughputPoint:
    ts, number, m = raw
    return ThroughputPoint(ts, number, to_number(m.group("gen")), to_number(m.groupdict().get("prompt")))
