"""The short probe suite on a live server: acceptance bracketed around each group of requests.

Groups run one after another at concurrency 1, each inside its own acceptance window from the
engine's adapter (vLLM: the ``/metrics`` counters before and after; SGLang: per-request figures),
so each group's acceptance is its own:

- each prompt category, chat-templated, at temperature 0 (together: the overall figure);
- the same texts raw through ``/v1/completions`` (no template);
- thinking on and off, where the served template renders them differently (asked of ``/tokenize``);
- the serving temperature, on every prompt of the categories (the overall figure's own).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from servelab.engines.diagnosis.degenerate import unique_bigram_share, unique_char_share
from servelab.engines.diagnosis.model import Arm, Measurements
from servelab.engines.errors import ServelabError
from servelab.engines.probe.client import stream_chat
from servelab.engines.adapters.exchange import Acceptance, Prompt, PromptSet
from servelab.engines.probe.runner import served_model, wait_ready
from servelab.engines.probe.stats import median

if TYPE_CHECKING:
    from servelab.engines.adapters.base import EngineAdapter
    from servelab.engines.catalog.experiment import Experiment

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SuiteSettings:
    """How much the suite asks: prompts per category, tokens per answer, the serving temperature."""

    max_tokens: int = 48
    per_category: int = 4  # enough drafted tokens per category that a gap can be told from noise
    serving_temperature: float = 1.0
    temperature_source: str = "vLLM's default (1.0) when the model's generation_config.json sets none"


def pick(prompts: PromptSet, per_category: int) -> dict[str, PromptSet]:
    """The first ``per_category`` prompts of each category, in the set's order."""
    out: dict[str, list[Prompt]] = {}
    for p in prompts.prompts:
        bucket = out.setdefault(p.category, [])
        if len(bucket) < per_category:
            bucket.append(p)
    return {cat: PromptSet(f"{prompts.name}#{cat}", tuple(ps)) for cat, ps in out.items()}


def _arm(name: str, results: list[tuple[bool, str, list[float], str | None]], acc: Acceptance | None, share: float | None) -> Arm:
    ok = [r for r in results if r[0]]
    steps = [x for r in ok for x in r[2]]
    errors = [r[3] for r in results if r[3]]
    return Arm(
        name=name,
        requests=len(results),
        ok=len(ok),
        drafts=acc.drafts if acc else None,
        draft_tokens=acc.draft_tokens if acc else None,
        accepted=acc.accepted if acc else None,
        rate=acc.rate if acc else None,
        length=acc.length if acc else None,
        per_position=list(acc.per_position) if acc else [],
        unique_bigrams=share,
        median_step_ms=median(steps) if steps else None,
        error=(errors[0] if errors else None) if not ok else None,
    )


class _Suite:
    def __init__(self, http: httpx.AsyncClient, model: str, adapter: EngineAdapter, exp: Experiment, settings: SuiteSettings) -> None:
        self.http, self.model, self.adapter, self.exp, self.s = http, model, adapter, exp, settings
        #: False once the server showed it has no ``/tokenize`` (then characters stand in for tokens).
        self.can_tokenize = True

    async def tokens(self, text: str) -> list[int] | None:
        """The output's token ids by the server's own tokenizer (None: the server cannot say)."""
        if not self.can_tokenize:
            return None
        try:
            r = await self.http.post("/tokenize", json={"model": self.model, "prompt": text, "add_special_tokens": False})
            ids = r.json().get("tokens") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            ids = None
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            self.can_tokenize = False
            return None
        return ids

    async def share(self, texts: list[str]) -> float | None:
        """Distinct token bigrams (the degenerate-output measure), characters as the fallback."""
        ids = [await self.tokens(t) for t in texts]
        if self.can_tokenize and all(i is not None for i in ids):
            return unique_bigram_share(i for i in ids if i is not None)
        return unique_char_share(texts)

    async def chat_arm(self, name: str, prompts: PromptSet, extra: dict[str, Any]) -> Arm:
        window = self.adapter.read_acceptance(self.http, self.exp, prompts, self.s.max_tokens)
        await window.start()
        fields = {**window.request_fields(), **extra}
        results: list[tuple[bool, str, list[float], str | None]] = []
        for p in prompts.prompts:
            res = await stream_chat(self.http, self.model, p, self.s.max_tokens, fields)
            if res.ok:
                window.note(res.last_payload)
            results.append((res.ok, res.text, res.chunk_itl_ms, res.error))
        acc = await window.finish()  # before /tokenize: its requests are not in the window, but keep it tight
        return _arm(name, results, acc, await self.share([r[1] for r in results if r[0]]))

    async def raw_arm(self, name: str, prompts: PromptSet) -> Arm:
        """The same texts without any template: ``/v1/completions`` with the bare user text."""
        window = self.adapter.read_acceptance(self.http, self.exp, prompts, self.s.max_tokens)
        await window.start()
        results: list[tuple[bool, str, list[float], str | None]] = []
        for p in prompts.prompts:
            body = {"model": self.model, "prompt": p.text, "max_tokens": self.s.max_tokens, "temperature": 0.0, **window.request_fields()}
            try:
                r = await self.http.post("/v1/completions", json=body)
                if r.status_code != 200:
                    results.append((False, "", [], f"HTTP {r.status_code}: {' '.join(r.text[:200].split())}"))
                    continue
                payload = r.json()
                window.note(payload)
                results.append((True, str(payload["choices"][0].get("text") or ""), [], None))
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                results.append((False, "", [], f"{type(exc).__name__}: {exc}"))
        acc = await window.finish()
        return _arm(name, results, acc, await self.share([r[1] for r in results if r[0]]))

    async def template_has_thinking(self, prompt: Prompt) -> bool | None:
        """Whether the served template renders ``enable_thinking`` on and off differently (None: cannot tell)."""
        rendered = []
        for flag in (True, False):
            body = {"model": self.model, "messages": [dict(m) for m in prompt.messages], "add_generation_prompt": True,
                    "chat_template_kwargs": {"enable_thinking": flag}}
            try:
                r = await self.http.post("/tokenize", json=body)
                if r.status_code != 200:
                    return None
                rendered.append(json.dumps(r.json().get("tokens")))
            except (httpx.HTTPError, ValueError):
                return None
        return rendered[0] != rendered[1]


