"""The whole diagnosis of one live server, given what the run knows about itself.

``artifacts.diagnose_run`` gathers the facts from a run's folder; anything that has a server and
an experiment definition (a test's own server, a script) can call :func:`diagnose_server`.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from servelab.engines.adapters.base import get_adapter
from servelab.engines.diagnosis.cost import step_cost
from servelab.engines.diagnosis.measure import Progress, SuiteSettings, measure
from servelab.engines.diagnosis.model import Diagnosis, DrafterIdentity, OtherTarget, Provenance, ReferenceMatch, StaticCheck
from servelab.engines.diagnosis.reference import closest
from servelab.engines.diagnosis.rules import RunFacts, diagnose
from servelab.engines.errors import ServelabError
from servelab.engines.probe.client import until_listening
from servelab.engines.probe.metrics import latency_between
from servelab.engines.adapters.exchange import PromptSet, TargetIdentity

if TYPE_CHECKING:
    from servelab.engines.catalog.experiment import Experiment


async def _scrape(base_url: str) -> str | None:
    """``/metrics`` as text, or None when the server has none (the client's chunk gaps are used then)."""
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as http:
            r = await http.get("/metrics")
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


@dataclass(frozen=True)
class Pairing:
    """The drafter and target as a pair: the served target's fingerprint, this drafter's best run on
    other target weights, and what the drafter's training record says it was trained for."""

    target: TargetIdentity | None = None
    other_target: OtherTarget | None = None
    provenance: Provenance | None = None


@dataclass(frozen=True)
class Baseline:
    """The plain decode step to hold a speculative step against, and the measured speedup."""

    plain_ms: float | None = None
    run: str | None = None
    measured_speedup: float | None = None
    note: str = "no baseline given"


async def diagnose_server(
    base_url: str,
    exp: Experiment,
    prompts: PromptSet,
    *,
    run: str,
    model_path: str,
    drafter_path: str | None,
    settings: SuiteSettings | None = None,
    baseline: Baseline | None = None,
    static: tuple[StaticCheck, ...] | None = None,
    progress: Progress | None = None,
    reference: ReferenceMatch | None = None,
    drafter: DrafterIdentity | None = None,
    pairing: Pairing | None = None,
) -> Diagnosis:
    """Measure, model the step cost, find the reference, rank the findings.

    ``static``: what the drafter checks found (None when they did not run). ``reference``: the one
    to hold the run against (``local.reference_for``); the closest published figure when None.
    ``drafter``: the drafter's identity, kept in the diagnosis for later runs' local reference.
    ``pairing``: the served target's fingerprint, the drafter's best run on other target weights and
    its training record (kept in the diagnosis; the pairing finding and the dead-start causes read them).
    """
    t0 = time.monotonic()
    s = exp.speculative
    if s.method == "none":
        raise ServelabError(f"{run} does not speculate ([speculative] method = \"none\"): nothing to diagnose")
    adapter = get_adapter(exp.engine)
    hist = adapter.latency_histograms
    await until_listening(base_url)  # the log says ready; its server may listen a moment later (once, before any request)
    before = await _scrape(base_url) if hist is not None else None
    meas = await measure(base_url, adapter, exp, prompts, settings or SuiteSettings(), progress=progress)
    after = await _scrape(base_url) if before is not None else None
    server_step = latency_between(hist, before, after).mean_itl_ms if hist is not None and before is not None and after is not None else None
    b = baseline or Baseline()
    cost = step_cost(meas.overall, s.num_tokens, b.plain_ms, b.run, b.measured_speedup, b.note if b.plain_ms is None else "", server_step_ms=server_step)
    ref = reference or closest(exp.model, s.draft_model, exp.engine, s.num_tokens, s.method)
    p = pairing or Pairing()
    findings = diagnose(RunFacts(s.method, s.num_tokens, model_path, drafter_path, static, p.target, p.other_target, p.provenance), meas, cost, ref)
    return Diagnosis(
        run=run, experiment=exp.name, engine=exp.engine, method=s.method, k=s.num_tokens,
        date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), measurements=meas, cost=cost, reference=ref,
        findings=findings, seconds=round(time.monotonic() - t0, 1), static=None if static is None else list(static),
        drafter=drafter, target=p.target, other_target=p.other_target, provenance=p.provenance,
    )
