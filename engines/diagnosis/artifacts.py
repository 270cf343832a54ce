"""Diagnose a live run of :class:`engines.runs.manager.Runs` and keep ``diagnosis.json`` beside ``probe.json``."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING

from servelab.engines.adapters.base import get_adapter
from servelab.engines.probe.speedup import baseline_speedup
from servelab.engines.diagnosis.identity import drafter_identity, provenance_of
from servelab.engines.weights.fingerprint import target_identity
from servelab.engines.diagnosis.local import reference_for
from servelab.engines.diagnosis.measure import Progress, SuiteSettings
from servelab.engines.diagnosis.model import Diagnosis
from servelab.engines.diagnosis.static import drafter_checks
from servelab.engines.diagnosis.stored import DIAGNOSIS_JSON
from servelab.engines.diagnosis.suite import Baseline, Pairing, diagnose_server
from servelab.engines.errors import ServelabError
from servelab.engines.probe.artifacts import load_probe, run_experiment
from servelab.engines.probe.prompts import load as load_prompts
from servelab.engines.runs.state import RunState, StageState

if TYPE_CHECKING:
    from servelab.engines.catalog.experiment import Experiment
    from servelab.engines.runs.records import RunRecord
    from servelab.engines.runs.records import Located, RunsAPI

#: vLLM samples at 1.0 when neither the request nor generation_config.json sets a temperature.
DEFAULT_TEMPERATURE = 1.0
#: How often a diagnosis asked for during a load reads the run again, and how long it waits for ready.
READY_POLL_S, READY_WAIT_S = 2.0, 3600.0


def temperature_arg(exp: Experiment) -> tuple[float, str] | None:
    """The default temperature the experiment's own engine arguments set (``--override-generation-config``
    on vLLM, ``--preferred-sampling-params`` on SGLang), or None when they set none."""
    key = get_adapter(exp.engine).sampling_defaults_arg
    raw = exp.engine_args.get(key)
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
    t = data.get("temperature") if isinstance(data, dict) else None
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        return float(t), f"[engine_args] {key} temperature"
    return None


async def serving_temperature(runs: RunsAPI, rec: RunRecord, exp: Experiment | None = None) -> tuple[float, str]:
    """The temperature clients get by default: the experiment's sampling-defaults argument, else the
    model's ``generation_config.json``, else 1.0."""
    own = temperature_arg(exp) if exp is not None else None
    if own is not None:
        return own
    path = f"{rec.model.rstrip('/')}/generation_config.json"
    try:
        data = json.loads((await runs.host(rec.host).read_bytes(path, 0, 65536)).decode("utf-8"))
        t = data.get("temperature") if isinstance(data, dict) else None
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            return float(t), f"{path} temperature"
        return DEFAULT_TEMPERATURE, f"{path} sets none: the engine's default {DEFAULT_TEMPERATURE:g}"
    except Exception:  # unreadable, absent or not JSON: the engine's default applies
        return DEFAULT_TEMPERATURE, f"no readable {path}: the engine's default {DEFAULT_TEMPERATURE:g}"


def drafter_path(runs: RunsAPI, rec: RunRecord, draft: str | None) -> str | None:
    """The drafter as the host sees it (relative paths resolve like the launch resolved them)."""
    if not draft:
        return None
    try:
        sourced = runs.catalog.get(rec.experiment)
        return runs.catalog.host_path(sourced, draft, runs.catalog.host(rec.host))
    except ServelabError:
        return draft


async def baseline_step(runs: RunsAPI, run_id: str, exp_baseline: str | None, model: str) -> tuple[float | None, str | None, float | None, str]:
    """(plain decode ms per token, baseline run, measured speedup, note) from the probed runs."""
    own = await load_probe(runs, run_id)
    measured: float | None = None
    base_run: str | None = None
    if own is not None:
        sp = await baseline_speedup(runs, run_id, own)
        if sp is not None and sp.value is not None:
            measured, base_run = sp.value, sp.baseline_run
    if base_run is None and exp_baseline:
        listed = [r for r in await runs.list() if r.experiment == exp_baseline and r.model == model]
        for rec in sorted(listed, key=lambda r: (r.started_at, r.id), reverse=True):
            probe = await load_probe(runs, rec.id)
            if probe is not None and probe.max_concurrency == 1:
                base_run = rec.id
                break
    if base_run is None:
        return None, None, measured, f"no probed run of the baseline experiment {exp_baseline or '(none set)'} at concurrency 1"
    probe = await load_probe(runs, base_run)
    # The server's own mean inter-token latency first (one observation per step), then the client's
    # median gap between chunks: a loaded machine can read chunks late and in bursts (gaps of 0).
    for key in ("server_mean_itl_ms", "median_itl_ms"):
        plain = probe.figure(key) if probe else None
        if isinstance(plain, (int, float)) and plain > 0:
            return float(plain), base_run, measured, ""
    return None, base_run, measured, f"baseline run {base_run} has no per-token timing"


