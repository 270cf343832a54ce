"""From measurements to ranked findings. Each rule states its threshold, its evidence and the
setting to try next; the causes and their signatures are those of the research notes (§1)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from servelab.engines.diagnosis.curve import DEAD_START_BELOW, comparable, fall_z as _fall_z, read_shape
from servelab.engines.diagnosis.explain import CostModel, WhatIf, cost_model
from servelab.engines.diagnosis.degenerate import DEGENERATE_BELOW, is_degenerate
from servelab.engines.diagnosis.reference import reference_words
from servelab.engines.diagnosis.model import Arm, Finding, Measurements, OtherTarget, Provenance, ReferenceMatch, StaticCheck, StepCost, rank
from servelab.engines.diagnosis.pairing import PairFacts, candidates, target_changed
from servelab.engines.adapters.exchange import TargetIdentity

#: Acceptance at least this high is what a figure "to praise" looks like.
PRAISE_FROM = 0.3
#: Acceptance gaps (absolute) between two arms that point at a cause.
TEMPLATE_GAP = 0.15
CATEGORY_GAP = 0.2
#: A category at most this share of the others' median is far below them, when the gap is at least
#: CATEGORY_GAP or, at lower acceptance, CATEGORY_Z standard errors of the drafted tokens' counts.
CATEGORY_SHARE = 0.6
CATEGORY_Z = 2.5  # one-sided p < 0.01
TEMPERATURE_GAP = 0.1
#: Methods whose drafter was trained (template, thinking and domain gaps mean something there).
TRAINED = frozenset({"eagle", "eagle3", "mtp", "draft_model"})
#: Below this share of the reference's low end, the run is far from it.
FAR_BELOW_REFERENCE = 0.7
#: The same weights with a changed drafter config: a fall of at least a tenth of the reference run
#: (a rerun of the same pair on another machine moved 8%: 25% -> 23%), CHANGED_Z standard errors of
#: both runs' draft counts, names the change even when it is not far below. The bar is lower than
#: CATEGORY_Z's because the difference is known, not searched for among arms: only the fall is in
#: question (one-sided p < 0.025).
CHANGED_DROP = 0.9
CHANGED_Z = 2.0
#: Drafter-check warnings that change what the drafter computes (not doubts to rule out).
ACCEPTANCE_WARNINGS = frozenset({"norm-flags-ignored"})
#: Findings that name why acceptance is low; a run below its reference with one of these has its
#: cause named, and the reference gap ranks under it. K is not one: a reference is compared at
#: the same positions (local) or at the experiment's K (stated, published).
CAUSES = frozenset({"draft-equals-target", "position-one-near-zero", "template-gap", "thinking-gap", "category-gap",
                    "temperature-drop", "drafter-config-changed", "degenerate-output", "target-changed"})


@dataclass(frozen=True)
class RunFacts:
    """What the rules need to know about the run besides the measurements."""

    method: str
    k: int | None
    model: str
    drafter: str | None
    #: What the drafter checks found (None: they did not run).
    static: tuple[StaticCheck, ...] | None = None
    #: The served target's fingerprint (None: unknown).
    target: TargetIdentity | None = None
    #: The same drafter's best run on other target weights (None: none known).
    other_target: OtherTarget | None = None
    #: What the drafter's training record says it was trained for (None: it records nothing).
    provenance: Provenance | None = None

    @property
    def pair(self) -> PairFacts:
        return PairFacts(self.model, self.target, self.other_target, self.provenance)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _rates(arms: list[Arm]) -> str:
    return ", ".join(f"{a.name} {_pct(a.rate)}" for a in arms)


def diagnose(facts: RunFacts, m: Measurements, cost: StepCost, ref: ReferenceMatch) -> list[Finding]:
    """All findings that apply, ranked (most important first)."""
    out: list[Finding] = []
    o = m.overall
    if o.rate is None:
        why = o.error or "the spec-decode counters did not move during the probe"
        out.append(Finding("no-speculation", "error", "the server did not speculate during the probe", why,
                           "check [speculative] and the engine log for 'SpecDecoding metrics'", 1.0))
        return rank(out)
    rate = o.rate
    shape = read_shape(o.per_position)
    k_txt = f"K={facts.k}" if facts.k else "this K"
    arms_all = [a for a in (o, m.raw, m.thinking_on, m.thinking_off, m.at_temperature, *m.categories) if a is not None and a.rate is not None]

    # -- the drafter is the target --------------------------------------------------------------
    if facts.drafter and facts.method == "draft_model" and _same_path(facts.drafter, facts.model):
        out.append(Finding(
            "draft-equals-target", "warning" if rate >= 0.9 else "error",
            f"the drafter is the target itself: acceptance {_pct(rate)} is expected and proves nothing about a drafter",
            f"draft_model = model = {facts.model}; per position {shape.text}; a draft step costs as much as a target step"
            + (f" (step {cost.ratio:.2f}x a plain decode step)" if cost.ratio else ""),
            "[speculative] draft_model = a drafter much smaller than the target (or method = \"eagle3\" with a trained head)",
            5.0,  # explains the figure entirely, looping output or not
        ))

    # -- looping output -------------------------------------------------------------------------
    share = o.unique_bigrams
    if is_degenerate(share) and rate >= PRAISE_FROM:
        out.append(Finding(
            "degenerate-output", "warning",
            f"acceptance {_pct(rate)} is built on repetitive output: not a figure to praise",
            f"only {_pct(share)} of output token bigrams are distinct (natural text > 80 %, degenerate < {DEGENERATE_BELOW:.0%}); "
            "a loop is trivially predictable, so any drafter scores high on it",
            "[probe] prompts = \"specbench:question.jsonl\" (real prompts) and a target that answers them; judge acceptance only on non-looping output",
            2.0 + rate,
        ))
    elif is_degenerate(share):
        out.append(Finding(
            "degenerate-output", "info", f"the output loops ({_pct(share)} distinct bigrams), yet acceptance stays {_pct(rate)}",
            "repetition would inflate acceptance; here it did not, so the drafter disagrees even on trivially predictable text",
            "fix the drafter first (see the findings above)", 0.1,
        ))

    # -- position 1 dead ------------------------------------------------------------------------
    if shape.shape == "dead-start":
        gaps = [a for a in arms_all if a.rate is not None and a.rate >= 0.2]
        if not gaps:
            ruled = []
            if m.raw is not None and m.raw.rate is not None:
                ruled.append(f"raw prompts {_pct(m.raw.rate)} (not the chat template)")
            if m.at_temperature is not None and m.at_temperature.rate is not None:
                ruled.append(f"temperature {m.serving_temperature:g} {_pct(m.at_temperature.rate)} (not sampling: this is greedy too)")
            if m.categories:
                ruled.append(f"every category at most {_pct(max(a.rate or 0.0 for a in m.categories))} (not a domain gap)")
            where = f"position 1 accepts {_pct(o.per_position[0] if o.per_position else rate)}: the drafter never agrees with the target"
            evidence = shape.text + ("; ruled out: " + "; ".join(ruled) if ruled else "")
            faults = [c for c in facts.static or () if c.severity == "error"]
            doubts = [c for c in facts.static or () if c.severity == "warning"]
            check_cmd = f"servelab drafter {facts.drafter or 'DRAFT'} --target {facts.model} --method {facts.method}"
            if facts.static is None:
                message = f"{where} - a vocab-mapping, tokenizer or template fault, or an untrained drafter"
                nxt = (f"{check_cmd} (mapping, vocab, aux ids); if it is clean, the drafter is untrained for this target: "
                       "[speculative] draft_model = a drafter trained on this target's outputs")
            elif faults:
                message = f"{where} - a configuration fault: {faults[0].code} ({faults[0].message})"
                evidence += "; drafter checks: " + ", ".join(c.code for c in faults)
                nxt = faults[0].fix
            else:
                ranked = candidates(facts.pair, m)
                message = (f"{where} - the drafter checks find no mapping, vocab, aux-layer or token error: an untrained or unrelated drafter; "
                           "candidates, most likely first: " + ", ".join(c.cause for c in ranked))
                evidence += "; drafter checks: " + ("no errors; warnings to rule out: " + ", ".join(c.code for c in doubts) if doubts else "clean")
                evidence += "".join(f"; {i}. {c.cause}: {c.evidence} (tells it apart: {c.tells})" for i, c in enumerate(ranked, 1))
                nxt = ("[speculative] draft_model = a drafter trained on this target's outputs (e.g. SpecForge on the target's own "
                       f"generations); to tell the causes apart first: {ranked[0].tells}")
            out.append(Finding("position-one-near-zero", "error", message, evidence, nxt, 4.0))

    # -- K too high ------------------------------------------------------------------------------
    rec = cost.recommended_k
    if shape.shape == "steep-fall" or (rec is not None and rec > 0 and facts.k is not None and rec < facts.k):
        est = cost.estimate_by_k
        est_txt = ", ".join(f"K={k}: {v:.2f}x" for k, v in sorted(est.items())) if est else "no step cost measured"
        out.append(Finding(
            "k-too-high", "warning",
            f"the acceptance curve falls off: {k_txt} drafts tokens that are rarely kept",
            f"{shape.text}; estimated speedup {est_txt}",
            _k_change(rec if rec and (facts.k is None or rec < facts.k) else max(1, (facts.k or 2) // 2), facts.k),
            1.0,  # a tuning step: a template, domain, temperature or configuration cause comes first
        ))

    # -- speculation does not pay ----------------------------------------------------------------
    if cost.estimated_speedup is not None and cost.estimated_speedup < 1.0 and rec == 0:
        measured = f", measured {cost.measured_speedup:.2f}x" if cost.measured_speedup is not None else ""
        out.append(Finding(
            "speculation-not-paying", "warning",
            f"no K pays for its drafts here: estimated {cost.estimated_speedup:.2f}x{measured}",
            f"a step costs {cost.ratio:.2f}x a plain decode step ({cost.step_ms:.2f} ms vs {cost.plain_ms:.2f} ms), "
            f"{cost.per_draft:.2f} per drafted token, and yields {o.length:.2f} tokens",
            "[speculative] method = \"none\" until the drafter is fixed",
            1.0,
        ))

    # -- chat template / thinking / domain: only a trained drafter has a training to mismatch ------
    trained = facts.method in TRAINED
    if trained and m.raw is not None and m.raw.rate is not None and abs(m.raw.rate - rate) >= TEMPLATE_GAP:
        better = "raw" if m.raw.rate > rate else "chat-templated"
        out.append(Finding(
            "template-gap", "warning",
            f"acceptance differs between chat-templated and raw prompts: the {better} form suits the drafter",
            f"chat {_pct(rate)} vs raw {_pct(m.raw.rate)} on the same texts (gap {abs(m.raw.rate - rate):.0%} >= {TEMPLATE_GAP:.0%})",
            "serve the chat template the drafter was trained with: [engine_args] chat-template = \"<the training template>\"",
            1.2 + abs(m.raw.rate - rate), about=better,
        ))
    if trained and m.thinking_on is not None and m.thinking_off is not None and m.thinking_on.rate is not None and m.thinking_off.rate is not None:
        gap = abs(m.thinking_on.rate - m.thinking_off.rate)
        if gap >= TEMPLATE_GAP:
            worse = "on" if m.thinking_on.rate < m.thinking_off.rate else "off"
            out.append(Finding(
                "thinking-gap", "warning", f"acceptance drops with thinking {worse}: the drafter was trained the other way",
                f"thinking on {_pct(m.thinking_on.rate)} vs off {_pct(m.thinking_off.rate)}",
                f"chat_template_kwargs enable_thinking = {'false' if worse == 'on' else 'true'} in the clients, or retrain the drafter with thinking {worse}",
                1.2 + gap, about=worse,
            ))

    # -- a category far below ---------------------------------------------------------------------
    cats = [a for a in m.categories if a.rate is not None]
    if trained and len(cats) >= 2:
        for a in cats:
            others = sorted(c.rate for c in cats if c is not a and c.rate is not None)
            mid = others[len(others) // 2]  # with two categories: the other one
            pooled = [c for c in cats if c is not a]
            if a.rate is not None and a.rate <= CATEGORY_SHARE * mid and (mid - a.rate >= CATEGORY_GAP or _z(a, pooled) >= CATEGORY_Z):
                out.append(Finding(
                    "category-gap", "warning", f"category {a.name} is far below the others: a gap in the drafter's training data",
                    f"{a.name} {_pct(a.rate)} vs median of the others {_pct(mid)} ({_rates(cats)})",
                    f"train the drafter on {a.name} data (or [probe] prompts without {a.name} to compare like with like)",
                    1.0 + (mid - a.rate), about=a.name,
                ))

    # -- temperature -----------------------------------------------------------------------------
    t = m.at_temperature
    if t is not None and t.rate is not None and m.serving_temperature > 0 and rate - t.rate >= TEMPERATURE_GAP:
        out.append(Finding(
            "temperature-drop", "warning",
            f"acceptance falls from {_pct(rate)} at temperature 0 to {_pct(t.rate)} at the serving temperature {m.serving_temperature:g}",
            f"the drafter drafts by argmax, so sampling rejects more drafts; clients that set no temperature get "
            f"{m.serving_temperature:g} ({m.temperature_source})",
            f"a lower serving temperature (generation_config temperature), or accept the lower figure at T={m.serving_temperature:g}",
            1.5 + (rate - t.rate),  # what clients get by default, measured directly
        ))
    elif t is not None and t.error:
        out.append(Finding("temperature-untested", "info", f"the probe at temperature {m.serving_temperature:g} failed", t.error,
                           "retry with a server that samples with speculation", 0.0))

    # -- the drafter checks: a fault they find is the cause before any measurement -----------------
    for c in facts.static or ():
        if c.severity == "error" or c.code in ACCEPTANCE_WARNINGS:
            out.append(Finding(c.code, c.severity, f"the drafter checks: {c.message}", f"servelab drafter {facts.drafter or 'DRAFT'} --target {facts.model}",
                               c.fix, 4.6 if c.severity == "error" else 2.6))

    # -- the pairing: the same drafter did better on other target weights ---------------------------
    paired = target_changed(facts.pair, rate, o.per_position, o.drafts, FAR_BELOW_REFERENCE, CHANGED_DROP, CHANGED_Z)
    if paired is not None:
        out.append(paired)
    # -- the reference -----------------------------------------------------------------------------
    own = [f for f in out if not _as_trained(f, ref)]
    out.extend(_reference_findings(ref, rate, o.per_position, facts, own, o.drafts))
    # -- the step cost -----------------------------------------------------------------------------
    if cost.estimated_speedup is not None:
        meas = f"; measured {cost.measured_speedup:.2f}x" if cost.measured_speedup is not None else ""
        out.append(Finding(
            "step-cost", "info",
            f"estimated speedup {cost.estimated_speedup:.2f}x from acceptance and step cost{meas}",
            f"step {cost.step_ms:.2f} ms vs plain decode {cost.plain_ms:.2f} ms ({cost.ratio:.2f}x, baseline run {cost.baseline_run}); "
            f"{o.length:.2f} tokens per step",
            _k_change(cost.recommended_k, facts.k) if cost.recommended_k else "[speculative] method = \"none\"",
            0.3,
        ))
    elif cost.note:
        out.append(Finding("step-cost-unknown", "info", "the cost of a draft step is not measured", cost.note,
                           "probe the baseline experiment with the same prompts, then diagnose again", 0.0))
    model = cost_model(m, cost, facts.k)
    if model is not None:
        out = _with_cost_model(out, model)
    out = [_shared(f, ref) if _as_trained(f, ref) else f for f in out]
    if not out or all(f.severity == "info" for f in out):
        if rate >= PRAISE_FROM and not is_degenerate(share):
            out.append(Finding("healthy", "info", f"acceptance {_pct(rate)} with a {shape.shape} curve: no fault found", shape.text,
                               "tune K from the curve", 0.5))
    return rank(out)


def _reference_findings(ref: ReferenceMatch, rate: float, per_position: list[float], facts: RunFacts, found: list[Finding],
                        drafts: float | None = None) -> list[Finding]:
    """Below, near or without a reference; a local reference whose drafter settings changed names them.

    ``drafts``: this run's draft steps, for the significance of a fall against a local reference.
    """
    if not (ref.applies and ref.low is not None and ref.high is not None):
        return [Finding("no-reference", "info", "no published figure applies to this drafter", ref.why, "-", 0.0)]
    n = min(len(ref.per_position), len(per_position))
    if ref.kind == "local" and ref.per_position:
        now, then = comparable(per_position, n), comparable(ref.per_position, n)
        now = rate if now is None else now
        then = ref.low if then is None else then
        over = f" over positions 1-{n}" if n > 1 else " at position 1"
    else:
        now, then, over = rate, ref.low, ""
    far = now < FAR_BELOW_REFERENCE * then
    changed = ref.kind == "local" and bool(ref.changed)
    # each draft step drafts one token at each of the n positions compared (the rate alone: one)
    z = _fall_z(now, then, max(n, 1) * (drafts or 0.0), max(n, 1) * (ref.drafts or 0.0)) if changed else 0.0
    if not far and not (changed and now <= CHANGED_DROP * then and z >= CHANGED_Z):
        return [Finding("near-reference", "info", f"acceptance {_pct(now)}{over} is in line with {_pct(then)} from {ref.label}",
                        f"{ref.figure}; {ref.why}", "tune K from the curve", 0.2)]
    if changed:
        return [Finding(
            "drafter-config-changed", "error",
            f"the same drafter weights reached {_pct(then)}{over} in run {ref.run}; now {_pct(now)}, and its config changed: {'; '.join(ref.changed)}",
            f"{ref.figure}; {ref.source}" + ("" if far else f"; a fall of {then - now:.0%} at z {z:.1f} over both runs' drafts"),
            f"restore the drafter config of run {ref.run} ({', '.join(c.split(':')[0] for c in ref.changed)}): the weights were trained with it",
            4.5,
        )]
    named = [f.code for f in found if f.code in CAUSES or f.severity == "error" or f.code in ACCEPTANCE_WARNINGS]
    what = {"local": f"{_pct(then)}{over} reached by this drafter in the earlier local run {ref.run} ({ref.figure})", "stated": f"{ref.label}: {_pct(then)} ({ref.source})",
            "published": reference_words(ref)}.get(ref.kind, ref.label)
    if named:
        message = f"acceptance {_pct(now)}{over} against {what}: explained by {', '.join(dict.fromkeys(named))} above"
    elif ref.kind == "published":
        message = f"acceptance {_pct(rate)} against {what}: a configuration fault before drafter quality"
    else:
        message = (f"acceptance {_pct(now)}{over} against {what}, and no template, domain, temperature or configuration cause "
                   "is found: the drafter itself is weaker (under-trained, or trained on other data)")
    nxt = (f"servelab drafter {facts.drafter or 'DRAFT'} --target {facts.model} first; then the template and thinking A/B above"
           if ref.kind == "published" else "train the drafter longer or on data like the served prompts, and compare with the reference run")
    return [Finding("below-reference", "warning", message, f"{ref.figure}; {ref.why}; {ref.source}", nxt, 0.9 if named else 1.8)]


#: Gaps in the drafter's training data. One its local reference run shows too (the same code about
#: the same category or prompt form) is how the drafter was trained, not what changed since: it ranks
#: under every finding of this run's own and explains no fall below that reference.
AS_TRAINED = frozenset({"template-gap", "thinking-gap", "category-gap"})
SHARED_WEIGHT = 0.5


def _as_trained(f: Finding, ref: ReferenceMatch) -> bool:
    return ref.kind == "local" and f.severity == "warning" and f.code in AS_TRAINED and f.key in ref.shows


def _shared(f: Finding, ref: ReferenceMatch) -> Finding:
    return replace(f, evidence=f"{f.evidence}; the reference run {ref.run} shows it too: the drafter as trained, not what changed since",
                   weight=min(f.weight, SHARED_WEIGHT))


#: Above every warning but a drafter fault: when speculation loses, the factor that cost the most leads.
FIRST_REASON = 3.5
#: The cost model's findings: why the speedup is what it is. The acceptance causes follow them.
SPEEDUP_REASONS = frozenset({"step-cost-dominates", "acceptance-dominates", "speculation-not-paying"})
CHEAPER_STEP = ("a cheaper speculative step: [speculative] num_tokens lower, a smaller drafter, "
                "or the drafter without eager mode (CUDA graphs)")


def _with_cost_model(found: list[Finding], model: CostModel) -> list[Finding]:
    """Each acceptance finding with the speedup its fix would give, ranked by it; when speculation
    loses, the factor that cost the most first (``explain.CostModel.first``)."""
    by_code: dict[str, WhatIf] = {}
    for w in model.fixes:
        by_code.setdefault(w.code, w)
    best = model.fixes[0] if model.fixes else None
    explained = model.loses and model.explains
    lead = model.loses and model.first == "acceptance"
    out: list[Finding] = []
    for f in found:
        what_if = by_code.get(f.code)
        if what_if is not None and f.severity != "info":
            weight = FIRST_REASON if lead and what_if is best else 1.2 + max(0.0, what_if.speedup - model.estimated)
            f = replace(f, evidence=f"{f.evidence}; {what_if.text} at the measured step cost ({model.step_ratio:.2f}x)", weight=weight)
        out.append(f)
    not_paying = next((i for i, f in enumerate(out) if f.code == "speculation-not-paying"), None)
    fewer_drafts = any(f.code == "k-too-high" for f in out)
    # A curve that falls off names its cheaper step itself (fewer drafts, with the estimate by K),
    # and "no K pays" says the loss with the same arithmetic: neither gets a second, generic finding.
    if explained and model.first == "step-cost" and not fewer_drafts and not_paying is not None:
        out[not_paying] = replace(out[not_paying], weight=FIRST_REASON)
    elif explained and model.first == "step-cost" and not fewer_drafts:
        out.append(Finding("step-cost-dominates", "warning", f"speculation loses to its {model.reason()}",
                           "; ".join(["acceptance fixes measured: " + ", ".join(w.text for w in model.fixes)] if model.fixes else
                                     ["no better acceptance was measured"]), CHEAPER_STEP, FIRST_REASON))
    elif explained and lead and best is None:
        out.append(Finding("acceptance-dominates", "warning", f"speculation loses to its {model.reason()}",
                           f"a draft token costs {model.per_draft or 0.0:.2f} of a plain step: cheap; the drafter agrees too rarely",
                           "[speculative] draft_model = a drafter trained on this target's outputs", FIRST_REASON))
    return out


def _z(a: Arm, others: list[Arm]) -> float:
    """Two-proportion z of ``a``'s acceptance below the pooled others' (0 without token counts)."""
    n1 = a.draft_tokens or 0.0
    n2 = sum(o.draft_tokens or 0.0 for o in others)
    if n1 <= 0 or n2 <= 0 or a.accepted is None or any(o.accepted is None for o in others):
        return 0.0
    x2 = sum(o.accepted or 0.0 for o in others)
    return _fall_z(a.accepted / n1, x2 / n2, n1, n2)


def _k_change(k: int, current: int | None) -> str:
    """The K to set next; never the K the run already has: that is no change to make ("-", no next setting)."""
    return "-" if k == current else f"[speculative] num_tokens = {k}"


def _same_path(a: str, b: str) -> bool:
    import os.path

    return os.path.normpath(a) == os.path.normpath(b)


__all__ = ["DEAD_START_BELOW", "RunFacts", "diagnose"]
