"""Which reference a run is held against, nearest first.

1. ``local``: the best earlier diagnosed run of the same pair, the drafter weights (by their
   fingerprint) on the same target weights (by theirs, not the path), on the same engine, from
   servelab's own history. Published figures do not apply to a drafter trained in-house; its own
   best run does. Compared over the positions both runs drafted, so a run at another K is still
   comparable; the settings that changed since are kept with it. Runs of the same drafter on other
   target weights (another folder, or the same folder with its weights replaced) are evidence
   about the pairing (:class:`OtherTarget`), never a reference. A run recorded before target
   fingerprints is told by its path.
2. ``stated``: the experiment's own ``expected_acceptance`` and ``expected_source``.
3. ``published``: the closest published figure for the drafter's family (``reference.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servelab.engines.diagnosis.model import Diagnosis, DrafterIdentity, OtherTarget, ReferenceMatch
from servelab.engines.diagnosis.reference import closest
from servelab.engines.diagnosis.stored import load_diagnosis
from servelab.engines.errors import ServelabError

if TYPE_CHECKING:
    from servelab.engines.catalog.experiment import Experiment
    from servelab.engines.runs.records import RunRecord, RunsAPI
    from servelab.engines.adapters.exchange import TargetIdentity


def _pos1(d: Diagnosis) -> float:
    pp = d.measurements.overall.per_position
    return pp[0] if pp else (d.measurements.overall.rate or 0.0)


async def earlier_runs(runs: RunsAPI, rec: RunRecord, identity: DrafterIdentity) -> list[tuple[RunRecord, Diagnosis]]:
    """Stored diagnoses of other runs on this engine that served the same drafter weights, on any target."""
    out: list[tuple[RunRecord, Diagnosis]] = []
    for other in await runs.list():
        if other.id == rec.id or other.engine != rec.engine:
            continue
        try:
            d = await load_diagnosis(runs, other.id)
        except ServelabError:
            continue
        if d is None or d.drafter is None or d.drafter.fingerprint != identity.fingerprint:
            continue
        if d.measurements.overall.rate is None:
            continue
        out.append((other, d))
    return out


def same_target(model: str, target: TargetIdentity | None, other: RunRecord, d: Diagnosis) -> bool:
    """The earlier run served these target weights: by fingerprint when both runs have one, else by path."""
    theirs = d.target or other.target_identity
    if target is not None and theirs is not None:
        return theirs.fingerprint == target.fingerprint
    return other.model == model


def by_pair(model: str, target: TargetIdentity | None, earlier: list[tuple[RunRecord, Diagnosis]]) -> tuple[list[Diagnosis], list[tuple[RunRecord, Diagnosis]]]:
    """(references: the same pair; evidence: the same drafter on other target weights)."""
    refs = [d for r, d in earlier if same_target(model, target, r, d)]
    other = [(r, d) for r, d in earlier if not same_target(model, target, r, d)]
    return refs, other


def other_target(identity: DrafterIdentity, evidence: list[tuple[RunRecord, Diagnosis]]) -> OtherTarget | None:
    """The best run of these weights on another target (by position-1 acceptance), settings unchanged first."""
    if not evidence:
        return None
    unchanged = [(r, d) for r, d in evidence if d.drafter is not None and not identity.changed(d.drafter)] or evidence
    r, best = max(sorted(unchanged, key=lambda rd: rd[1].date), key=lambda rd: _pos1(rd[1]))
    o = best.measurements.overall
    assert o.rate is not None
    return OtherTarget(run=best.run, date=best.date, target_path=r.model, target=best.target or r.target_identity, rate=o.rate,
                       per_position=list(o.per_position), drafts=o.drafts, k=best.k,
                       changed=identity.changed(best.drafter) if best.drafter is not None else [])


def local_match(identity: DrafterIdentity, earlier: list[Diagnosis]) -> ReferenceMatch | None:
    """The best earlier run (by position-1 acceptance, comparable at any K) as a reference."""
    if not earlier:
        return None
    best = max(sorted(earlier, key=lambda d: d.date), key=_pos1)  # the first of equals: "reached on <date>"
    o = best.measurements.overall
    curve = " / ".join(f"{p:.2f}" for p in o.per_position)
    changed = identity.changed(best.drafter) if best.drafter is not None else []
    return ReferenceMatch(
        applies=True, label=f"this drafter's run {best.run}", figure=f"{o.rate:.0%} acceptance at K={best.k} on {best.date[:10]} (per position {curve})",
        low=o.rate, high=o.rate, source=f"servelab history: run {best.run} ({best.experiment})",
        why=f"the best of {len(earlier)} earlier diagnosed run(s) of the same drafter weights on these target weights and engine"
        + (f"; changed since: {'; '.join(changed)}" if changed else ""),
        kind="local", run=best.run, per_position=list(o.per_position), changed=changed, drafts=o.drafts,
        shows=[f.key for f in best.findings if f.severity != "info"],
    )


def stated_match(exp: Experiment) -> ReferenceMatch | None:
    s = exp.speculative
    if s.expected_acceptance is None:
        return None
    return ReferenceMatch(
        applies=True, label=f"the figure {exp.name} states", figure=f"{s.expected_acceptance:.0%} acceptance expected at K={s.num_tokens}",
        low=s.expected_acceptance, high=s.expected_acceptance, source=s.expected_source or "", why="the experiment's expected_acceptance",
        kind="stated",
    )


async def reference_for(runs: RunsAPI, rec: RunRecord, exp: Experiment, identity: DrafterIdentity | None,
                        target: TargetIdentity | None = None) -> tuple[ReferenceMatch, OtherTarget | None]:
    """The reference (by pair: these drafter weights on these target weights) and, apart, this
    drafter's best run on other target weights."""
    evidence: OtherTarget | None = None
    if identity is not None:
        refs, other = by_pair(rec.model, target, await earlier_runs(runs, rec, identity))
        evidence = other_target(identity, other)
        found = local_match(identity, refs)
        if found is not None:
            return found, evidence
    s = exp.speculative
    return stated_match(exp) or closest(exp.model, s.draft_model, exp.engine, s.num_tokens, s.method), evidence
