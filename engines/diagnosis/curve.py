"""The per-position acceptance curve: its shape, the step cost, and the K it recommends.

``per_position[i]`` is the share of drafts whose token at position i+1 was accepted (so it can
only fall with i). With K drafted tokens a step yields ``1 + sum(per_position[:K])`` tokens on
average. A step costs ``ratio`` plain decode steps, measured; the model spreads the overhead
over the drafts, ``cost(K) = 1 + K * per_draft``, which is what each extra draft token adds
(its draft forward plus its share of the verify). Estimated speedup(K) = tokens(K) / cost(K).
Only K up to the served K can be judged: positions beyond it were never measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Shape = Literal["none", "dead-start", "steep-fall", "healthy", "flat-high"]

#: Position-1 acceptance below this means the drafter never agrees with the target.
DEAD_START_BELOW = 0.05
#: A start at least this good is "healthy".
HEALTHY_START = 0.3
#: The last position keeping less than this share of position 1 is a steep fall.
STEEP_FALL_RATIO = 0.35


@dataclass(frozen=True)
class CurveReading:
    shape: Shape
    first: float | None
    last: float | None
    text: str


def read_shape(per_position: list[float]) -> CurveReading:
    """Name the curve's shape in the terms the causes are known by."""
    if not per_position:
        return CurveReading("none", None, None, "no per-position figures")
    first, last = per_position[0], per_position[-1]
    curve = " / ".join(f"{p:.2f}" for p in per_position)
    if first < DEAD_START_BELOW:
        return CurveReading("dead-start", first, last, f"position 1 accepts {first:.0%} ({curve})")
    if first >= HEALTHY_START and len(per_position) > 1 and last < STEEP_FALL_RATIO * first:
        return CurveReading("steep-fall", first, last, f"starts at {first:.0%} and falls to {last:.0%} by position {len(per_position)} ({curve})")
    if first >= 0.9 and last >= 0.9:
        return CurveReading("flat-high", first, last, f"every position accepts at least {min(per_position):.0%} ({curve})")
    return CurveReading("healthy", first, last, f"per position {curve}")


def comparable(per_position: list[float], n: int) -> float | None:
    """Mean acceptance over the first ``n`` positions (None: fewer measured): two runs drafted at
    different K compare on the positions both drafted."""
    return sum(per_position[:n]) / n if n and len(per_position) >= n else None


def tokens_per_step(per_position: list[float], k: int) -> float:
    return 1.0 + sum(per_position[:k])


def estimate_by_k(per_position: list[float], per_draft: float) -> dict[int, float]:
    """Estimated speedup for each K from 1 to the measured width."""
    return {k: tokens_per_step(per_position, k) / (1.0 + k * per_draft) for k in range(1, len(per_position) + 1)}


def recommend_k(estimates: dict[int, float]) -> int | None:
    """The K with the best estimate; 0 when no K beats plain decoding; None without estimates."""
    if not estimates:
        return None
    best_k = max(estimates, key=lambda k: (estimates[k], -k))
    return best_k if estimates[best_k] > 1.0 else 0


def marginal_break_even(per_position: list[float], per_draft: float) -> int | None:
    """The first position whose expected token no longer pays for its draft cost (None: all pay)."""
    for i, p in enumerate(per_position):
        if p < per_draft:
            return i + 1
    return None


def fall_z(now: float, then: float, n_now: float, n_then: float) -> float:
    """Two-proportion z of ``now`` below ``then`` over ``n_now`` and ``n_then`` drafted tokens (0 without counts):
    a run against its reference, or a category against the others."""
    if n_now <= 0 or n_then <= 0:
        return 0.0
    p = (now * n_now + then * n_then) / (n_now + n_then)
    se = (p * (1 - p) * (1 / n_now + 1 / n_then)) ** 0.5
    return (then - now) / se if se > 0 else 0.0
