"""A campaign's results: one row per point, figures made from the records the supervisor saved.

The supervisor only stores raw timed events and the server's ``/metrics`` text around each repeat
(``points/<point>.json``); the figures are made here with the probe's own rules, so a campaign
point and ``servelab probe`` agree: ``probe.client.result_from_events`` per request,
``probe.runner.aggregate``/``combine`` per repeat and over repeats (median, MAD), acceptance
through the engine adapter's own window replayed over the recorded ``/metrics`` texts, and the
server's latency histograms through ``probe.metrics.latency_between``. The noise band of a figure
is ``MAD_TO_SIGMA x MAD`` over the repeats (``probe.stats``); a speedup's band adds the two
relative bands in quadrature.
"""

from __future__ import annotations

import csv
import io
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import httpx
from pydantic import ValidationError

from servelab.engines.adapters.base import get_adapter
from servelab.engines.campaign.control import locate
from servelab.engines.campaign.document import PLAN_JSON, STATE_JSON, Located
from servelab.engines.campaign.diagnosis import diagnose_point, headline
from servelab.engines.catalog.folder import Catalog
from servelab.engines.diagnosis.degenerate import unique_char_share
from servelab.engines.diagnosis.model import Finding
from servelab.engines.errors import ServelabError
from servelab.engines.catalog.experiment import Experiment
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.adapters.exchange import Acceptance, Prompt, PromptSet
from servelab.engines.probe.prompts import load as load_prompts
from servelab.engines.probe.runner import aggregate, combine, server_figures
from servelab.engines.probe.metrics import latency_between
from servelab.engines.probe.client import result_from_events
from servelab.engines.probe.stats import MAD_TO_SIGMA
from servelab.engines.probe.summary import ProbeSummary
from servelab.engines.runs.records import RunsAPI
from servelab.engines.runs.state import CampaignState

FORMATS = ("table", "markdown", "csv", "json")


@dataclass(frozen=True)
class PointRow:
    """One point of the results table."""

    point: str
    load: int
    engine: str
    label: str
    status: CampaignState
    error: str | None
    baseline_point: str | None
    output_tps: float | None = None
    output_tps_band: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    acceptance_rate: float | None = None
    acceptance_length: float | None = None
    per_position: tuple[float, ...] = ()
    load_s: float | None = None
    speedup: float | None = None
    speedup_band: float | None = None
    unstable: tuple[str, ...] = ()
    k: int | None = None
    concurrency: int | None = None
    method: str | None = None  # the speculative method; None for a baseline point
    step_ms: float | None = None  # time per engine step: the server's mean inter-token latency, else the client's median chunk gap
    distinct_share: float | None = None  # distinct character 8-grams of the outputs (low: looping output)
    diagnosis: tuple[Finding, ...] = ()  # ranked findings when acceptance is low or speculation does not pay
    host: str | None = None  # the host it ran on (every point's in a fleet campaign; the campaign's host otherwise)
    moved: str | None = None  # "moved from X: why" when its load was taken off a host


@dataclass(frozen=True)
class BatchSizeTable:
    """The best K at each measured concurrency of one engine and method, and the engine's own setting for it."""

    engine: str
    method: str
    best_k: tuple[tuple[int, int], ...]  # (concurrency, K); K 0 where no K beat its baseline
    flags: str | None  # ready to paste (adapter.batch_size_schedule); None: no such setting, or K 0 everywhere

    def line(self) -> str:
        pairs = ", ".join(f"c={c}: K={k}" for c, k in self.best_k)
        head = f"{self.engine} {self.method} best K by concurrency ({pairs})"
        if all(k == 0 for _, k in self.best_k):
            return f"{head}: no K beat the baseline at any measured concurrency; serve without speculation"
        return f"{head}: {self.flags}" if self.flags else f"{head} ({self.engine} has no per-batch-size K setting)"


