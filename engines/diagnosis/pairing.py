"""The drafter and the target as a pair: a drafter is trained on one target's hidden states, so the
same drafter on other target weights (another folder, or the same folder with its weights replaced,
as a model upgrade is done) is another pair, whatever the path says.

- :func:`target_changed`: the same drafter weights did better on other target weights (servelab's
  history, by fingerprint); the finding names the change with both fingerprints and both curves.
- :func:`candidates`: a position-1 collapse with clean drafter checks has three candidate causes,
  ordered by the evidence at hand (history, the drafter's training record, the raw-prompt arm),
  each with the measurement that tells it from the others.
"""

from __future__ import annotations

import os.path
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servelab.engines.diagnosis.curve import DEAD_START_BELOW, comparable, fall_z
from servelab.engines.diagnosis.model import Finding, Measurements, OtherTarget, Provenance

if TYPE_CHECKING:
    from servelab.engines.adapters.exchange import TargetIdentity

#: A run on other target weights that drafted at least this well at position 1 shows the drafter is trained.
TRAINED_START = 0.1
#: The raw-prompt arm this much above the chat arm at position 1 points at the template or tokenizer.
RAW_LEAD = 0.05


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _curve(pp: list[float]) -> str:
    return " / ".join(f"{p:.2f}" for p in pp) or "-"


def _same_path(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


@dataclass(frozen=True)
class PairFacts:
    """What the pairing rules read: the served target's path and fingerprint, the drafter's best run
    on other target weights, its training record."""

    model: str
    target: TargetIdentity | None
    other_target: OtherTarget | None
    provenance: Provenance | None


def target_changed(facts: PairFacts, rate: float, per_position: list[float], drafts: float | None,
                   far: float, drop: float, z_bar: float) -> Finding | None:
    """The same drafter weights fell on other target weights: below ``far`` of what they reached there,
    or below ``drop`` of it at ``z_bar`` standard errors of both runs' drafts. None otherwise."""
    ot = facts.other_target
    if ot is None:
        return None
    n = min(len(ot.per_position), len(per_position))
    now = comparable(per_position, n)
    then = comparable(ot.per_position, n)
    now = rate if now is None else now
    then = ot.rate if then is None else then
    z = fall_z(now, then, max(n, 1) * (drafts or 0.0), max(n, 1) * (ot.drafts or 0.0))
    if not (now < far * then or (now <= drop * then and z >= z_bar)):
        return None
    over = f" over positions 1-{n}" if n > 1 else " at position 1"
    fp_now = facts.target.fingerprint if facts.target is not None else "unknown"
    fp_then = ot.target.fingerprint if ot.target is not None else "unknown (recorded before target fingerprints)"
    change = facts.target.change(ot.target) if facts.target is not None and ot.target is not None else "other target weights"
    if _same_path(ot.target_path, facts.model):
        where = f"the target at {facts.model} was replaced in place ({change})"
    else:
        where = f"this target ({facts.model}) is not the one it reached that on ({ot.target_path}; {change})"
    message = (f"the drafter is paired with another target: the same drafter weights reached {_pct(then)}{over} on target {fp_then} "
               f"(run {ot.run}) and reach {_pct(now)} on target {fp_now}; {where}")
    evidence = (f"then: per position {_curve(ot.per_position)} (run {ot.run} on {ot.date[:10]}, K={ot.k}, target {fp_then} at {ot.target_path}); "
                f"now: per position {_curve(per_position)} (target {fp_now} at {facts.model})")
    if not now < far * then:
        evidence += f"; a fall of {then - now:.0%} at z {z:.1f} over both runs' drafts"
    if ot.changed:
        evidence += f"; drafter settings changed since too: {'; '.join(ot.changed)}"
    p = facts.provenance
    if p is not None and p.names:
        evidence += f"; its training record names {', '.join(p.names)}" + (f" ({p.why})" if p.why else "")
    nxt = (f"serve the drafter with the target it was trained for (target {fp_then}, {ot.target_path}), or train it on this "
           "target's hidden states (e.g. SpecForge on this target's own generations)")
    return Finding("target-changed", "error", message, evidence, nxt, 4.55)


@dataclass(frozen=True)
class Candidate:
    """One candidate cause of a dead position 1, the evidence for or against it, and what tells it apart."""

    cause: str
    evidence: str
    tells: str
    score: float


def candidates(facts: PairFacts, m: Measurements) -> list[Candidate]:
    """Trained for another target, untrained, a tokenizer or template mismatch: most likely first
    (ties keep that order, the commonest first)."""
    ot, p = facts.other_target, facts.provenance
    worked_elsewhere = ot is not None and (ot.per_position[0] if ot.per_position else ot.rate) >= TRAINED_START
    raw = m.raw
    raw1 = raw.per_position[0] if raw is not None and raw.per_position else (raw.rate if raw is not None else None)
    chat1 = m.overall.per_position[0] if m.overall.per_position else (m.overall.rate or 0.0)

    other = 1.0
    why_other = "no record of the target it was trained for, and no run of it on another target"
    if worked_elsewhere and ot is not None:
        other, why_other = 3.0, f"it reached {_pct(ot.per_position[0] if ot.per_position else ot.rate)} at position 1 on target " \
                                f"{ot.target.fingerprint if ot.target else ot.target_path} (run {ot.run})"
    elif p is not None and p.matches is False:
        other, why_other = 2.8, f"its training record names another target: {', '.join(p.names) or p.fingerprint} ({p.why})"
    elif p is not None and p.matches is True:
        other, why_other = 0.2, f"its training record names this target ({p.why})"
    untrained, why_untrained = 2.0, "no run of these weights on any target did better"
    if worked_elsewhere:
        untrained, why_untrained = 0.1, "it drafts well on another target, so it is trained"
    elif p is not None and p.matches is True:
        untrained, why_untrained = 2.9, "trained for this very target, and still dead here"
    tok, why_tok = 1.5, "raw prompts were not probed"
    if raw1 is not None:
        if raw1 >= chat1 + RAW_LEAD and raw1 >= DEAD_START_BELOW:
            tok, why_tok = 3.5, f"raw prompts accept {_pct(raw1)} at position 1 against {_pct(chat1)} chat-templated"
        else:
            tok, why_tok = 0.5, f"raw prompts are as dead ({_pct(raw1)} at position 1): not the chat template alone"
    found = [
        Candidate("trained for another target", why_other,
                  "serve it with the target its training names (or its best run's target) and diagnose: acceptance comes back there; "
                  "`servelab drafter` compares its training record with this target's fingerprint", other),
        Candidate("untrained (or trained on too little)", why_untrained,
                  "its own training's per-position accuracy on held-out data, or a run on the target it was trained on: near 0 there too", untrained),
        Candidate("a tokenizer or chat-template mismatch", why_tok,
                  "the raw-prompt arm against the chat arm (this suite measures both), and the drafter's tokenizer hash against the target's",
                  tok),
    ]
    return sorted(found, key=lambda c: -c.score)
