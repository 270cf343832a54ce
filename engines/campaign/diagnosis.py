"""Why a campaign point's speculation disappoints: the diagnosis rules over what the campaign recorded.

``servelab diagnose`` runs a suite on a live server (categories, raw prompts, thinking, temperature
arms). A campaign point's server is gone by the time the report is read, so here the same rules
(``engines.diagnosis.rules.diagnose``, the step-cost model, the published references) read the
point's own records: its acceptance and per-position curve, the distinctness of its outputs, its
server-side time per step against its paired baseline point's (same concurrency), and the
measured speedup. Arms the campaign did not measure stay absent, so the rules that need them do
not fire. A point is diagnosed when its acceptance is low (below the rules' ``PRAISE_FROM``) or
when speculation does not pay (speedup at most 1).
"""

from __future__ import annotations

from servelab.engines.diagnosis.cost import step_cost
from servelab.engines.diagnosis.model import Arm, Finding, Measurements
from servelab.engines.diagnosis.reference import closest
from servelab.engines.diagnosis.rules import PRAISE_FROM, RunFacts, diagnose
from servelab.engines.catalog.experiment import Experiment

SOURCE = "the campaign probe (greedy, temperature 0)"


def needs_diagnosis(rate: float | None, speedup: float | None) -> bool:
    """Low acceptance, or a measured speedup that is no gain."""
    return rate is not None and (rate < PRAISE_FROM or (speedup is not None and speedup <= 1.0))


def diagnose_point(
    exp: Experiment,
    *,
    rate: float | None,
    length: float | None,
    per_position: tuple[float, ...],
    distinct_share: float | None,
    step_ms: float | None,
    baseline_step_ms: float | None,
    baseline_point: str | None,
    speedup: float | None,
    requests: int,
    concurrency: int,
) -> tuple[Finding, ...]:
    """The ranked findings for one measured point (empty when it needs none)."""
    s = exp.speculative
    if s.method == "none" or not needs_diagnosis(rate, speedup):
        return ()
    overall = Arm(
        name=f"campaign point, concurrency {concurrency}", requests=requests, ok=requests,
        rate=rate, length=length, per_position=list(per_position), unique_bigrams=distinct_share, median_step_ms=step_ms,
    )
    meas = Measurements(
        overall=overall, categories=[], raw=None, thinking_on=None, thinking_off=None, template_has_thinking=None,
        serving_temperature=0.0, temperature_source=SOURCE, at_temperature=None,
    )
    note = "" if baseline_step_ms else f"the paired baseline point {baseline_point or '(none)'} has no time per step"
    cost = step_cost(overall, s.num_tokens, baseline_step_ms, baseline_point, speedup, note, server_step_ms=step_ms)
    ref = closest(exp.model, s.draft_model, exp.engine, s.num_tokens, s.method)
    findings = list(diagnose(RunFacts(s.method, s.num_tokens, exp.model, s.draft_model), meas, cost, ref))
    if speedup is not None and speedup <= 1.0 and all(f.severity == "info" for f in findings):
        findings.insert(0, _slower_than_baseline(speedup, cost.estimated_speedup, s.num_tokens))
    return tuple(findings)


def _slower_than_baseline(speedup: float, estimated: float | None, k: int | None) -> Finding:
    """A point measured slower than its baseline that no fault rule explains.

    When acceptance and the server's own time per step predict a gain, the time is lost outside
    the step the server measures (drafting or scheduling between steps), so no K fixes it; the
    operator's choice is between a cheaper K and no speculation.
    """
    if estimated is not None and estimated > 1.0:
        evidence = (f"acceptance and the server's time per step predict {estimated:.2f}x; the gap is outside the "
                    "verify step (drafting or scheduling between steps)")
    elif estimated is not None:
        evidence = f"acceptance and the server's time per step predict {estimated:.2f}x as well"
    else:
        evidence = "the server's time per step was not measured against the paired baseline"
    nxt = f"[speculative] num_tokens = {k - 1}, or method = \"none\"" if k is not None and k > 1 else "[speculative] method = \"none\""
    return Finding("slower-than-baseline", "warning", f"measured {speedup:.2f}x: slower than no speculation", evidence, nxt, 1.0)


def headline(findings: tuple[Finding, ...]) -> Finding | None:
    """The finding to show in a table row: the first that is not a mere note, else the first."""
    for f in findings:
        if f.severity != "info":
            return f
    return findings[0] if findings else None
