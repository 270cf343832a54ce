"""Run history: what earlier runs say about an experiment, for the dashboard and the CLI alike.

- :func:`latest_runs`: each experiment's newest run with its state, load time and probe figures;
- :func:`display_state`: the one word a run's state is shown as (the log's word while it runs);
- :func:`headline`: a run's header, that word with what its process does, from one look;
- :func:`earlier_stage_seconds`: median stage durations of earlier loads, for ETAs;
- :func:`latest_probed`: the newest run of each experiment that has a probe to compare;
- :func:`engine_state`: what a live run's engine does (loading, ready, serving);
- :func:`run_history`: one experiment's runs over time with who, when and their figures.

A rehearsal (dummy weights) is never an experiment's latest run nor a source of load estimates.

These are decisions about runs, so they live in the core; ``tui/`` only draws what they return.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import median

from servelab.engines.probe.speedup import baseline_speedup
from servelab.engines.errors import ServelabError
from servelab.engines.runs.loadtime import load_seconds, load_text
from servelab.engines.logs.analysis import Analysis
from servelab.engines.probe.artifacts import load_probe
from servelab.engines.probe.summary import ProbeSummary
from servelab.engines.runs.records import RunRecord, RunStatus
from servelab.engines.runs.records import RunsAPI
from servelab.engines.runs.state import EngineState, RunState


@dataclass
class LatestRun:
    """The newest run of one experiment, with the figures the experiments table shows."""

    run_id: str
    state: RunState
    load_s: float | None = None  # start to ready (loadtime.load_seconds)
    acceptance_rate: float | None = None  # percent
    acceptance_length: float | None = None
    output_throughput: float | None = None
    speedup: float | None = None
    #: The speedup's noise band (±, from the probes' repeats); None when it has none.
    speedup_band: float | None = None
    #: Who launched it (``user@machine``; "" for a run recorded before owners were) and the user alone.
    owner: str = ""
    launched_by: str = ""

    @property
    def load_text(self) -> str:
        """The load figure as every view shows it ("" when unknown)."""
        return load_text(self.load_s)

    @property
    def accept_text(self) -> str:
        """Acceptance as every view shows it: the rate (compare's rounding), its length beside it."""
        return accept_text(self.acceptance_rate, self.acceptance_length)

    @property
    def accept_words(self) -> str:
        """The same figures, named: ``acceptance 66.8%, length 3.42`` ("" when neither is known)."""
        if self.acceptance_rate is None and self.acceptance_length is None:
            return ""
        rate = f"{self.acceptance_rate:.1f}%" if self.acceptance_rate is not None else "-"
        return f"acceptance {rate}" + (f", length {self.acceptance_length:.2f}" if self.acceptance_length is not None else "")

    @property
    def speedup_text(self) -> str:
        """``1.24x ±0.17``: the speedup and its band (the band left out when there is none)."""
        return speedup_text(self.speedup, self.speedup_band)


def speedup_text(value: float | None, band: float | None) -> str:
    """A speedup as every list shows it: ``1.24x ±0.17``, ``1.24x`` without a band, "" when unknown."""
    if value is None:
        return ""
    return f"{value:.2f}x" + (f" ±{band:.2f}" if band is not None else "")


def accept_text(rate_pct: float | None, length: float | None) -> str:
    """``66.8% · 3.42``: the acceptance rate (percent, one decimal, as compare's table rounds it),
    then the acceptance length; a missing half reads ``-``; "" when neither is known."""
    if rate_pct is None and length is None:
        return ""
    rate = f"{rate_pct:.1f}%" if rate_pct is not None else "-"
    return rate + (f" · {length:.2f}" if length is not None else "")


def display_state(record_status: RunState, exit_code: int | None, analysis: Analysis | None) -> RunState:
    """One word: the live analysis while the process runs, else what the process did. A queued
    batch job is queued whatever its (empty) log says; a run the scheduler ended says so, not crashed;
    a run servelab stopped is stopped, whatever it printed or exited with while dying."""
    if analysis is None:
        return shown_state(record_status, exit_code, None)
    return shown_state(record_status, exit_code, analysis.state, blamed=analysis.root_cause is not None)


def shown_state(record_status: RunState, exit_code: int | None, log_state: RunState | None, *, blamed: bool = False) -> RunState:
    """:func:`display_state` from the log's word alone. ``blamed``: the log named a root cause (a
    failure before any stop: the analyzer folds what an engine prints after its stop line)."""
    if record_status is RunState.QUEUED or record_status.is_scheduler_end:
        return record_status
    if log_state is not None and log_state is not RunState.STARTING and record_status.is_active:
        return log_state
    if record_status is RunState.STOPPED:  # servelab asked: a dying engine's exit code or echo is not a crash
        return RunState.CRASHED if log_state is RunState.CRASHED and blamed else RunState.STOPPED
    if log_state is RunState.CRASHED:
        return RunState.CRASHED
    if record_status is RunState.EXITED and exit_code not in (None, 0):
        return RunState.CRASHED
    return record_status


@dataclass(frozen=True)
class Headline:
    """A run's header: the state word and what its process does, made together from one look at the
    run (its status) and its log, so the two cannot contradict (never a terminal state "alive")."""

    state: RunState
    #: ``alive · pid 12``, ``shutting down · pid 12``, ``stopped · SIGTERM``, ``exited · exit code 1``...
    words: str


def headline(status: RunStatus | None, log_state: RunState, *, blamed: bool = False) -> Headline:
    """The header of a run whose log reads ``log_state`` (``blamed``: it named a root cause) and whose
    process is as ``status`` says (None: not asked yet)."""
    if status is None:
        return Headline(log_state, "connecting…")
    rec = status.record
    state = shown_state(rec.status, status.exit_code, log_state, blamed=blamed)
    if status.job is not None:  # a scheduler's job: its view in the core's words (queue reason and position)
        return Headline(state, f"{status.job.words} · job {status.job.job_id}" + (f" on {status.job.node_list}" if status.job.node_list else ""))
    if status.alive:
        if state.is_terminal:  # the log says it ended (a stop's shutdown lines) while its process still dies
            return Headline(state, f"{'stopping' if rec.stop_signal else 'shutting down'} · pid {rec.pid}")
        return Headline(state, f"alive · pid {rec.pid}")
    return Headline(state, ended_words(rec, status.exit_code))


def ended_words(rec: RunRecord, exit_code: int | None = None) -> str:
    """How a run ended, in the one wording every screen and command uses: ``stopped · SIGTERM`` for a
    stop servelab asked for (the last signal it sent, whatever code the dying engine exited with:
    SGLang's own SIGKILL of its tree reads ``-9``), ``exited · exit code 1`` for an exit of its own,
    else the state alone (``lost``)."""
    if rec.status is RunState.STOPPED:
        return f"stopped · {rec.stop_signal or 'SIGTERM'}"
    code = exit_code if exit_code is not None else rec.exit_code
    if code is not None:
        return f"{rec.status} · exit code {code}"
    return str(rec.status)


async def probe_of(runs: RunsAPI, run_id: str) -> ProbeSummary | None:
    """The run's ``probe.json``, or None when it has none or it cannot be read."""
    try:
        return await load_probe(runs, run_id)
    except ServelabError:
        return None


async def latest_runs(runs: RunsAPI, live: Mapping[str, Analysis] | None = None) -> tuple[dict[str, LatestRun], dict[str, str]]:
    """``{experiment: LatestRun}`` and ``{host: why unreachable}``.

    Never reads whole logs: the state comes from the live analyses already made (``live``, else
    the ones ``runs`` holds) or the process's exit, the figures from ``probe.json``.
    """
    try:
        records = await runs.list()
    except ServelabError as exc:
        return {}, {"hosts": str(exc)}
    unreachable = dict(runs.unreachable)  # this listing's: another may run while the figures are read
    newest: dict[str, RunRecord] = {}
    for rec in records:  # oldest first: the last one wins; a rehearsal (dummy weights) is never the latest run
        if not rec.rehearsal:
            newest[rec.experiment] = rec
    known = dict(live or {})
    results = await asyncio.gather(*(_one(runs, rec, known.get(rec.id) or _held(runs, rec)) for rec in newest.values()), return_exceptions=True)
    for res in results:
        if isinstance(res, BaseException) and not isinstance(res, Exception):
            raise res
    out: dict[str, LatestRun] = {}
    for rec, res in zip(newest.values(), results, strict=True):
        out[rec.experiment] = res if isinstance(res, LatestRun) else LatestRun(rec.id, rec.status, owner=rec.owner.label, launched_by=rec.launched_by)
    return out, unreachable


def _held(runs: RunsAPI, rec: RunRecord) -> Analysis | None:
    return runs.live.get(rec.id, rec.engine).analysis if rec.id in runs.live else None


async def _one(runs: RunsAPI, rec: RunRecord, analysis: Analysis | None) -> LatestRun:
    latest = LatestRun(rec.id, display_state(rec.status, rec.exit_code, analysis), owner=rec.owner.label, launched_by=rec.launched_by)
    probe = await probe_of(runs, rec.id)
    latest.load_s = load_seconds(analysis, probe, rec.started_local)
    if probe:
        latest.acceptance_rate = _num(probe.acceptance_rate)
        latest.acceptance_length = _num(probe.acceptance_length)
        latest.output_throughput = _num(probe.output_throughput)
        sp = await baseline_speedup(runs, rec.id, probe)
        latest.speedup = sp.value if sp is not None else None
        latest.speedup_band = sp.band if sp is not None and sp.value is not None else None
    return latest


async def earlier_stage_seconds(runs: RunsAPI, rec: RunRecord, limit: int = 3) -> dict[str, float]:
    """Median seconds per stage over the newest ``limit`` probed runs of the same model and host."""
    same = [r for r in await runs.list(rec.host) if r.id != rec.id and r.model == rec.model and r.host == rec.host and not r.rehearsal]
    durations: dict[str, list[float]] = {}
    found = 0
    for other in sorted(same, key=lambda r: (r.started_at, r.id), reverse=True):
        probe = await load_probe(runs, other.id)
        stages = probe.load_stages_s if probe is not None else None
        if stages is None:
            continue
        for name, seconds in stages.items():
            if isinstance(seconds, (int, float)):
                durations.setdefault(str(name), []).append(float(seconds))
        found += 1
        if found >= limit:
            break
    return {name: median(values) for name, values in durations.items()}


async def load_estimates(runs: RunsAPI, hosts: Iterable[str], limit: int = 3) -> dict[tuple[str, str], float]:
    """Median start-to-ready seconds of the newest ``limit`` probed runs of each (host, model path as
    that host sees it) on these hosts: what a campaign's loads will take. A host that cannot be
    reached gives no estimate (``runs.unreachable`` names it), not an error."""
    by_key: dict[tuple[str, str], list[RunRecord]] = {}
    missed: dict[str, str] = {}
    for host in sorted(set(hosts)):
        for rec in await runs.list(host):
            if rec.rehearsal:  # dummy weights load in a fraction of the real time
                continue
            by_key.setdefault((rec.host, rec.model), []).append(rec)
        missed.update(runs.unreachable)  # each list() starts its own account
    runs.unreachable = missed
    out: dict[tuple[str, str], float] = {}
    for key, recs in by_key.items():
        seconds: list[float] = []
        for rec in sorted(recs, key=lambda r: (r.started_at, r.id), reverse=True):
            found = load_seconds(None, await probe_of(runs, rec.id))
            if found is not None:
                seconds.append(found)
            if len(seconds) >= limit:
                break
        if seconds:
            out[key] = median(seconds)
    return out


async def latest_probed(runs: RunsAPI, experiments: list[str]) -> tuple[list[str], list[str]]:
    """The newest probed run of each experiment, and the experiments that have none."""
    records = await runs.list()
    chosen: list[str] = []
    missing: list[str] = []
    for name in experiments:
        mine = sorted((r for r in records if r.experiment == name and not r.rehearsal), key=lambda r: (r.started_at, r.id), reverse=True)
        for rec in mine:
            if await load_probe(runs, rec.id) is not None:
                chosen.append(rec.id)
                break
        else:
            missing.append(name)
    return chosen, missing


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def engine_state(status: RunStatus) -> EngineState:
    """What the run's engine does now, from its liveness and log: ``serving`` once the log shows
    tokens generated after ready, ``ready``, ``loading`` (any start-up stage), ``starting`` before
    the first stage; ``ended`` when its process is gone."""
    if not status.alive or status.record.status.is_terminal:
        return EngineState.ENDED
    a = status.analysis
    if a is None:
        return EngineState.UNKNOWN
    if a.state is RunState.READY or a.was_ready:
        served = any((p.generation_tps or 0) > 0 for p in a.throughput_series)
        return EngineState.SERVING if served else EngineState.READY
    if a.state is RunState.LOADING:
        return EngineState.LOADING
    if a.state.is_terminal:  # its log says it ended while the process still dies
        return EngineState.ENDED
    return EngineState.STARTING


@dataclass
class HistoryRow:
    """One run of an experiment as ``servelab history`` lists it."""

    run_id: str
    started_at: str
    host: str
    owner: str  # ``user@machine``, "" for a run recorded before owners were
    rehearsal: bool
    state: RunState
    load_s: float | None
    acceptance_rate: float | None  # percent
    acceptance_length: float | None
    output_throughput: float | None  # tok/s
    speedup: float | None
    verdict: str | None  # helps | hurts | inconclusive | not meaningful, None without a baseline
    verdict_reason: str = ""
    #: The speedup's noise band (±), None when it has none.
    speedup_band: float | None = None
    #: The run's identity by its weights: the served target's fingerprint and the drafter's ("" when
    #: the folder was not a readable safetensors checkpoint, or for a run recorded before them).
    target_fingerprint: str = ""
    drafter_fingerprint: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "run": self.run_id, "started_at": self.started_at, "host": self.host, "launched_by": self.owner, "rehearsal": self.rehearsal,
            "target_fingerprint": self.target_fingerprint, "drafter_fingerprint": self.drafter_fingerprint,
            "state": str(self.state), "load_s": self.load_s, "acceptance_rate": self.acceptance_rate,
            "acceptance_length": self.acceptance_length, "output_throughput": self.output_throughput, "speedup": self.speedup,
            "speedup_band": self.speedup_band, "verdict": self.verdict, "verdict_reason": self.verdict_reason,
        }