async def diagnose_run(runs: RunsAPI, run_id: str, *, progress: Progress | None = None, settings: SuiteSettings | None = None) -> Diagnosis:
    """Run the suite on a live run, rank the findings, save ``diagnosis.json`` in the run's folder."""
    at = await runs.locate(run_id)  # once: the steps below act on the run located here
    st = await runs.status(at, analyze=False)
    if not st.alive:
        raise ServelabError(f"run {run_id} is not running (status {st.status}); diagnose a live server")
    rec = st.record
    exp = await run_experiment(runs, rec, at)
    if exp.speculative.method == "none":
        raise ServelabError(f"run {run_id} does not speculate ([speculative] method = \"none\"): nothing to diagnose")
    await until_ready(runs, at, run_id, progress)
    prompts = load_prompts(exp.probe.prompts, base=runs.catalog.folder)
    if settings is None:
        temp, source = await serving_temperature(runs, rec, exp)
        settings = SuiteSettings(serving_temperature=temp, temperature_source=source)
    plain, base_run, measured, note = await baseline_step(runs, run_id, exp.baseline, rec.model)
    draft = drafter_path(runs, rec, exp.speculative.draft_model)
    static = await drafter_checks(runs.host(rec.host), runs.catalog.host(rec.host).python, exp, rec.model, draft)
    identity = await drafter_identity(runs.host(rec.host), draft) if draft and static is not None else None
    python = runs.catalog.host(rec.host).python
    # what the run loaded (run.json, at launch); a run from before target fingerprints: the folder now
    target = rec.target_identity or await target_identity(runs.host(rec.host), python, rec.model)
    reference, other = await reference_for(runs, rec, exp, identity, target)
    provenance = await provenance_of(runs.host(rec.host), python, draft, rec.model, target) if draft and static is not None else None
    diag = await diagnose_server(
        await runs.base_url(at), exp, prompts, run=run_id, model_path=rec.model, drafter_path=draft, settings=settings,
        baseline=Baseline(plain, base_run, measured, note), static=static, progress=progress,
        reference=reference, drafter=identity, pairing=Pairing(target, other, provenance),
    )
    await runs.write_artifact(at, DIAGNOSIS_JSON, (json.dumps(diag.to_dict(), indent=2) + "\n").encode("utf-8"))
    return diag


async def until_ready(runs: RunsAPI, at: Located, run_id: str, progress: Progress | None, wait_s: float = READY_WAIT_S) -> None:
    """A diagnosis asked for during a load waits for the server to be ready, saying so (with the
    stage it is in); a run that ends first is a one-line error with what its log says."""
    deadline = time.monotonic() + wait_s
    while True:
        st = await runs.status(at)
        state = st.analysis.state if st.analysis is not None else None
        if st.alive and state in (RunState.READY, None):  # ready, or a log that cannot say: try the server
            return
        if not st.alive or (state is not None and state.is_terminal):
            rc = st.analysis.root_cause if st.analysis is not None else None
            cause = (f"{rc.exception}: {rc.message}" if rc.exception else rc.message) if rc is not None else None
            raise ServelabError(f"run {run_id} ended before it was ready (status {st.status}){': ' + cause if cause else ''}; nothing to diagnose")
        if time.monotonic() > deadline:
            raise ServelabError(f"run {run_id} is still {state} after {wait_s:.0f} s; diagnose it once it is ready")
        if progress is not None:
            running = [x.name for x in (st.analysis.stages if st.analysis is not None else []) if x.status is StageState.RUNNING]
            progress(f"waiting for the server to be ready (it is {state}{': ' + running[-1] if running else ''}); the diagnosis starts then")
        await asyncio.sleep(READY_POLL_S)