def combine(name: str, arms: list[Arm]) -> Arm:
    """Pool category arms into one: counts add up, so rates are weighted by drafts."""
    counted = [a for a in arms if a.drafts]
    drafts = sum(a.drafts or 0.0 for a in counted)
    steps = [a.median_step_ms for a in arms if a.median_step_ms is not None]
    shares = [a.unique_bigrams for a in arms if a.unique_bigrams is not None]
    if not counted or drafts <= 0:
        errors = [a.error for a in arms if a.error]
        return Arm(name, sum(a.requests for a in arms), sum(a.ok for a in arms), unique_bigrams=sum(shares) / len(shares) if shares else None,
                   median_step_ms=median(steps) if steps else None, error=errors[0] if errors else None)
    width = min(len(a.per_position) for a in counted)
    per_pos = [sum(a.per_position[i] * (a.drafts or 0.0) for a in counted) / drafts for i in range(width)]
    accepted = sum(a.accepted or 0.0 for a in counted)
    draft_tokens = sum(a.draft_tokens or 0.0 for a in counted)
    rate = accepted / draft_tokens if draft_tokens > 0 else None
    return Arm(
        name, sum(a.requests for a in arms), sum(a.ok for a in arms), drafts=drafts, draft_tokens=draft_tokens, accepted=accepted, rate=rate, length=1.0 + accepted / drafts,
        per_position=per_pos, unique_bigrams=sum(shares) / len(shares) if shares else None, median_step_ms=median(steps) if steps else None,
    )


async def measure(
    base_url: str,
    adapter: EngineAdapter,
    exp: Experiment,
    prompts: PromptSet,
    settings: SuiteSettings,
    *,
    progress: Progress | None = None,
    ready_timeout_s: float = 120.0,
) -> Measurements:
    """Run the suite against the server at ``base_url`` (it must already serve)."""
    say = progress or (lambda _m: None)
    groups = pick(prompts, settings.per_category)
    if not groups:
        raise ServelabError("diagnosis needs at least one prompt")
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(300.0, connect=10.0), trust_env=False) as http:
            try:
                model = await served_model(http)
            except (httpx.HTTPError, KeyError, IndexError, ValueError):
                model = await wait_ready(http, ready_timeout_s, say)
            suite = _Suite(http, model, adapter, exp, settings)
            await stream_chat(http, model, prompts.prompts[0], 8)  # warm-up outside every window
            cats: list[Arm] = []
            for cat, group in groups.items():
                t0 = time.perf_counter()
                arm = await suite.chat_arm(cat, group, {})
                say(f"{cat}: acceptance {_txt(arm.rate)} over {arm.ok}/{arm.requests} requests ({time.perf_counter() - t0:.1f} s)")
                cats.append(arm)
            overall = combine("chat, temperature 0", cats)
            one_each = PromptSet(f"{prompts.name}#one-per-category", tuple(g.prompts[0] for g in groups.values()))
            raw = await suite.raw_arm("raw, temperature 0", one_each)
            say(f"raw prompts: acceptance {_txt(raw.rate)}")
            has_thinking = await suite.template_has_thinking(one_each.prompts[0])
            on = off = None
            if has_thinking:
                on = await suite.chat_arm("thinking on", one_each, {"chat_template_kwargs": {"enable_thinking": True}})
                off = await suite.chat_arm("thinking off", one_each, {"chat_template_kwargs": {"enable_thinking": False}})
                say(f"thinking on {_txt(on.rate)}, off {_txt(off.rate)}")
            else:
                say("thinking A/B: " + ("the served template has no thinking switch" if has_thinking is False else "cannot render the template (no /tokenize)"))
            hot = None
            if settings.serving_temperature > 0:
                # the same prompts as the overall figure it is compared with, so the gap is the
                # temperature's alone; a sampled arm also needs their drafts: on one prompt per
                # category the same server gave 2% to 20% (a seed does not fix a sampled
                # speculative run), on all of them 6% to 10%
                every = PromptSet(f"{prompts.name}#suite", tuple(p for g in groups.values() for p in g.prompts))
                hot = await suite.chat_arm(f"temperature {settings.serving_temperature:g}", every, {"temperature": settings.serving_temperature, "seed": 0})
                say(f"temperature {settings.serving_temperature:g}: acceptance {_txt(hot.rate)}")
    except httpx.HTTPError as exc:
        raise ServelabError(f"diagnosis of {base_url} failed: {type(exc).__name__}: {' '.join(str(exc).split())}") from None
    return Measurements(
        overall=overall, categories=cats, raw=raw, thinking_on=on, thinking_off=off, template_has_thinking=has_thinking,
        serving_temperature=settings.serving_temperature, temperature_source=settings.temperature_source, at_temperature=hot,
    )


def _txt(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"
