"""The diagnosis in compare's words: one line after the speed verdict.

"hurts: 0.66x; acceptance 15% against 50-60% published for this family at K=3; likely cause: ...;
next: ..."
"""

from __future__ import annotations

from servelab.engines.diagnosis.model import Diagnosis


def verdict_line(run: str, verdict: str | None, speedup: float | None, diag: Diagnosis) -> str:
    """Speed verdict, acceptance against the reference, the top finding's cause and next setting."""
    parts: list[str] = []
    if verdict and speedup is not None:
        parts.append(f"{verdict}: {speedup:.2f}x")
    rate = diag.measurements.overall.rate
    acc = "acceptance -" if rate is None else f"acceptance {rate:.0%}"
    ref = diag.reference
    if ref.applies and ref.low is not None and ref.high is not None:
        span = f"{ref.low:.0%}" if abs(ref.high - ref.low) < 0.005 else f"{ref.low:.0%}-{ref.high:.0%}"
        acc += f" against {span} published for this family ({ref.label})"
    else:
        acc += " (no published reference applies)"
    if diag.k:
        acc += f" at K={diag.k}"
    parts.append(acc)
    if diag.cost.estimated_speedup is not None:
        parts.append(f"estimated {diag.cost.estimated_speedup:.2f}x from the step cost")
    top = next((f for f in diag.findings if f.severity != "info"), diag.top)
    if top is not None:
        parts.append(f"likely cause: {top.message}")
        if top.next and top.next != "-":
            parts.append(f"next: {top.next}")
    return f"{run}: " + "; ".join(parts)
