"""The cost model of speculation (speedup ~= tokens per verify step / step cost) and the order of
the reasons it gives, on figures worked out by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.engines.diagnosis.explain import cost_model
from servelab.engines.diagnosis.model import Arm, Diagnosis, StepCost
from servelab.engines.diagnosis.rules import RunFacts, diagnose
from servelab.engines.diagnosis.verdict import verdict_line
from tests.fixtures.findings import NO_REF, arm, meas

FACTS = RunFacts("eagle3", 2, "/m/target", "/m/head")


def cost(ratio: float, measured: float | None = None) -> StepCost:
    return StepCost(19.5, 10.0, "base-1", ratio, (ratio - 1) / 2, None, measured, None, {}, "")


def trained_head() -> tuple[Arm, Arm]:
    """The issue's trained EAGLE-3 head: chat 25% (length 1.50 at K=2), raw 41%."""
    return arm("overall", 0.25, [0.35, 0.15]), arm("raw", 0.41, [0.5, 0.32])


def test_the_trained_head_loses_to_its_step_cost_first_with_the_arithmetic() -> None:
    o, raw = trained_head()
    m = meas(o, raw=raw)
    c = cost(1.95, measured=0.71)
    model = cost_model(m, c, 2)
    assert model is not None
    # by hand: L = 1 + 2 x 0.25 = 1.50; 1.50 / 1.95 = 0.769; raw: L' = 1 + 0.50 x 0.41/0.25 = 1.82; 1.82 / 1.95 = 0.933
    assert model.estimated == pytest.approx(0.769, abs=1e-3)
    assert model.fixes[0].speedup == pytest.approx(0.933, abs=1e-3)
    # break-even at this cost: 1 + 0.5 x r/0.25 = 1.95 -> r = 0.475
    assert model.break_even_rate() == pytest.approx(0.475)
    assert model.first == "step-cost"
    f = diagnose(FACTS, m, c, NO_REF)
    assert f[0].code == "step-cost-dominates", [x.code for x in f]
    assert f[0].message.startswith("speculation loses to its step cost: a speculative step costs 1.95x a plain one and yields 1.50 tokens")
    assert "1.50 tokens per verify step / 1.95x step cost = 0.77x, measured 0.71x" in f[0].message
    assert "acceptance over 48%" in f[0].message and "raw 41% would give 0.93x" in f[0].evidence
    gap = next(x for x in f if x.code == "template-gap")
    assert "raw 41% would give 0.93x" in gap.evidence
    d = Diagnosis("spec-1", "x", "vllm", "eagle3", 2, "now", m, c, NO_REF, f, 1.0)
    line = verdict_line("spec-1", "hurts", 0.71, d)
    assert line.index("why: step cost") < line.index("raw 41% would give 0.93x") < line.index("likely cause")


def test_when_the_measured_fix_pays_acceptance_comes_first() -> None:
    o, raw = trained_head()
    m = meas(o, raw=raw)
    c = cost(1.6)  # by hand: 1.50/1.6 = 0.94 loses; raw 1.82/1.6 = 1.14 pays
    model = cost_model(m, c, 2)
    assert model is not None and model.loses and model.first == "acceptance"
    f = diagnose(FACTS, m, c, NO_REF)
    assert f[0].code == "template-gap" and "raw 41% would give 1.14x" in f[0].evidence
    assert "step-cost-dominates" not in [x.code for x in f]


def test_acceptance_findings_rank_by_what_their_fix_would_give() -> None:
    o = arm("overall", 0.25, [0.35, 0.15])
    # thinking off 45% moves the speedup more than raw 35%: it ranks first of the two
    m = meas(o, raw=arm("raw", 0.41), on=arm("on", 0.2), off=arm("off", 0.6))
    f = [x.code for x in diagnose(FACTS, m, cost(1.3), NO_REF)]
    assert f.index("thinking-gap") < f.index("template-gap")


def test_cheap_drafts_and_nothing_better_measured_is_the_drafter() -> None:
    o = arm("overall", 0.05, [0.07, 0.03])  # L = 1.10
    m = meas(o)
    model = cost_model(m, cost(1.2), 2)  # per draft 0.10: cheap
    assert model is not None and model.first == "acceptance" and not model.fixes
    assert diagnose(FACTS, m, cost(1.2), NO_REF)[0].code == "acceptance-dominates"


@given(st.floats(0.01, 0.95), st.floats(1.01, 4.0), st.integers(1, 6), st.floats(0.0, 1.0))
def test_the_what_if_is_monotone_and_the_model_agrees_with_itself(rate: float, ratio: float, k: int, other: float) -> None:
    o = Arm("overall", 2, 2, drafts=10.0, rate=rate, length=1 + k * rate, per_position=[rate] * k)
    model = cost_model(meas(o), StepCost(1.0, 1.0, "b", ratio, None, None, None, None, {}, ""), k)
    assert model is not None
    assert model.at_rate(rate) == pytest.approx(model.estimated)
    assert (model.at_rate(other) > model.estimated) == (other > rate) or other == pytest.approx(rate)
    need = model.break_even_rate()
    assert need is not None and model.at_rate(need) == pytest.approx(1.0)
