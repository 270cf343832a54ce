"""From measurements to ranked findings. Each rule states its threshold, its evidence and the
setting to try next; the causes and their signatures are those of the research notes (§1)."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.engines.diagnosis.curve import DEAD_START_BELOW, read_shape
from servelab.engines.diagnosis.degenerate import DEGENERATE_BELOW, is_degenerate
from servelab.engines.diagnosis.model import Arm, Finding, Measurements, ReferenceMatch, StaticCheck, StepCost, rank

#: Acceptance at least this high is what a figure "to praise" looks like.
PRAISE_FROM = 0.3
#: Acceptance gaps (absolute) between two arms that point at a cause.
TEMPLATE_GAP = 0.15
CATEGORY_GAP = 0.2
TEMPERATURE_GAP = 0.1
#: Methods whose drafter was trained (template, thinking and domain gaps mean something there).
TRAINED = frozenset({"eagle", "eagle3", "mtp", "draft_model"})
#: Below this share of the published low end, the run is far from its family.
FAR_BELOW_REFERENCE = 0.7


@dataclass(frozen=True)
class RunFacts:
    """What the rules need to know about the run besides the measurements."""

    method: str
    k: int | None
    model: str
    drafter: str | None
    #: What the drafter checks found (None: they did not run).
    static: tuple[StaticCheck, ...] | None = None


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
                message = f"{where} - the drafter checks find no mapping, vocab, aux-layer or token error: an untrained or unrelated drafter"
                evidence += "; drafter checks: " + ("no errors; warnings to rule out: " + ", ".join(c.code for c in doubts) if doubts else "clean")
                nxt = "[speculative] draft_model = a drafter trained on this target's outputs (e.g. SpecForge on the target's own generations)"
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
            1.5,
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
            1.2 + abs(m.raw.rate - rate),
        ))
    if trained and m.thinking_on is not None and m.thinking_off is not None and m.thinking_on.rate is not None and m.thinking_off.rate is not None:
        gap = abs(m.thinking_on.rate - m.thinking_off.rate)
        if gap >= TEMPLATE_GAP:
            worse = "on" if m.thinking_on.rate < m.thinking_off.rate else "off"
            out.append(Finding(
                "thinking-gap", "warning", f"acceptance drops with thinking {worse}: the drafter was trained the other way",
                f"thinking on {_pct(m.thinking_on.rate)} vs off {_pct(m.thinking_off.rate)}",
                f"chat_template_kwargs enable_thinking = {'false' if worse == 'on' else 'true'} in the clients, or retrain the drafter with thinking {worse}",
                1.2 + gap,
            ))

    # -- a category far below ---------------------------------------------------------------------
    cats = [a for a in m.categories if a.rate is not None]
    if trained and len(cats) >= 3:
        for a in cats:
            others = sorted(c.rate for c in cats if c is not a and c.rate is not None)
            mid = others[len(others) // 2]
            if a.rate is not None and mid - a.rate >= CATEGORY_GAP and a.rate < 0.5 * mid:
                out.append(Finding(
                    "category-gap", "warning", f"category {a.name} is far below the others: a gap in the drafter's training data",
                    f"{a.name} {_pct(a.rate)} vs median of the others {_pct(mid)} ({_rates(cats)})",
                    f"train the drafter on {a.name} data (or [probe] prompts without {a.name} to compare like with like)",
                    1.0 + (mid - a.rate),
                ))

    # -- temperature -----------------------------------------------------------------------------
    t = m.at_temperature
    if t is not None and t.rate is not None and m.serving_temperature > 0 and rate - t.rate >= TEMPERATURE_GAP:
        out.append(Finding(
            "temperature-drop", "info",
            f"acceptance falls from {_pct(rate)} at temperature 0 to {_pct(t.rate)} at the serving temperature {m.serving_temperature:g}",
            f"vLLM drafts by argmax, so sampling rejects more drafts; serving temperature from {m.temperature_source}",
            f"a lower serving temperature (generation_config temperature), or accept the lower figure at T={m.serving_temperature:g}",
            0.5 + (rate - t.rate),
        ))
    elif t is not None and t.error:
        out.append(Finding("temperature-untested", "info", f"the probe at temperature {m.serving_temperature:g} failed", t.error,
                           "retry with a server that samples with speculation", 0.0))

    # -- the reference -----------------------------------------------------------------------------
    if ref.applies and ref.low is not None and ref.high is not None:
        if rate < FAR_BELOW_REFERENCE * ref.low:
            out.append(Finding(
                "below-reference", "warning",
                f"acceptance {_pct(rate)} against {_pct(ref.low)}-{_pct(ref.high)} published for {ref.label}: a configuration fault before drafter quality",
                f"{ref.figure}; {ref.why}; {ref.source}",
                f"servelab drafter {facts.drafter or 'DRAFT'} --target {facts.model} first; then the template and thinking A/B above",
                1.8,
            ))
        else:
            out.append(Finding("near-reference", "info", f"acceptance {_pct(rate)} is in line with {_pct(ref.low)}-{_pct(ref.high)} published for {ref.label}",
                               f"{ref.figure}; {ref.why}", "tune K from the curve", 0.2))
    else:
        out.append(Finding("no-reference", "info", "no published figure applies to this drafter", ref.why, "-", 0.0))

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
    if not out or all(f.severity == "info" for f in out):
        if rate >= PRAISE_FROM and not is_degenerate(share):
            out.append(Finding("healthy", "info", f"acceptance {_pct(rate)} with a {shape.shape} curve: no fault found", shape.text,
                               "tune K from the curve", 0.5))
    return rank(out)


def _k_change(k: int, current: int | None) -> str:
    """The K to set next; never the K the run already has: that is no change to make ("-", no next setting)."""
    return "-" if k == current else f"[speculative] num_tokens = {k}"


def _same_path(a: str, b: str) -> bool:
    import os.path

    return os.path.normpath(a) == os.path.normpath(b)


__all__ = ["DEAD_START_BELOW", "RunFacts", "diagnose"]
