"""The diagnosis in compare's words, and the one decision it makes with the speed verdict.

"hurts: 0.66x; acceptance 15.0% against 50-60% published by vllm-project/vllm (PR #35966) for
kimi-k2.5-eagle3 at K=3; likely cause: ...; next: ..."

Every reference says what it is (:func:`reference_words`): an earlier local run (named), a figure
stated in the experiment, or a published one (by whom).

- :func:`looping_share`: whether the diagnosis found the output looping; a speedup measured on
  such output is :data:`NOT_MEANINGFUL`, never "helps" (compare's ``Speedup.verdict`` asks this);
- :func:`cause`: the top finding's cause in words that carry no figure of their own (the figures
  of the sentence are the comparison table's);
- :func:`recommendation`: the next setting, or None when it would repeat the current one;
- :func:`diagnosis_clause` / :func:`verdict_line`: the sentence.
"""

from __future__ import annotations

import re

from servelab.engines.diagnosis.degenerate import is_degenerate
from servelab.engines.diagnosis.explain import cost_model
from servelab.engines.diagnosis.model import Diagnosis, Finding, ReferenceMatch
from servelab.engines.diagnosis.reference import reference_words
from servelab.engines.probe.speedup import NOT_MEANINGFUL


#: Each finding's cause without figures: the sentence quotes the table's figures, not the suite's.
CAUSES: dict[str, str] = {
    "no-speculation": "the server did not speculate during the probe",
    "draft-equals-target": "the drafter is the target itself: its acceptance proves nothing about a drafter",
    "degenerate-output": "the acceptance is built on repetitive output: not a figure to praise",
    "position-one-near-zero": "position 1 accepts almost nothing: the drafter never agrees with the target",
    "k-too-high": "the acceptance curve falls off: K drafts tokens that are rarely kept",
    "speculation-not-paying": "no K pays for its drafts here",
    "temperature-drop": "acceptance falls at the serving temperature",
    "temperature-untested": "the probe at the serving temperature failed",
    "below-reference": "acceptance far below its reference",
    "near-reference": "acceptance in line with its reference",
    "step-cost": "the step cost and acceptance set the speedup (see the diagnosis for the estimate)",
    "healthy": "no fault found",
    "slower-than-baseline": "slower than no speculation",
    "step-cost-dominates": "a speculative step costs more than the tokens it yields",
    "acceptance-dominates": "the drafter agrees too rarely for its cheap steps to pay",
}
#: The looping-output note when acceptance stayed low anyway (severity info).
_LOOPS_YET_LOW = "the output loops, yet the drafter disagrees even on it"
_NUM_TOKENS = re.compile(r"num_tokens\s*=\s*(\d+)")


def looping_share(diag: Diagnosis | None) -> float | None:
    """The share of distinct output bigrams when the diagnosis found the run's acceptance built on
    looping output (its ``degenerate-output`` warning), else None. Output that loops while acceptance
    stays low does not count: the loop inflated nothing, so the speed verdict stands."""
    if diag is None or not any(f.code == "degenerate-output" and f.severity != "info" for f in diag.findings):
        return None
    share = diag.measurements.overall.unique_bigrams
    return share if is_degenerate(share) else None


#: What falling far below each kind of reference points at.
_BELOW: dict[str, str] = {
    "published": "acceptance far below the published figure: a configuration fault before drafter quality",
    "stated": "acceptance far below the figure the experiment states",
    "local": "acceptance far below this drafter's own earlier run",
}


def cause(f: Finding, ref: ReferenceMatch | None = None) -> str:
    """The finding's cause, figure-free: its own message when that has no figure, else its code's words
    (a reference finding's words name the kind of reference ``ref`` is)."""
    if f.code == "degenerate-output" and f.severity == "info":
        return _LOOPS_YET_LOW
    if not any(ch.isdigit() for ch in f.message):
        return f.message
    if f.code == "below-reference" and ref is not None and ref.kind in _BELOW:
        return _BELOW[ref.kind]
    return CAUSES.get(f.code, f"see finding {f.code} in the diagnosis")


def recommendation(f: Finding, k: int | None) -> str | None:
    """The finding's next setting; None when there is none or it names the K the run already has."""
    if not f.next or f.next == "-":
        return None
    found = _NUM_TOKENS.search(f.next)
    if found is not None and k is not None and int(found.group(1)) == k:
        return None
    return f.next


def top_finding(diag: Diagnosis) -> Finding | None:
    """The finding the verdict names: the first that is not a note, else the first."""
    return next((f for f in diag.findings if f.severity != "info"), diag.top)


def suite_acceptance(diag: Diagnosis, named: bool = True) -> str:
    """The diagnosis suite's acceptance (``70%``, its source named when ``named``: beside a table that
    has none), or why there is none."""
    rate = diag.measurements.overall.rate
    if rate is None:
        return f"- ({diag.measurements.overall.error or 'the server did not speculate during the diagnosis'})"
    return f"{rate:.0%}" + (" by the diagnosis suite (the probe measured none)" if named else "")


def diagnosis_clause(diag: Diagnosis, acceptance: str | None = None) -> str:
    """Acceptance against the reference, the likely cause and the next setting.

    ``acceptance``: the run's acceptance as the comparison table shows it (``66.8%``); without one
    the diagnosis's own measurement (:func:`suite_acceptance`)."""
    if acceptance is None:
        acceptance = suite_acceptance(diag, named=False)
    parts: list[str] = []
    acc = f"acceptance {acceptance}"
    words = reference_words(diag.reference)
    acc += f" against {words}" if words else " (no reference applies)"
    if diag.k:
        acc += f" at K={diag.k}"
    parts.append(acc)
    model = cost_model(diag.measurements, diag.cost, diag.k)
    if model is not None and model.loses:
        parts.append(f"why: {model.reason()}")
        if model.fixes:
            parts.append("acceptance fixes, by effect: " + ", ".join(w.text for w in model.fixes))
    top = top_finding(diag)
    if top is not None:
        parts.append(f"likely cause: {cause(top, diag.reference)}")
        nxt = recommendation(top, diag.k)
        if nxt is not None:
            parts.append(f"next: {nxt}")
    return "; ".join(parts)


def decide(verdict: str | None, diag: Diagnosis | None) -> str | None:
    """The speed verdict with the diagnosis taken in: a speedup on looping output is not meaningful."""
    if verdict is not None and looping_share(diag) is not None:
        return NOT_MEANINGFUL
    return verdict


def verdict_line(run: str, verdict: str | None, speedup: float | None, diag: Diagnosis, acceptance: str | None = None) -> str:
    """Speed verdict (one decision with the diagnosis), acceptance against the reference, the top
    finding's cause and next setting."""
    parts: list[str] = []
    decided = decide(verdict, diag)
    if decided and speedup is not None:
        parts.append(f"{decided}: {speedup:.2f}x")
    parts.append(diagnosis_clause(diag, acceptance))
    return f"{run}: " + "; ".join(parts)
