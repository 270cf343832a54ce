"""A diagnosis as lines of text: the one wording the command line and the "Why?" view share."""

from __future__ import annotations

from servelab.engines.diagnosis.model import Arm, Diagnosis


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def no_rate_reason(a: Arm) -> str | None:
    """Why a group has no acceptance figure (None when it has one): a ``-`` never stands alone."""
    if a.rate is not None:
        return None
    if a.error:
        return a.error
    if a.ok == 0:
        return f"none of its {a.requests} requests succeeded" if a.requests else "no request was sent"
    if a.drafts is None:
        return "the server reported no acceptance counts for this group"
    if not a.drafts or not a.draft_tokens:
        return "the server drafted no tokens for this group"
    return "no accepted/drafted ratio could be formed"


def arm_line(a: Arm) -> str:
    pos = " / ".join(f"{p:.2f}" for p in a.per_position) or "-"
    bi = "-" if a.unique_bigrams is None else f"{a.unique_bigrams:.2f}"
    why = a.error or no_rate_reason(a)
    extra = f"  ({why})" if why else ""
    return f"{a.name:<24} acceptance {_pct(a.rate):>5}  per position {pos:<24} unique bigrams {bi}  {a.ok}/{a.requests} ok{extra}"


def lines(d: Diagnosis) -> list[str]:
    """Findings first (ranked), then the measurements they rest on."""
    out = [f"{d.run}: {d.engine} {d.method}" + (f" K={d.k}" if d.k else "") + f", diagnosed {d.date} in {d.seconds:.0f} s", ""]
    for i, f in enumerate(d.findings, 1):
        out.append(f"{i}. [{f.severity}] {f.code}: {f.message}")
        out.append(f"   evidence: {f.evidence}")
        if f.next and f.next != "-":
            out.append(f"   next: {f.next}")
    m = d.measurements
    out += ["", "measured (concurrency 1, one acceptance window per group):", "  " + arm_line(m.overall)]
    out += ["  " + arm_line(a) for a in m.categories]
    out += ["  " + arm_line(a) for a in (m.raw, m.thinking_on, m.thinking_off, m.at_temperature) if a is not None]
    if m.template_has_thinking is False:
        out.append("  thinking on/off: the served template has no thinking switch (not probed)")
    elif m.template_has_thinking is None:
        out.append("  thinking on/off: the server cannot render its template (no /tokenize): not probed")
    c = d.cost
    if c.ratio is not None:
        est = ", ".join(f"K={k} {v:.2f}x" for k, v in sorted(c.estimate_by_k.items()))
        meas = f"{c.measured_speedup:.2f}x" if c.measured_speedup is not None else "- (probe this run to measure)"
        out.append(
            f"  step cost: {c.step_ms:.2f} ms per speculative step vs {c.plain_ms:.2f} ms per plain decode step ({c.baseline_run}) = {c.ratio:.2f}x; "
            f"estimated speedup {c.estimated_speedup:.2f}x, measured {meas}; by K: {est}; recommended K: {c.recommended_k}"
        )
    else:
        out.append(f"  step cost: not measured ({c.note})")
    if d.static is not None:
        out.append("  drafter checks: " + (", ".join(f"{c.severity} {c.code}" for c in d.static) or "clean"))
    r = d.reference
    out.append(f"  reference: {r.figure} ({r.why}; {r.source})" if r.applies else f"  reference: {r.why}")
    t = d.target
    drafter = f"; drafter weights {d.drafter.fingerprint}" if d.drafter is not None else ""
    out.append(f"  target weights: {t.fingerprint} (layout {t.layout}, weights {t.weights}, config {t.config}, tokenizer {t.tokenizer}){drafter}"
               if t is not None else f"  target weights: not fingerprinted (not a readable safetensors folder){drafter}")
    o = d.other_target
    if o is not None:
        fp = o.target.fingerprint if o.target is not None else "unknown"
        out.append(f"  this drafter on other target weights: {o.rate:.0%} in run {o.run} (target {fp} at {o.target_path}, "
                   f"per position {' / '.join(f'{p:.2f}' for p in o.per_position) or '-'}): evidence, not a reference")
    p = d.provenance
    if p is not None:
        verdict = {True: "names this target", False: "names another target", None: "cannot be told"}[p.matches]
        out.append(f"  training record: {'; '.join(p.names) or p.fingerprint} - {verdict} ({p.why})")
    return out
