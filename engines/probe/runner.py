"""The acceptance probe: readiness, warm-up, timed repeats, acceptance windows, aggregates.

Results use ``vllm bench serve``'s key names where they overlap (``output_throughput``,
``mean_tpot_ms``, ``spec_decode_acceptance_rate`` in percent, ``spec_decode_acceptance_length``,
per-position rates as fractions ...), so a probe file can be read next to a bench file. The
server's own histograms over the same window sit beside them as ``server_mean_ttft_ms`` and
``server_mean_itl_ms`` (``server_latency_source`` names them; ``latency_source`` says where the
probe's own times come from). Every
top-level figure is the median over repeats; ``stats`` holds median, MAD and the unstable flag,
``per_repeat`` the raw repeat aggregates. ``*_itl_ms`` are per streamed chunk, not per token.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from servelab.engines.errors import ServelabError
from servelab.engines.catalog.experiment import ProbeSettings
from servelab.engines.probe.client import RequestResult, chat_body, result_from_events, stream_chat
from servelab.engines.probe.conditions import RoundConditions, from_samples
from servelab.engines.probe.metrics import NoAcceptance, ServerLatency, latency_between
from servelab.engines.adapters.exchange import Acceptance, AcceptanceWindow, LatencyHistograms, Prompt, PromptSet
from servelab.engines.probe.stats import mean, median, percentile, summarise
from servelab.engines.probe.summary import ProbeSummary
from servelab.engines.probe.timer import RequestTimer, local_timer

if TYPE_CHECKING:
    from servelab.engines.adapters.base import EngineAdapter
    from servelab.engines.catalog.experiment import Experiment

#: Bumped when the result layout changes.
FORMAT_VERSION = 1
#: Figures summarised across repeats (median / MAD / unstable).
REPEAT_FIGURES: tuple[str, ...] = (
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "output_throughput", "total_token_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
    "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms",
    "mean_tokens_per_chunk", "eos_fraction",
    "spec_decode_acceptance_rate", "spec_decode_acceptance_length",
    "spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
    "server_mean_ttft_ms", "server_mean_itl_ms", "server_requests",
    "client_mean_cpu_wait_ms", "host_load1", "host_other_cores",
)

Progress = Callable[[str], None]
#: What a round's conditions add beyond the timed client's /proc samples (the GPU sampler, other runs alive).
ConditionsProbe = Callable[[RoundConditions], Awaitable[RoundConditions]]
#: A timed client that waited longer than this for a CPU per request gets it said in ``latency_source``.
CPU_WAIT_NOTE_MS = 2.0


@dataclass
class ProbeResult:
    """The summary (``probe.json``) and one row per timed request (``probe-requests.jsonl``)."""

    summary: ProbeSummary
    requests: list[dict[str, Any]] = field(default_factory=list)

    def summary_json(self) -> str:
        return self.summary.to_json()

    def requests_jsonl(self) -> str:
        return "".join(json.dumps(r, default=_json_default) + "\n" for r in self.requests)


def _json_default(value: Any) -> Any:
    """Anything JSON cannot encode natively (paths, enums) is written as text."""
    return str(value)


def _finite(x: float | None) -> float | None:
    return None if x is None or x != x else x


# -- readiness ------------------------------------------------------------------------------------
async def wait_ready(http: httpx.AsyncClient, timeout_s: float = 600.0, progress: Progress | None = None) -> str:
    """Wait for /health, learn the served model from /v1/models, then one tiny real generation.

    Returns the served model name. A server can answer /health before it can generate (compile,
    warm caches), so only a completed generation counts as ready.
    """
    deadline = time.monotonic() + timeout_s
    stage = "health"
    last = ""
    while time.monotonic() < deadline:
        try:
            if stage == "health":
                r = await http.get("/health")
                if r.status_code == 200:
                    stage = "models"
                    if progress:
                        progress("health ok")
                    continue
                last = f"/health answered {r.status_code}"
            elif stage == "models":
                r = await http.get("/v1/models")
                data = r.json().get("data") if r.status_code == 200 else None
                if data:
                    model = str(data[0]["id"])
                    res = await stream_chat(http, model, Prompt("ready", "readiness", ({"role": "user", "content": "Hi"},)), 2)
                    if res.ok:
                        if progress:
                            progress(f"ready: served model {model}")
                        return model
                    last = f"tiny generation failed: {res.error}"
                else:
                    last = f"/v1/models answered {r.status_code}"
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        await asyncio.sleep(1.0)
    raise ServelabError(f"server at {http.base_url} not ready after {timeout_s:.0f} s ({last or 'no answer'})")


async def served_model(http: httpx.AsyncClient) -> str:
    r = await http.get("/v1/models")
    r.raise_for_status()
    return str(r.json()["data"][0]["id"])


async def engine_version(http: httpx.AsyncClient, adapter: EngineAdapter | None = None) -> str | None:
    """The server's version from the paths its engine's adapter names (every engine's, in turn,
    for a server whose engine is not known)."""
    from servelab.engines.adapters.base import any_version_paths

    paths = adapter.version_paths if adapter is not None else any_version_paths()
    found = await _first_answer(http, paths, lambda answer: str(answer["version"]) if answer.get("version") else None)
    return found[0] if found is not None else None


async def server_settings(http: httpx.AsyncClient, adapter: EngineAdapter | None) -> tuple[dict[str, str], str]:
    """The settings the running server says it resolved, in common terms, and the path that said
    them (its adapter's ``settings.info_paths`` in turn); ``({}, "")`` when it says none."""
    from servelab.engines.verdict.fairness import served_settings

    if adapter is None:
        return {}, ""
    grammar = adapter.settings
    found = await _first_answer(http, grammar.info_paths, lambda answer: served_settings(grammar, answer) or None)
    return found if found is not None else ({}, "")


_T = TypeVar("_T")


async def _first_answer(http: httpx.AsyncClient, paths: Iterable[str], read: Callable[[Any], _T | None]) -> tuple[_T, str] | None:
    """What ``read`` makes of the first JSON answer (200) among ``paths`` that it makes something of, with its path."""
    for path in paths:
        try:
            r = await http.get(path)
            if r.status_code == 200:
                found = read(r.json())
                if found is not None:
                    return found, path
        except (httpx.HTTPError, ValueError, AttributeError):
            continue
    return None


# -- one repeat -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Repeat:
    results: list[RequestResult]
    duration_s: float
    kernel_clock: bool
    priority: str
    conditions: RoundConditions


async def time_round(
    timer: RequestTimer, model: str, prompts: PromptSet, max_tokens: int, concurrency: int, extra: dict[str, Any], timeout_s: float
) -> _Repeat:
    """One round of the prompt set, timed by ``timer`` (the probe's repeat; ``servelab ab``'s round)."""
    return await _time_repeat(timer, model, prompts, max_tokens, concurrency, extra, timeout_s)


async def _time_repeat(
    timer: RequestTimer, model: str, prompts: PromptSet, max_tokens: int, concurrency: int, extra: dict[str, Any], timeout_s: float
) -> _Repeat:
    """One repeat's requests, sent and timed by ``timer`` (off this event loop), as results; with
    whether every time is the kernel's receive time and the scheduling the client got."""
    bodies = [chat_body(model, p, max_tokens, extra) for p in prompts.prompts]
    batch = await timer.time_batch(bodies, concurrency, timeout_s)
    results = []
    for p, rec in zip(prompts.prompts, batch.records, strict=True):
        res = result_from_events(p, rec.events, start=rec.start_s, error=rec.error)
        res.client_cpu_wait_ms = rec.cpu_wait_ms
        results.append(res)
    return _Repeat(results, batch.duration_s, all(rec.kernel_stamps for rec in batch.records), batch.priority, from_samples(batch.host))


async def scrape_metrics(http: httpx.AsyncClient) -> str | None:
    """``/metrics`` as text, or None when the server has none (the figures are then absent)."""
    try:
        r = await http.get("/metrics")
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


def server_figures(latency: ServerLatency | None) -> dict[str, Any]:
    """The server's own figures for one repeat, under names that say so."""
    if latency is None:
        return {}
    return {
        "server_mean_ttft_ms": _finite(latency.mean_ttft_ms),
        "server_mean_itl_ms": _finite(latency.mean_itl_ms),
        "server_requests": latency.requests,
        "server_latency_source": latency.source,
    }


def aggregate(results: list[RequestResult], duration: float, acceptance: Acceptance | None) -> dict[str, Any]:
    """One repeat's figures, named like ``vllm bench serve``'s result file."""
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    tpots = [r.tpot_ms for r in ok if r.tpot_ms is not None]
    itls = [x for r in ok for x in r.chunk_itl_ms]
    e2els = [r.e2el_ms for r in ok if r.e2el_ms is not None]
    waits = [r.client_cpu_wait_ms for r in ok if r.client_cpu_wait_ms is not None]
    tpcs = [r.tokens_per_chunk for r in ok if r.tokens_per_chunk is not None]
    total_in = sum(int(r.prompt_tokens or 0) for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    out: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration if duration > 0 else None,
        "output_throughput": total_out / duration if duration > 0 else None,
        "total_token_throughput": (total_in + total_out) / duration if duration > 0 else None,
        "mean_tokens_per_chunk": _finite(mean(tpcs)),
        "eos_fraction": (sum(1 for r in ok if r.eos) / len(ok)) if ok else None,
        # Per request, how long the client sat runnable without a CPU: its reads are late by up to this.
        "client_mean_cpu_wait_ms": _finite(mean(waits)) if waits else None,
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        out[f"mean_{name}_ms"] = _finite(mean(values))
        out[f"median_{name}_ms"] = _finite(median(values))
        out[f"p99_{name}_ms"] = _finite(percentile(values, 99))
    if acceptance is not None:
        out["acceptance_source"] = acceptance.source
        out["spec_decode_acceptance_rate"] = acceptance.rate * 100.0 if acceptance.rate is not None else None
        out["spec_decode_acceptance_length"] = acceptance.length
        out["spec_decode_num_drafts"] = acceptance.drafts
        out["spec_decode_draft_tokens"] = acceptance.draft_tokens
        out["spec_decode_accepted_tokens"] = acceptance.accepted
        out["spec_decode_per_position_acceptance_rates"] = acceptance.per_position
    return out


def combine(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repeats at the top level, plus ``stats`` (median, MAD, n, unstable) per figure."""
    top: dict[str, Any] = {}
    stats: dict[str, Any] = {}
    for key in REPEAT_FIGURES:
        values = [r[key] for r in repeats if r.get(key) is not None]
        if not values:
            continue
        fig = summarise(values)
        top[key] = fig.median
        stats[key] = fig.to_dict()
    per_pos: list[list[float]] = [p for r in repeats if (p := r.get("spec_decode_per_position_acceptance_rates"))]
    if per_pos:
        width = min(len(p) for p in per_pos)
        figs = [summarise([p[i] for p in per_pos]) for i in range(width)]
        top["spec_decode_per_position_acceptance_rates"] = [f.median for f in figs]
        stats["spec_decode_per_position_acceptance_rates"] = [f.to_dict() for f in figs]
    sources = sorted({r["acceptance_source"] for r in repeats if r.get("acceptance_source")})
    if sources:
        top["acceptance_source"] = ", ".join(sources)
    top["unstable"] = sorted(k for k, v in stats.items() if isinstance(v, dict) and v["unstable"])
    top["stats"] = stats
    return top


def per_category(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per prompt category: median tokens per chunk (an acceptance proxy: acceptance depends on
    the kind of text), median TPOT and the EOS share, over all repeats."""
    out: dict[str, dict[str, Any]] = {}
    for cat in sorted({r["category"] for r in rows}):
        ok = [r for r in rows if r["category"] == cat and r["ok"]]
        out[cat] = {
            "requests": len(ok),
            "tokens_per_chunk": _finite(median([r["tokens_per_chunk"] for r in ok if r["tokens_per_chunk"] is not None])),
            "median_tpot_ms": _finite(median([r["tpot_ms"] for r in ok if r["tpot_ms"] is not None])),
            "eos_fraction": (sum(1 for r in ok if r["eos"]) / len(ok)) if ok else None,
        }
    return out


# -- the whole probe ------------------------------------------------------------------------------
async def run_probe(
    base_url: str,
    prompts: PromptSet,
    settings: ProbeSettings,
    *,
    adapter: EngineAdapter | None = None,
    experiment: Experiment | None = None,
    identity: dict[str, Any] | None = None,
    label: str | None = None,
    ready_timeout_s: float = 600.0,
    request_timeout_s: float = 300.0,
    progress: Progress | None = None,
    timer: RequestTimer | None = None,
    conditions: ConditionsProbe | None = None,
) -> ProbeResult:
    """Probe a running server. ``adapter`` reads acceptance and the server's latency histograms the
    engine's way (None: neither). ``timer`` sends the timed requests (default: a separate process on
    this machine against ``base_url``; over SSH, ``probe_run`` runs it on the server's host)."""
    plan = ProbePlan(
        base_url, prompts, settings, adapter=adapter, experiment=experiment, identity=identity, label=label,
        ready_timeout_s=ready_timeout_s, request_timeout_s=request_timeout_s, progress=progress, timer=timer or local_timer(base_url),
        conditions=conditions,
    )
    try:
        return await _run_probe(plan)
    except httpx.HTTPError as exc:
        raise ServelabError(f"probe of {base_url} failed: {type(exc).__name__}: {' '.join(str(exc).split())}") from None


@dataclass(frozen=True)
class ProbePlan:
    """One probe's inputs: the server, the prompts, the ``[probe]`` settings and how to read and time it."""

    base_url: str
    prompts: PromptSet
    settings: ProbeSettings
    timer: RequestTimer
    adapter: EngineAdapter | None = None
    experiment: Experiment | None = None
    identity: dict[str, Any] | None = None
    label: str | None = None
    ready_timeout_s: float = 600.0
    request_timeout_s: float = 300.0
    progress: Progress | None = None
    #: Adds the GPU sampler's figures and the other runs alive to each round's conditions.
    conditions: ConditionsProbe | None = None


async def _run_probe(plan: ProbePlan) -> ProbeResult:
    base_url, prompts, settings, adapter, experiment = plan.base_url, plan.prompts, plan.settings, plan.adapter, plan.experiment
    identity, label, ready_timeout_s, request_timeout_s, progress, timer = (
        plan.identity, plan.label, plan.ready_timeout_s, plan.request_timeout_s, plan.progress, plan.timer,
    )
    say = progress or (lambda _msg: None)
    hist: LatencyHistograms | None = adapter.latency_histograms if adapter is not None else None
    timeout = httpx.Timeout(request_timeout_s, connect=10.0)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, trust_env=False) as http:
        model = await wait_ready(http, ready_timeout_s, say)
        version = await engine_version(http, adapter)
        served, served_from = await server_settings(http, adapter)
        for i in range(settings.warmup):
            say(f"warm-up {i + 1}/{settings.warmup}")
            warm = await stream_chat(http, model, prompts.prompts[i % len(prompts)], min(settings.max_tokens, 32))
            if not warm.ok:
                raise ServelabError(f"warm-up request failed: {warm.error}")
        repeats: list[dict[str, Any]] = []
        rows: list[dict[str, Any]] = []
        kernel_clock = True
        priorities: set[str] = set()
        round_conditions: list[dict[str, Any]] = []
        for rep in range(settings.repeats):
            window: AcceptanceWindow = (
                adapter.read_acceptance(http, experiment, prompts, settings.max_tokens)
                if adapter is not None and experiment is not None
                else NoAcceptance()
            )
            await window.start()
            extra = window.request_fields()
            before = await scrape_metrics(http) if hist is not None else None
            timed = await _time_repeat(timer, model, prompts, settings.max_tokens, settings.concurrency, extra, request_timeout_s)
            results, duration = timed.results, timed.duration_s
            after = await scrape_metrics(http) if before is not None else None
            kernel_clock = kernel_clock and timed.kernel_clock
            if timed.priority:
                priorities.add(timed.priority)
            for res in results:
                if res.ok:
                    window.note(res.last_payload)
            acceptance = await window.finish()
            agg = aggregate(results, duration, acceptance)
            latency = latency_between(hist, before, after) if hist is not None and before is not None and after is not None else None
            agg.update(server_figures(latency))
            cond = await plan.conditions(timed.conditions) if plan.conditions is not None else timed.conditions
            agg["host_load1"], agg["host_other_cores"] = cond.load1, cond.other_cores
            round_conditions.append(cond.to_dict())
            agg["repeat"] = rep
            repeats.append(agg)
            for res in results:
                row = res.record()
                row["repeat"] = rep
                rows.append(row)
            failed = [r for r in results if not r.ok]
            say(
                f"repeat {rep + 1}/{settings.repeats}: {agg['output_throughput'] or 0:.1f} output tok/s"
                + (f", acceptance length {acceptance.length:.2f}" if acceptance else "")
                + (f", {len(failed)} failed ({failed[0].error})" if failed else "")
            )
            if len(failed) == len(results):
                raise ServelabError(f"every probe request failed: {failed[0].error}")
    ident = dict(identity or {})
    ident.setdefault("engine_version", version)
    if served:  # the running server's word wins over its log's
        ident["resolved_settings"] = {**(ident.get("resolved_settings") or {}), **served}
        ident["settings_source"] = f"the server's {served_from}" + (" over its log" if ident.get("settings_source") else "")
    ident["served_model"] = model
    ident["prompt_set"] = prompts.name
    ident["prompt_set_hash"] = prompts.hash
    combined = combine(repeats)
    source = f"{timer.where}; " + ("kernel receive time of each stream message" if kernel_clock else "time each stream message was read")
    source += f"; client at {' / '.join(sorted(priorities))}" if priorities else ""
    wait = combined.get("client_mean_cpu_wait_ms")
    if wait is not None and wait > CPU_WAIT_NOTE_MS:
        source += f"; the client waited {wait:.1f} ms a request for a CPU, so its TTFT is high and its TPOT low by up to that"
    summary: dict[str, Any] = {
        "format": f"servelab-probe/{FORMAT_VERSION}",
        "date": datetime.now(UTC).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai-chat",
        "backend": (adapter.name if adapter is not None else ident.get("engine")) or "openai-chat",
        "label": label,
        "model_id": model,
        "num_prompts": len(prompts),
        "request_rate": "inf",
        "max_concurrency": settings.concurrency,
        "max_tokens": settings.max_tokens,
        "temperature": 0.0,
        "repeats": settings.repeats,
        "num_warmups": settings.warmup,
        "prompt_set": prompts.name,
        "prompt_set_hash": prompts.hash,
        "itl_is_per_chunk": True,
        "latency_source": source,
        "server_latency_source": next((r["server_latency_source"] for r in repeats if r.get("server_latency_source")), None),
        **combined,
        "per_category": per_category(rows),
        "host_conditions": round_conditions,
        "per_repeat": repeats,
        "identity": ident,
    }
    return ProbeResult(summary=ProbeSummary(summary), requests=rows)
