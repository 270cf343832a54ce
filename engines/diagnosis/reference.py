"""Published acceptance for known drafter families, and which one a run should be held against.

Every row names its source; figures are as published (acceptance length counts the bonus token;
a rate is accepted / drafted). A run is matched on the drafter family (the drafter's name), then
the engine and K; a tiny or unknown drafter has no reference and the diagnosis says so rather
than comparing it with something it is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servelab.engines.diagnosis.model import ReferenceMatch


@dataclass(frozen=True)
class Reference:
    """One published figure. ``rate`` is the acceptance rate when the source gives one; otherwise
    ``length`` (mean accepted length incl. the bonus token) and the rate is derived as (L-1)/K."""

    family: str
    match: tuple[str, ...]
    target: str
    drafter: str
    engine: str
    k: int
    dataset: str
    length: float | None
    rate: float | None
    source: str

    @property
    def acceptance(self) -> float:
        if self.rate is not None:
            return self.rate
        assert self.length is not None
        return (self.length - 1.0) / self.k

    @property
    def figure(self) -> str:
        if self.rate is not None:
            return f"{self.rate:.0%} acceptance"
        return f"accept length {self.length:.2f} (= {self.acceptance:.0%} at K={self.k})"


#: From ../shared/notes/diagnosis-sweeps-multinode.md §1 (each with its source).
REFERENCES: tuple[Reference, ...] = (
    Reference("kimi-k2.5-eagle3", ("kimi-k2.5", "kimi-k25", "k2.5", "k25"), "moonshotai/Kimi-K2.5", "AQ-MedAI Kimi-K2.5 EAGLE-3", "vllm", 4, "GSM8K",
              None, 0.5178, "https://github.com/vllm-project/vllm/pull/35966"),
    Reference("kimi-k2.5-eagle3", ("kimi-k2.5", "kimi-k25", "k2.5", "k25"), "moonshotai/Kimi-K2.5", "lightseekorg/kimi-k2.5-eagle3", "sglang", 3, "GSM8K",
              3.201, None, "https://huggingface.co/lightseekorg/kimi-k2.5-eagle3"),
    Reference("kimi-k2.5-eagle3", ("kimi-k2.5", "kimi-k25", "k2.5", "k25"), "moonshotai/Kimi-K2.5", "lightseekorg/kimi-k2.5-eagle3", "sglang", 3, "MTBench",
              2.687, None, "https://huggingface.co/lightseekorg/kimi-k2.5-eagle3"),
    Reference("kimi-k2.5-eagle3", ("kimi-k2.5", "kimi-k25", "k2.5", "k25"), "moonshotai/Kimi-K2.5", "lightseekorg/kimi-k2.5-eagle3-mla", "vllm", 3, "MTBench",
              2.94, None, "https://huggingface.co/lightseekorg/kimi-k2.5-eagle3"),
    Reference("kimi-k2-eagle3", ("kimi-k2-instruct", "kimi-k2-eagle3"), "moonshotai/Kimi-K2-Instruct", "AQ-MedAI/Kimi-K2-Instruct-eagle3", "sglang", 3, "GSM8K",
              3.165, None, "https://huggingface.co/AQ-MedAI/Kimi-K2-Instruct-eagle3"),
    Reference("kimi-k2.6-eagle3", ("kimi-k2.6", "k2.6"), "moonshotai/Kimi-K2.6", "kimi-k2.6-eagle3-mla", "vllm", 3, "mixed",
              None, 0.6025, "https://github.com/ROCm/ATOM/pull/943"),
    Reference("kimi-k2.6-eagle3", ("kimi-k2.6", "k2.6"), "moonshotai/Kimi-K2.6", "kimi-k2.6-eagle3.1-mla", "sglang", 3, "GSM8K",
              3.20, None, "https://github.com/sgl-project/sglang/pull/26506"),
)


def closest(model: str, drafter: str | None, engine: str, k: int | None, method: str) -> ReferenceMatch:
    """The family's figures closest to this engine and K, as a published range."""
    if method not in ("eagle3", "eagle") or not drafter:
        return ReferenceMatch(False, "", "", None, None, "", f"no published figures are kept for method {method!r}: no reference applies")
    name = f"{model} {drafter}".lower()
    family = [r for r in REFERENCES if any(m in name for m in r.match)]
    if not family:
        return ReferenceMatch(False, "", "", None, None, "", f"no published figures for this drafter ({drafter}) or target: no reference applies")
    # Prefer the same engine, then the nearest K; the range spans that engine's rows of the family.
    same_engine = [r for r in family if r.engine == engine] or family
    best = min(same_engine, key=lambda r: (abs(r.k - (k or r.k)), r.dataset))
    rows = [r for r in same_engine if r.k == best.k] or [best]
    low, high = min(r.acceptance for r in rows), max(r.acceptance for r in rows)
    figure = "; ".join(f"{r.figure} on {r.dataset} ({r.drafter}, {r.engine}, K={r.k})" for r in rows)
    why = "same engine" if best.engine == engine else f"no {engine} figure; {best.engine} shown"
    if k is not None and best.k != k:
        why += f"; published at K={best.k}, this run drafts K={k}"
    return ReferenceMatch(True, best.family, figure, low, high, " ".join(sorted({r.source for r in rows})), why)


def publisher(source: str) -> str:
    """Who published a figure, from its source addresses: ``vllm-project/vllm (PR #35966)``,
    ``lightseekorg (Hugging Face model card)``, else the site's name."""
    names: list[str] = []
    for url in source.split():
        m = re.match(r"https?://(?:www\.)?github\.com/([^/]+)/([^/]+)(?:/(pull|issues)/(\d+))?", url)
        if m:
            names.append(f"{m.group(1)}/{m.group(2)}" + (f" ({'PR' if m.group(3) == 'pull' else 'issue'} #{m.group(4)})" if m.group(4) else ""))
            continue
        m = re.match(r"https?://(?:www\.)?huggingface\.co/([^/]+)", url)
        if m:
            names.append(f"{m.group(1)} (Hugging Face model card)")
            continue
        m = re.match(r"https?://(?:www\.)?([^/]+)", url)
        names.append(m.group(1) if m else url)
    return " and ".join(dict.fromkeys(names)) or "an unnamed source"


def reference_words(ref: ReferenceMatch) -> str:
    """The reference's figure and what it is: ``41% reached by this drafter in the earlier local run R``,
    ``40% stated in the experiment (source)``, ``50-60% published by X for FAMILY``; "" when none applies."""
    if not (ref.applies and ref.low is not None and ref.high is not None):
        return ""
    span = f"{ref.low:.0%}" if abs(ref.high - ref.low) < 0.005 else f"{ref.low:.0%}-{ref.high:.0%}"
    if ref.kind == "local":
        return f"{span} reached by this drafter in the earlier local run {ref.run or ref.label}"
    if ref.kind == "stated":
        return f"{span} stated in the experiment" + (f" (source: {ref.source})" if ref.source else " (no source given)")
    return f"{span} published by {publisher(ref.source)} for {ref.label}"
