"""Which reference a run is held against, nearest first.

1. ``local``: the best earlier diagnosed run of the same drafter weights (by fingerprint) on the
   same target and engine, from servelab's own history. Published figures do not apply to a drafter
   trained in-house; its own best run does. Compared over the positions both runs drafted, so a
   run at another K is still comparable; the settings that changed since are kept with it.
2. ``stated``: the experiment's own ``expected_acceptance`` and ``expected_source``.
3. ``published``: the closest published figure for the drafter's family (``reference.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servelab.engines.diagnosis.model import Diagnosis, DrafterIdentity, ReferenceMatch
from servelab.engines.diagnosis.reference import closest
from servelab.engines.diagnosis.stored import load_diagnosis
from servelab.engines.errors import ServelabError

if TYPE_CHECKING:
    from servelab.engines.experiment import Experiment
    from servelab.engines.runrecords import RunRecord, RunsAPI


def _pos1(d: Diagnosis) -> float:
    pp = d.measurements.overall.per_position
    return pp[0] if pp else (d.measurements.overall.rate or 0.0)


async def earlier_runs(runs: RunsAPI, rec: RunRecord, identity: DrafterIdentity) -> list[Diagnosis]:
    """Stored diagnoses of other runs of this target and engine that served the same weights."""
    out: list[Diagnosis] = []
    for other in await runs.list():
        if other.id == rec.id or other.engine != rec.engine or other.model != rec.model:
            continue
        try:
            d = await load_diagnosis(runs, other.id)
        except ServelabError:
            continue
        if d is None or d.drafter is None or d.drafter.fingerprint != identity.fingerprint:
            continue
        if d.measurements.overall.rate is None:
            continue
        out.append(d)
    return out


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
        why=f"the best of {len(earlier)} earlier diagnosed run(s) of the same weights on this target and engine"
        + (f"; changed since: {'; '.join(changed)}" if changed else ""),
        kind="local", run=best.run, per_position=list(o.per_position), changed=changed, drafts=o.drafts,
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


async def reference_for(runs: RunsAPI, rec: RunRecord, exp: Experiment, identity: DrafterIdentity | None) -> ReferenceMatch:
    if identity is not None:
        found = local_match(identity, await earlier_runs(runs, rec, identity))
        if found is not None:
            return found
    s = exp.speculative
    return stated_match(exp) or closest(exp.model, s.draft_model, exp.engine, s.num_tokens, s.method)