@dataclass
class CampaignReport:
    id: str
    campaign: str
    status: CampaignState
    rows: list[PointRow]
    recommendation: str | None
    batch_size_tables: list[BatchSizeTable] = field(default_factory=list)
    #: A fleet campaign's hosts (each row then says its point's host); empty on one host.
    hosts: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "campaign": self.campaign, "status": self.status, "recommendation": self.recommendation, "hosts": self.hosts,
            "batch_size_tables": [{**asdict(t), "line": t.line()} for t in self.batch_size_tables],
            "points": [asdict(r) for r in self.rows],
        }


# -- figures of one point ---------------------------------------------------------------------------
class _RecordedMetrics:
    """The server's ``/metrics`` as recorded before and after one repeat, served in that order.

    The engine's own acceptance window asks for ``/metrics`` at its start and at its finish; here
    it reads the two recorded texts, so acceptance is computed by exactly the live probe's code.
    """

    def __init__(self, before: str | None, after: str | None) -> None:
        self.texts = [before, after]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics" and self.texts:
            text = self.texts.pop(0)
            if text is not None:
                return httpx.Response(200, text=text)
        return httpx.Response(404, text="not recorded")


async def _acceptance(exp: Experiment, prompts: PromptSet, max_tokens: int, repeat: Mapping[str, Any], payloads: list[dict[str, Any]]) -> Acceptance | None:
    if exp.speculative.method == "none":
        return None
    transport = httpx.MockTransport(_RecordedMetrics(repeat.get("metrics_before"), repeat.get("metrics_after")))
    async with httpx.AsyncClient(transport=transport, base_url="http://recorded") as http:
        window = get_adapter(exp.engine).read_acceptance(http, exp, prompts, max_tokens)
        try:
            await window.start()
            for payload in payloads:
                window.note(payload)
            return await window.finish()
        except (httpx.HTTPError, ValueError, KeyError, RuntimeError):
            return None  # not recorded (no /metrics): acceptance stays absent, not zero


async def point_summary(exp: Experiment, point: Mapping[str, Any], data: Mapping[str, Any], prompts: PromptSet) -> ProbeSummary:
    """``combine`` over the point's repeats: medians at the top, ``stats`` with MAD per figure."""
    by_id = {p.id: p for p in prompts.prompts}
    order = [by_id.get(i) or Prompt(i, "unknown", ()) for i in point["prompt_ids"]]
    max_tokens = int(point["probe"]["max_tokens"])
    hist = get_adapter(exp.engine).latency_histograms
    repeats: list[dict[str, Any]] = []
    texts: list[str] = []
    for rep in data.get("repeats") or []:
        records = rep.get("records") or []
        results = [
            result_from_events(p, [(float(e[0]), None if e[1] is None else float(e[1]), str(e[2])) for e in r.get("events") or []], start=float(r.get("start_s") or 0.0), error=r.get("error"))
            for p, r in zip(order, records, strict=False)
        ]
        texts += [r.text for r in results if r.ok]
        acc = await _acceptance(exp, prompts, max_tokens, rep, [r.last_payload for r in results if r.ok])
        agg = aggregate(results, float(rep.get("duration_s") or 0.0), acc)
        before, after = rep.get("metrics_before"), rep.get("metrics_after")
        if hist is not None and before and after:
            try:
                agg.update(server_figures(latency_between(hist, before, after)))
            except ValueError:
                pass
        repeats.append(agg)
    if not repeats:
        return ProbeSummary()
    return ProbeSummary({**combine(repeats), "output_distinct_share": unique_char_share(texts), "requests": len(texts)})


def _band(summary: ProbeSummary, key: str) -> float | None:
    fig = summary.stat(key)
    if fig.get("mad") is None or fig["mad"] != fig["mad"]:
        return None
    return float(fig["mad"]) * MAD_TO_SIGMA


def _speedup(row: PointRow, base: PointRow | None) -> tuple[float | None, float | None]:
    if base is None or not row.output_tps or not base.output_tps:
        return None, None
    s = row.output_tps / base.output_tps
    ra = (row.output_tps_band or 0.0) / row.output_tps
    rb = (base.output_tps_band or 0.0) / base.output_tps
    return s, s * math.hypot(ra, rb)


