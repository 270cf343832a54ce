"""Robust statistics over repeats: median, MAD and an 'unstable' flag, plus percentiles.

The probe repeats its whole prompt set (3 times by default); one slow repeat (a compaction, a
noisy neighbour) must not move the figure, hence the median, and the MAD says how far to trust it.
The 10 % rule follows vLLM's ``tune_speculative_k``: a figure whose MAD exceeds 10 % of its
median is not stable enough to decide on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servelab.engines.adapters.exchange import AsDict
#: MAD / |median| above this marks a figure unstable.
UNSTABLE_RATIO = 0.10
#: Scales a MAD to a normal standard deviation (used for noise bands).
MAD_TO_SIGMA = 1.4826


def median(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    mid = len(s) // 2
    return float(s[mid]) if len(s) % 2 else (s[mid - 1] + s[mid]) / 2.0


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    if not values:
        return math.nan
    m = median(values)
    return median([abs(v - m) for v in values])


def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default method), p in [0, 100]."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * p / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(s[lo] + (s[hi] - s[lo]) * (pos - lo))


def mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else math.nan


@dataclass(frozen=True)
class Figure(AsDict):
    """One figure over repeats."""

    median: float
    mad: float
    n: int
    unstable: bool


def summarise(values: Sequence[float]) -> Figure:
    """Median, MAD, count and the unstable flag of one figure's values across repeats."""
    vals = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return Figure(math.nan, math.nan, 0, False)
    m, d = median(vals), mad(vals)
    unstable = d > UNSTABLE_RATIO * abs(m) if m != 0 else d > 0
    return Figure(m, d, len(vals), unstable)
