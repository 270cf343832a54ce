"""The cost model of speculation, and the order of the reasons a verdict gives.

speedup ~= L / c, where L is the tokens a verify step yields (the acceptance length, bonus token
included) and c the time of a speculative step against a plain decode step, both from the server's
own counters and timings (``StepCost``). When speculation loses (the measured speedup, else the
estimate, below 1), the first reason is the factor that cost the most:

- **step cost** when no acceptance the diagnosis measured would make it pay at this cost, unless a
  draft token is cheap (``CHEAP_DRAFT``: at most 15% of a plain step each) and no better acceptance
  was measured: then the drafter itself is what is short;
- **acceptance** when the best measured acceptance (raw prompts, the better thinking mode, the weak
  category brought to the others' median) would make it pay.

Each acceptance finding gets its "what if": the acceptance it measured, as the speedup it would
give at the measured step cost, L scaled with the rate (``L' = 1 + (L - 1) x rate' / rate``):
"raw 41% would give 0.93x". The findings are ranked by that figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servelab.engines.diagnosis.model import Measurements, StepCost

#: A draft token costing at most this share of a plain step is cheap: a loss is then acceptance's.
CHEAP_DRAFT = 0.15


@dataclass(frozen=True)
class WhatIf:
    """One measured acceptance and the speedup it would give at the measured step cost."""

    code: str
    label: str
    rate: float
    speedup: float

    @property
    def text(self) -> str:
        return f"{self.label} {self.rate:.0%} would give {self.speedup:.2f}x"


@dataclass(frozen=True)
class CostModel:
    """speedup ~= tokens per verify step / cost of a speculative step against a plain one."""

    tokens_per_step: float
    step_ratio: float
    rate: float
    k: int | None
    measured: float | None
    fixes: list[WhatIf] = field(default_factory=list)

    @property
    def estimated(self) -> float:
        return self.tokens_per_step / self.step_ratio

    @property
    def speedup(self) -> float:
        """The measured speedup when there is one, else the estimate."""
        return self.measured if self.measured is not None else self.estimated

    @property
    def loses(self) -> bool:
        return self.speedup < 1.0

    @property
    def explains(self) -> bool:
        """The model's own arithmetic accounts for a loss: it estimates below 1x. A run measured
        slower while the model predicts a gain lost to something the model does not see (another
        finding, or none, says so), and the model names no factor."""
        return self.estimated < 1.0

    @property
    def per_draft(self) -> float | None:
        return (self.step_ratio - 1.0) / self.k if self.k else None

    def at_rate(self, rate: float) -> float:
        """The speedup at another acceptance rate, at this step cost."""
        return tokens_at(self.tokens_per_step, self.rate, self.k, rate) / self.step_ratio

    def break_even_rate(self) -> float | None:
        """The acceptance rate at which a step yields as many tokens as it costs (None: unknown)."""
        extra = self.tokens_per_step - 1.0
        if self.rate > 0 and extra > 0:
            return (self.step_ratio - 1.0) * self.rate / extra
        return (self.step_ratio - 1.0) / self.k if self.k else None

    @property
    def first(self) -> str:
        """``step-cost`` or ``acceptance``: the factor that cost the most (see the module)."""
        best = self.fixes[0].speedup if self.fixes else None
        if best is not None and best >= 1.0:
            return "acceptance"
        cheap = self.per_draft is not None and self.per_draft <= CHEAP_DRAFT
        return "acceptance" if cheap and best is None else "step-cost"

    def arithmetic(self) -> str:
        """``1.50 tokens per verify step / 1.95x step cost = 0.77x, measured 0.71x``."""
        meas = f", measured {self.measured:.2f}x" if self.measured is not None else ""
        return f"{self.tokens_per_step:.2f} tokens per verify step / {self.step_ratio:.2f}x step cost = {self.estimated:.2f}x{meas}"

    def reason(self) -> str:
        """The first reason, with its numbers."""
        need = self.break_even_rate()
        need_txt = f"acceptance over {need:.0%}" if need is not None and need <= 1.0 else "more accepted tokens than K can give"
        if self.first == "step-cost":
            return (f"step cost: a speculative step costs {self.step_ratio:.2f}x a plain one and yields {self.tokens_per_step:.2f} tokens "
                    f"({self.arithmetic()}); to pay it must cost under {self.tokens_per_step:.2f}x, or at this cost reach {need_txt}")
        best = f"; {self.fixes[0].text}" if self.fixes else ""
        return (f"acceptance: {self.rate:.0%} yields {self.tokens_per_step:.2f} tokens per step against {self.step_ratio:.2f}x step cost "
                f"({self.arithmetic()}); at this cost it takes {need_txt}{best}")


def tokens_at(length: float, rate: float, k: int | None, new_rate: float) -> float:
    """Tokens per verify step at ``new_rate``: the accepted part scaled with the rate (1 + K x rate without one)."""
    if rate > 0 and length > 1.0:
        return 1.0 + (length - 1.0) * new_rate / rate
    return 1.0 + (k or 1) * new_rate


def _fixes(m: Measurements, model: CostModel) -> list[WhatIf]:
    """The better acceptances the suite measured, each as the speedup it would give, best first."""
    o = m.overall
    rate = model.rate
    found: list[tuple[str, str, float]] = []
    if m.raw is not None and m.raw.rate is not None and m.raw.rate > rate:
        found.append(("template-gap", "raw", m.raw.rate))
    for code, arm in (("thinking-gap", m.thinking_on), ("thinking-gap", m.thinking_off)):
        if arm is not None and arm.rate is not None and arm.rate > rate:
            found.append((code, f"thinking {'on' if arm is m.thinking_on else 'off'}", arm.rate))
    cats = [a for a in m.categories if a.rate is not None]
    if len(cats) >= 2:
        worst = min(cats, key=lambda a: a.rate or 0.0)
        others = sorted(a.rate or 0.0 for a in cats if a is not worst)
        mid = others[len(others) // 2]
        if worst.rate is not None and mid > worst.rate:
            share = 1.0 / len(cats)
            if worst.draft_tokens and o.draft_tokens:
                share = min(1.0, worst.draft_tokens / o.draft_tokens)
            lifted = rate + (mid - worst.rate) * share
            if lifted > rate:
                found.append(("category-gap", f"{worst.name} at the others' {mid:.0%}: overall", lifted))
    out = [WhatIf(code, label, r, model.at_rate(r)) for code, label, r in found]
    # a fix that would not move the speedup as shown (two decimals) is no fix to rank
    return sorted((w for w in out if round(w.speedup, 2) > round(model.estimated, 2)), key=lambda w: -w.speedup)


def cost_model(m: Measurements, cost: StepCost, k: int | None) -> CostModel | None:
    """The run's cost model (None without a step cost or an acceptance length)."""
    o = m.overall
    if cost.ratio is None or cost.ratio <= 0 or o.length is None or o.rate is None:
        return None
    model = CostModel(o.length, cost.ratio, o.rate, k, cost.measured_speedup)
    return CostModel(model.tokens_per_step, model.step_ratio, model.rate, k, model.measured, _fixes(m, model))