async def run_history(runs: RunsAPI, experiment: str) -> list[HistoryRow]:
    """Every run of ``experiment`` on its hosts, oldest first, rehearsals included and marked, each
    with its owner, load time, probe figures and verdict against the baseline (as the list shows)."""
    records = [r for r in await runs.list() if r.experiment == experiment]

    async def one(rec: RunRecord) -> HistoryRow:
        analysis = _held(runs, rec)
        probe = await probe_of(runs, rec.id)
        row = HistoryRow(rec.id, rec.started_at, rec.host, rec.owner.label, rec.rehearsal, display_state(rec.status, rec.exit_code, analysis),
                         load_seconds(analysis, probe, rec.started_local), None, None, None, None, None,
                         target_fingerprint=rec.target.get("fingerprint", ""), drafter_fingerprint=rec.drafter_fingerprint)
        if probe is not None:
            row.acceptance_rate, row.acceptance_length = _num(probe.acceptance_rate), _num(probe.acceptance_length)
            row.output_throughput = _num(probe.output_throughput)
            try:
                sp = await baseline_speedup(runs, rec.id, probe)
            except ServelabError as exc:
                row.verdict_reason = str(exc)
                sp = None
            if sp is not None:
                row.speedup, row.verdict, row.verdict_reason = sp.value, sp.verdict, sp.reason
                row.speedup_band = sp.band if sp.value is not None else None
        return row

    return list(await asyncio.gather(*(one(r) for r in records)))