# -- the report --------------------------------------------------------------------------------------
async def _read_json(where: Located, name: str) -> Any:
    try:
        raw = await where.host.read_bytes(f"{where.dir}/{name}")
    except FileNotFoundError:
        return None
    except HostUnreachable as exc:
        raise ServelabError(str(exc)) from None
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise ServelabError(f"campaign {where.id}: {name} is not valid JSON") from None


def _experiment(load: Mapping[str, Any]) -> Experiment:
    try:
        return Experiment.model_validate(tomllib.loads(str(load["experiment_toml"])))
    except (tomllib.TOMLDecodeError, ValidationError, KeyError) as exc:
        raise ServelabError(f"plan.json: load {load.get('index')} has no valid experiment ({type(exc).__name__})") from None


async def build_report(runs: RunsAPI, ref: str) -> CampaignReport:
    """Every point of a campaign run (the latest of a campaign file, or by id) with its figures;
    the runs of ``runs`` (its catalog's folder) are read for the crashed loads' root causes."""
    catalog = runs.catalog
    where = await locate(catalog, ref)
    plan_doc = await _read_json(where, PLAN_JSON)
    state = await _read_json(where, STATE_JSON) or {}
    if not isinstance(plan_doc, dict):
        raise ServelabError(f"campaign {where.id}: no plan.json on {where.host.name}")
    loads = {int(ld["index"]): ld for ld in plan_doc["loads"]}
    load_states = {int(ld["index"]): ld for ld in state.get("loads") or []}
    exps = {i: _experiment(ld) for i, ld in loads.items()}
    causes = await crash_causes(runs, load_states)
    prompt_sets: dict[str, PromptSet] = {}
    rows: dict[str, PointRow] = {}
    requests: dict[str, int] = {}
    for point in plan_doc["points"]:
        name = point["name"]
        ps = (state.get("points") or {}).get(name, {})
        exp = exps[int(point["load"])]
        values = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in (point.get("values") or {}).items())
        spec = exp.speculative
        label = str(point.get("base")) + (f" {spec.method} K={spec.num_tokens}" if spec.method != "none" else "") + (f" ({values})" if values else "")
        fields: dict[str, Any] = {
            "point": name, "load": int(point["load"]), "engine": point["engine"], "label": label,
            "status": CampaignState.parse(ps.get("status"), CampaignState.PENDING), "baseline_point": point.get("baseline_point"),
            "error": f"{ps.get('error')}; root cause: {causes[int(point['load'])]}" if ps.get("error") and int(point["load"]) in causes else ps.get("error"),
            "load_s": load_states.get(int(point["load"]), {}).get("load_s"),
            "k": exp.speculative.num_tokens if exp.speculative.method != "none" else None,
            "concurrency": int(point["probe"]["concurrency"]),
            "method": spec.method if spec.method != "none" else None,
            "host": ps.get("host") or (None if plan_doc.get("fleet") else plan_doc.get("host")),
            "moved": f"moved from {ps['moved_from']}: {ps.get('moved_why')}" if ps.get("moved_from") else None,
        }
        if fields["status"] is CampaignState.DONE and ps.get("result"):
            data = await _read_json(where, str(ps["result"]))
            prompt_spec = str(point["probe"]["prompts"])
            if prompt_spec not in prompt_sets:
                prompt_sets[prompt_spec] = load_prompts(prompt_spec, base=catalog.folder)
            summary = await point_summary(exp, point, data or {}, prompt_sets[prompt_spec])
            rate = summary.acceptance_rate
            fields.update(
                output_tps=summary.output_throughput,
                output_tps_band=_band(summary, "output_throughput"),
                ttft_ms=summary.median_ttft_ms,
                tpot_ms=summary.median_tpot_ms,
                acceptance_rate=rate / 100.0 if rate is not None else None,
                acceptance_length=summary.acceptance_length,
                per_position=tuple(summary.per_position),
                unstable=tuple(summary.unstable),
                step_ms=summary.server_mean_itl_ms or summary.median_itl_ms,
                distinct_share=summary.output_distinct_share,
            )
            requests[name] = summary.requests
        rows[name] = PointRow(**fields)
    out: list[PointRow] = []
    for row in rows.values():
        base = rows.get(row.baseline_point) if row.baseline_point else None
        s, band = _speedup(row, base)
        found = diagnose_point(
            exps[row.load], rate=row.acceptance_rate, length=row.acceptance_length, per_position=row.per_position,
            distinct_share=row.distinct_share, step_ms=row.step_ms, baseline_step_ms=base.step_ms if base else None,
            baseline_point=row.baseline_point, speedup=s, requests=requests.get(row.point, 0), concurrency=row.concurrency or 1,
        ) if row.status == CampaignState.DONE else ()
        out.append(replace(row, speedup=s, speedup_band=band, diagnosis=found))
    tables = batch_size_tables(out, {int(p["load"]): exps[int(p["load"])] for p in plan_doc["points"]})
    return CampaignReport(where.id, str(plan_doc.get("campaign")), CampaignState.parse(state.get("status"), CampaignState.NOT_STARTED), out, recommend(out), tables,
                          [str(h) for h in plan_doc.get("hosts") or []] if plan_doc.get("fleet") else [])


