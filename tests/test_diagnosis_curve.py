"""The per-position curve's shape, the step-cost model and the K it recommends."""

from __future__ import annotations

import pytest

from servelab.engines.diagnosis.cost import step_cost
from servelab.engines.diagnosis.curve import estimate_by_k, read_shape, recommend_k, tokens_per_step
from servelab.engines.diagnosis.model import Arm


@pytest.mark.parametrize(
    ("curve", "shape"),
    [
        ([], "none"),
        ([0.01, 0.0, 0.0], "dead-start"),
        ([0.7, 0.3, 0.1, 0.05], "steep-fall"),
        ([0.72, 0.6, 0.5], "healthy"),
        ([1.0, 1.0, 1.0], "flat-high"),
        ([0.2, 0.02], "healthy"),  # a weak start is not 'K too high'
    ],
)
def test_shape(curve: list[float], shape: str) -> None:
    assert read_shape(curve).shape == shape


def test_tokens_per_step_counts_the_bonus_token() -> None:
    assert tokens_per_step([0.5, 0.25], 2) == pytest.approx(1.75)
    assert tokens_per_step([0.5, 0.25], 1) == pytest.approx(1.5)


def test_recommended_k_stops_where_a_draft_no_longer_pays() -> None:
    curve = [0.8, 0.5, 0.1, 0.02]
    est = estimate_by_k(curve, per_draft=0.15)
    # K=2: 2.3 / 1.3 = 1.77; K=3: 2.4 / 1.45 = 1.66: the third draft costs more than it brings.
    assert est[2] == pytest.approx(2.3 / 1.3)
    assert recommend_k(est) == 2


def test_no_k_pays_recommends_zero() -> None:
    assert recommend_k(estimate_by_k([0.0, 0.0, 0.0], per_draft=0.3)) == 0
    assert recommend_k({}) is None


def test_step_cost_estimate_next_to_the_measured_speedup() -> None:
    arm = Arm("overall", 12, 12, drafts=100, rate=0.5, length=2.5, per_position=[0.8, 0.5, 0.2], median_step_ms=15.0)
    c = step_cost(arm, 3, plain_ms=10.0, baseline_run="base-1", measured=1.6)
    assert c.ratio == pytest.approx(1.5)
    assert c.per_draft == pytest.approx(0.5 / 3)
    assert c.estimated_speedup == pytest.approx(2.5 / 1.5)
    assert c.measured_speedup == 1.6
    assert c.recommended_k in (2, 3)


def test_step_cost_without_a_baseline_says_why() -> None:
    arm = Arm("overall", 1, 1, drafts=10, rate=0.5, length=2.0, per_position=[0.5], median_step_ms=12.0)
    c = step_cost(arm, 1, plain_ms=None, baseline_run=None, measured=None, note="no probed baseline")
    assert c.ratio is None and c.estimated_speedup is None
    assert c.note == "no probed baseline"


def test_server_step_time_wins_over_burst_read_chunk_gaps() -> None:
    """A loaded client reads chunks in bursts (median gap 0): the server's own per-step time is used."""
    arm = Arm("overall", 12, 12, drafts=100, rate=0.5, length=2.5, per_position=[0.8, 0.5, 0.2], median_step_ms=0.0)
    assert step_cost(arm, 3, plain_ms=10.0, baseline_run="b", measured=1.2).ratio is None  # a zero gap is no step time
    c = step_cost(arm, 3, plain_ms=10.0, baseline_run="b", measured=1.2, server_step_ms=20.0)
    assert c.step_ms == 20.0 and c.ratio == pytest.approx(2.0)
    assert c.estimated_speedup == pytest.approx(2.5 / 2.0)
