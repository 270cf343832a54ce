"""Median, MAD, percentiles and the unstable flag."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.engines.probe import stats


def test_median_and_mad() -> None:
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([4, 1, 3, 2]) == 2.5
    assert stats.mad([1, 2, 3, 4, 100]) == 1  # one outlier does not move it
    assert math.isnan(stats.median([]))


def test_percentile_interpolates_like_numpy() -> None:
    xs = [10.0, 20.0, 30.0, 40.0]
    assert stats.percentile(xs, 50) == 25.0
    assert stats.percentile(xs, 99) == 39.7
    assert stats.percentile(xs, 0) == 10.0
    assert stats.percentile(xs, 100) == 40.0


def test_unstable_when_mad_exceeds_ten_percent() -> None:
    assert not stats.summarise([100, 105, 95]).unstable  # MAD 5 = 5 %
    fig = stats.summarise([100, 125, 75])  # MAD 25 = 25 %
    assert fig.unstable and fig.median == 100 and fig.mad == 25 and fig.n == 3
    assert not stats.summarise([0, 0, 0]).unstable
    assert stats.summarise([]).n == 0


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=30))
def test_median_lies_within_range_and_half_the_values_within_one_mad(xs: list[float]) -> None:
    m = stats.median(xs)
    assert min(xs) <= m <= max(xs)
    d = stats.mad(xs)
    assert 0 <= d <= max(xs) - min(xs)
    # The MAD is the median distance to the median: at least half the values lie within it.
    slack = 1e-9 * (1 + abs(m) + d)
    assert 2 * sum(1 for x in xs if abs(x - m) <= d + slack) >= len(xs)
    assert stats.mad([x + 1000.0 for x in xs]) == pytest.approx(d, abs=1e-6 * (1 + d))  # a shift does not move it