async def crash_causes(runs: RunsAPI, load_states: Mapping[int, Mapping[str, Any]]) -> dict[int, str]:
    """The root cause the log analyzer finds in each crashed load's run (the supervisor only knows the exit code)."""
    out: dict[int, str] = {}
    for index, ls in load_states.items():
        if CampaignState.parse(ls.get("status")) is not CampaignState.CRASHED or not ls.get("run_id"):
            continue
        try:
            st = await runs.status(str(ls["run_id"]))
        except (ServelabError, HostUnreachable, OSError):
            continue  # the run is gone or its host is down: the exit code stays the reason
        rc = st.analysis.root_cause if st.analysis is not None else None
        if rc is not None:
            out[index] = (f"{rc.exception}: " if rc.exception else "") + rc.message
    return out


def best_k_per_concurrency(rows: list[PointRow]) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """Per engine and method measured at more than one concurrency: each concurrency's K with the
    best speedup, or 0 when even that one does not beat its baseline (speedup <= 1)."""
    groups: dict[tuple[str, str], dict[int, PointRow]] = {}
    for r in rows:
        if r.k is None or r.speedup is None or r.method is None or r.concurrency is None:
            continue
        by_c = groups.setdefault((r.engine, r.method), {})
        held = by_c.get(r.concurrency)
        if held is None or r.speedup > (held.speedup or 0.0):
            by_c[r.concurrency] = r
    return {
        key: [(c, (r.k or 0) if (r.speedup or 0.0) > 1.0 else 0) for c, r in sorted(by_c.items())]
        for key, by_c in groups.items()
        if len(by_c) > 1
    }


def batch_size_tables(rows: list[PointRow], exps: Mapping[int, Experiment]) -> list[BatchSizeTable]:
    """One table per engine and method when concurrency was an axis; the flags come from the engine's adapter."""
    out: list[BatchSizeTable] = []
    for (engine, method), best in best_k_per_concurrency(rows).items():
        load = next(r.load for r in rows if r.engine == engine and r.method == method and r.k is not None)
        out.append(BatchSizeTable(engine, method, tuple(best), get_adapter(engine).batch_size_schedule(exps[load], best)))
    return out


