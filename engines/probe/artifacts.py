"""Probe a run of :class:`engines.runs.manager.Runs` and keep the results in its folder on the host.

``probe.json`` (summary, identity, load stages) and ``probe-requests.jsonl`` live next to the
run's log, so ``servelab compare`` works from any machine that can reach the host.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import tomllib
from dataclasses import replace
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from servelab.engines.adapters.base import get_adapter
from servelab.engines.errors import ServelabError
from servelab.engines.catalog.experiment import Experiment
from servelab.engines.logs.analysis import Stage, stage_seconds, start_to_ready_s
from servelab.engines.probe.prompts import load as load_prompts
from servelab.engines.verdict.fairness import resolved_settings
from servelab.engines.runs.records import LOG_NAME, ResolvedRun
from servelab.engines.placements.base import placement_for
from servelab.engines.gpus.sample import GpuSampleError, sample_host
from servelab.engines.helpers import HelperError
from servelab.engines.probe.conditions import RoundConditions
from servelab.engines.probe.runner import ConditionsProbe, ProbeResult, Progress, run_probe
from servelab.engines.probe.summary import ProbeSummary
from servelab.engines.probe.timer import HostTimer
from servelab.engines.runs.state import RunState

if TYPE_CHECKING:
    from servelab.engines.hosts.base import Host
    from servelab.engines.runs.records import Located, RunRecord, RunsAPI

PROBE_JSON = "probe.json"
REQUESTS_JSONL = "probe-requests.jsonl"


async def run_experiment(runs: RunsAPI, rec: RunRecord, at: Located | None = None) -> Experiment:
    """The definition the run was launched with (its ``experiment.toml``), else the catalog's;
    ``at``: the run, located before (its host is not asked where the run is again)."""
    raw = await (at.read("experiment.toml") if at is not None else runs.read_artifact(rec.id, "experiment.toml"))
    if raw is not None:
        try:
            data = tomllib.loads(raw.decode("utf-8"))
            data.setdefault("name", rec.experiment)
            return Experiment.model_validate(data)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValidationError):
            pass
    return runs.catalog.get(rec.experiment).experiment


async def gpu_names(host: Host) -> list[str]:
    """GPU names from ``nvidia-smi`` on the host; empty when there is none (CPU hosts)."""
    try:
        done = await host.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], timeout=20)
    except Exception:  # no nvidia-smi, unreachable: the identity just has no GPUs
        return []
    return [line.strip() for line in done.text().splitlines() if line.strip()] if done.ok else []


def identity(exp: Experiment, rec: RunRecord, gpus: list[str], nodes: list[dict[str, object]] | None = None) -> dict[str, Any]:
    """Who produced these figures: everything that must match for a fair comparison.

    A multi-node run lists its ``nodes`` (rank, host, role, run id of each node process); ``host``
    is then the head's, whose server answered.
    """
    s = exp.speculative
    out: dict[str, Any] = {
        "run": rec.id,
        "experiment": rec.experiment,
        "engine": exp.engine,
        "model": exp.model,
        "served_model_name": exp.served_model_name,
        "spec_method": s.method,
        "drafter": s.draft_model,
        "num_speculative_tokens": s.num_tokens,
        "tensor_parallel": exp.parallel.tensor,
        "data_parallel": exp.parallel.data,
        "expert_parallel": exp.parallel.expert,
        "pipeline_parallel": exp.parallel.pipeline,
        "patch_hashes": dict(rec.patch_hashes),
        "definition_hash": rec.identity,
        "host": rec.host,
        "gpus": gpus,
        "gpu_peak_mib": dict(rec.gpu_peak_mib),
        # the weights themselves, not their paths: a target replaced in place reads as another target
        "target_fingerprint": rec.target.get("fingerprint", ""),
        "target": dict(rec.target),
        "drafter_fingerprint": rec.drafter_fingerprint,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    if nodes:
        out["nodes"] = nodes
    return out


def load_stages_s(analysis: Mapping[str, Any]) -> dict[str, float]:
    """Seconds each finished startup stage took (``probe.json``'s ``load_stages_s``), from an
    analysis's JSON: its stages, typed again, timed by :func:`~servelab.engines.logs.analysis.stage_seconds`."""
    out: dict[str, float] = {}
    for stage in (Stage.from_json(st) for st in analysis.get("stages") or []):
        seconds = stage_seconds(stage)
        if seconds is not None and seconds >= 0:
            out[stage.name] = seconds
    return out


async def probe_run(runs: RunsAPI, run: str | ResolvedRun, *, progress: Progress | None = None, ready_timeout_s: float = 900.0) -> ProbeResult:
    """Probe a live run with its experiment's ``[probe]`` settings and store the results in its folder.

    A multi-node run (its group id or any node's run id) is probed through its head's server, and
    the results are stored in the head's folder, where :func:`load_probe` finds them for any of its ids.
    The id is resolved once; every later step acts on the located head (its host, its folder), and
    goes back to ``runs`` only for the run's status and the host's other runs.
    """
    target = run if isinstance(run, ResolvedRun) else await runs.resolve(run)
    head, group, run_id = target.head, target.group, target.run_id
    st = await runs.status(head)
    if not st.alive:
        raise ServelabError(f"run {run_id} is not running (status {st.status}); probe a live server")
    rec = st.record
    exp = await run_experiment(runs, rec, head)
    settings = exp.probe
    prompts = load_prompts(settings.prompts, base=runs.catalog.folder)
    ident = identity(exp, rec, await gpu_names(head.host), group.identity() if group is not None else None)
    if group is not None:
        ident["group"] = group.id
    log = await head.read(LOG_NAME)
    ident["resolved_settings"] = resolved_settings(get_adapter(exp.engine).settings, log) if log else {}
    if ident["resolved_settings"]:
        ident["settings_source"] = "its log"
    base_url = await placement_for(head.host.config).base_url(head.host, rec)
    # The timed requests are sent from the server's own host, never through the tunnel.
    host = head.host
    timer = HostTimer(host, host.config.python, f"http://127.0.0.1:{rec.port}", watch_sid=rec.pid)
    result = await run_probe(
        base_url,
        prompts,
        settings,
        adapter=get_adapter(exp.engine),
        experiment=exp,
        identity=ident,
        label=run_id,
        ready_timeout_s=ready_timeout_s,
        progress=progress,
        timer=timer,
        conditions=host_conditions(runs, head.host, rec, bool(ident.get("gpus"))),
    )
    # Stage timings are final once the server is ready, so read them after the probe: the log's
    # analysis caught up (the run's status would ask its host whether it lives, known a moment ago)
    try:
        after = await runs.live.get(rec.id, rec.engine).catch_up(host, rec.log_path, alive=True, exit_code=None)
    except Exception:  # as a status's: the analyzer never breaks what asked (the timings are left out)
        runs.live.drop(rec.id)
        after = None
    summary = result.summary.with_fields(
        load_stages_s=load_stages_s(after.to_json() if after is not None else {}),
        load_s=start_to_ready_s(after.stages, rec.started_local or None) if after is not None else None,
        run=run_id,
        experiment=rec.experiment,
        baseline_experiment=exp.baseline,
    )
    if exp.speculative.method == "none" and "acceptance_source" not in summary:
        summary = summary.with_fields(acceptance=f"not measured: {rec.experiment} does not speculate")  # absent fields, said so
    result.summary = summary
    await head.write(PROBE_JSON, result.summary_json().encode("utf-8"))
    await head.write(REQUESTS_JSONL, result.requests_jsonl().encode("utf-8"))
    return result


def host_conditions(runs: RunsAPI, host: Host, rec: RunRecord, gpus: bool) -> ConditionsProbe:
    """Each round's conditions completed on the run's host: the GPU sampler's mean utilisation and
    total memory in use (where the host has GPUs), and the other servelab runs alive there."""

    async def complete(cond: RoundConditions) -> RoundConditions:
        others = sorted(r.id for r in await runs.list(rec.host) if r.id != rec.id and not r.status.is_terminal)
        util = mem = None
        if gpus:
            try:
                sample = await sample_host(host)
            except (HelperError, GpuSampleError):
                sample = None
            if sample is not None and sample.gpus:
                utils = [g.util_pct for g in sample.gpus if g.util_pct is not None]
                mems = [g.memory_used_mib for g in sample.gpus if g.memory_used_mib is not None]
                util = sum(utils) / len(utils) if utils else None
                mem = sum(mems) if mems else None
        return replace(cond, gpu_util_pct=util, gpu_mem_mib=mem, other_runs=others)

    return complete


async def load_probe(runs: RunsAPI, run: str | ResolvedRun) -> ProbeSummary | None:
    """A run's stored ``probe.json`` (None when it was never probed); a multi-node run's (its group
    id or any node's id) is the head's, where :func:`probe_run` stores it."""
    target = run if isinstance(run, ResolvedRun) else await runs.resolve(run)
    raw = await target.head.read(PROBE_JSON)
    if raw is None:
        return None
    try:
        return ProbeSummary.from_json(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):  # UnicodeDecodeError is a ValueError too
        raise ServelabError(f"run {target.asked}: {PROBE_JSON} is not valid JSON") from None
    except TypeError:
        raise ServelabError(f"run {target.asked}: {PROBE_JSON} is not an object") from None


async def wait_for_ready(runs: RunsAPI, run: str | ResolvedRun, timeout_s: float = 3600.0, poll_s: float = 2.0) -> None:
    """Poll the run's log analysis until the server is ready; a crash or exit is a one-line error.
    A multi-node run is ready when its head's server is."""
    import asyncio

    target = await runs.resolve(run)
    run_id = target.run_id
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        st = await runs.status(target.head)
        state = st.analysis.state if st.analysis is not None else None
        if state is RunState.READY and st.alive:
            return
        if not st.alive or state in (RunState.CRASHED, RunState.EXITED):
            rc = st.analysis.root_cause if st.analysis is not None else None
            cause = " ".join(f"{rc.exception or ''}: {rc.message or ''}".split()) if rc is not None else None
            raise ServelabError(f"run {run_id} ended before it was ready ({state or st.status}{': ' + cause if cause else ''})")
        if loop.time() > deadline:
            raise ServelabError(f"run {run_id} not ready after {timeout_s:.0f} s (state {state})")
        await asyncio.sleep(poll_s)


async def probe_when_ready(runs: RunsAPI, run: str | ResolvedRun, *, progress: Progress | None = None) -> ProbeResult | None:
    """What runs right after launch: wait for ready, then probe if the experiment's ``[probe] auto`` asks."""
    target = await runs.resolve(run)
    exp = await run_experiment(runs, target.record, target.head)
    if not exp.probe.auto:
        return None
    await wait_for_ready(runs, target)
    return await probe_run(runs, target, progress=progress)