def recommend(rows: list[PointRow]) -> str | None:
    """The best measured speedup with its band, and what the next K adds over it (same engine and concurrency)."""
    scored = [r for r in rows if r.speedup is not None and r.k is not None]
    if not scored:
        return None
    best = max(scored, key=lambda r: r.speedup or 0.0)
    band = f" ±{best.speedup_band:.2f}" if best.speedup_band is not None else ""
    text = f"{best.engine} {best.label}: {best.speedup:.2f}x{band} over baseline"
    if best.speedup is not None and best.speedup + (best.speedup_band or 0.0) < 1.0:
        text += " (slower than the baseline: serve without speculation)"
    elif best.speedup is not None and best.speedup_band is not None and best.speedup - best.speedup_band <= 1.0:
        text += " (within the noise band of no gain)"
    nxt = sorted((r for r in scored if r.engine == best.engine and r.concurrency == best.concurrency and (r.k or 0) > (best.k or 0)), key=lambda r: r.k or 0)
    n = nxt[0] if nxt else None
    if n is not None and n.acceptance_length is not None and best.acceptance_length is not None and n.tpot_ms and best.tpot_ms:
        gain = n.acceptance_length - best.acceptance_length
        cost = (n.tpot_ms / best.tpot_ms - 1.0) * 100.0
        text += f"; K={n.k} adds {gain:+.2f} tokens per step for {cost:+.0f}% time per output token"
    return text


# -- formats ----------------------------------------------------------------------------------------
COLUMNS = ("point", "status", "accept", "accept_len", "per_position", "tok/s", "±", "ttft_ms", "tpot_ms", "load_s", "speedup", "±x")


def _short(text: str, width: int = 90) -> str:
    """A table cell keeps the end of a long reason (where the cause is); --format json has it whole."""
    return text if len(text) <= width else "..." + text[-(width - 3):]


def _cells(r: PointRow) -> list[str]:
    def f(x: float | None, fmt: str) -> str:
        return "" if x is None or x != x else format(x, fmt)

    return [
        f"{r.engine} {r.label}",
        r.status + (f" ({_short(r.error)})" if r.error and r.status != CampaignState.DONE else ""),
        f(r.acceptance_rate * 100.0 if r.acceptance_rate is not None else None, ".0f") + ("%" if r.acceptance_rate is not None else ""),
        f(r.acceptance_length, ".2f"),
        " ".join(f"{p:.2f}" for p in r.per_position),
        f(r.output_tps, ".1f"),
        f(r.output_tps_band, ".1f"),
        f(r.ttft_ms, ".0f"),
        f(r.tpot_ms, ".1f"),
        f(r.load_s, ".0f"),
        f(r.speedup, ".2f") + ("x" if r.speedup is not None else ""),
        f(r.speedup_band, ".2f"),
    ]


def render(report: CampaignReport, fmt: str) -> str:
    if fmt not in FORMATS:
        raise ServelabError(f"unknown report format {fmt!r} (formats: {', '.join(FORMATS)})")
    if fmt == "json":
        return json.dumps(report.to_json(), indent=2)
    fleet = bool(report.hosts)
    columns = COLUMNS[:2] + ("host",) + COLUMNS[2:] if fleet else COLUMNS
    rows = [_cells(r) for r in report.rows]
    if fleet:  # points on several hosts: each one's host, and where its load was moved from
        rows = [row[:2] + [(r.host or "") + (f" ({r.moved})" if r.moved else "")] + row[2:] for row, r in zip(rows, report.rows, strict=True)]
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
        return buf.getvalue().rstrip("\n")
    head = f"campaign {report.id}: {report.status}" + (f" (fleet: {', '.join(report.hosts)})" if report.hosts else "")
    tail = [f"recommendation: {report.recommendation}"] if report.recommendation else []
    tail += [f"per batch size: {t.line()}" for t in report.batch_size_tables]
    for r in report.rows:
        top = headline(r.diagnosis)
        if top is not None:
            tail.append(f"diagnosis {r.engine} {r.label}: {top.message} (next: {top.next})")
    if fmt == "markdown":
        lines = [f"**{head}**", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return "\n".join(lines + [part for t in tail for part in ("", t)])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(columns)]
    lines = [head, "  ".join(h.ljust(w) for h, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines + tail)
