"""A run on a Slurm host, end to end: submit its batch job, read its state, cancel it.

``engines/runs/manager.py`` hands a run here when its host has a ``[hosts.NAME.slurm]`` table. The run
folder (on the shared path) is the same as a plain host's: ``run.json``, ``experiment.toml``,
``engine.log``, ``exit_code``; beside them ``job.sbatch`` (the script submitted) and Slurm's
``slurm-JOBID.out``. ``run.json`` records the job id at submit, the nodes, head node and head
address once Slurm has placed the job, and Slurm's final state once it has ended (so a job Slurm
has forgotten still reads as it ended). The job is the unit that stops: ``scancel`` of the job id
servelab recorded, never a pid, never another job.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from dataclasses import replace
from collections.abc import Sequence
from typing import Any

from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import Host
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.slurm.settings import SlurmSettings
from servelab.engines.runs.placed import KEY as PLACED, JobView, Placed, placed_of, without_flat_keys
from servelab.engines.runs.state import RunState
from servelab.engines.slurm import control
from servelab.engines.slurm.script import SCRIPT_NAME, RankCommand, render
from servelab.engines.slurm.states import gone, view
from servelab.engines.slurm.scontrol import JobState, SlurmJob, has_ended

STOP_REQUESTED = "stop_requested"
RUN_JSON = "run.json"


def settings_of(cfg: HostConfig) -> SlurmSettings:
    if not isinstance(cfg.table, SlurmSettings):
        raise ServelabError(f"host {cfg.name} is not a Slurm host")
    return cfg.table


def script_for(
    cfg: HostConfig, run_id: str, run_dir: str, argv: list[str], env: dict[str, str], ranks: Sequence[RankCommand] = ()
) -> str:
    """The job script a run would be submitted with (``servelab show``); ``ranks``: a multi-node
    experiment's command per node (``srun``, one task per node)."""
    try:
        return render(settings_of(cfg), run_id=run_id, run_dir=run_dir, argv=argv, env=env, ranks=ranks)
    except ValueError as exc:
        raise ServelabError(f"{cfg.name}: cannot write the job script: {exc}") from None


def _dump(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


async def _update(h: Host, run_dir: str, placed: Placed | None = None, **fields: Any) -> dict[str, Any]:
    """``run.json`` with ``fields`` (and the job's facts, ``placed``) written over it."""
    data: dict[str, Any] = json.loads((await h.read_bytes(f"{run_dir}/{RUN_JSON}")).decode("utf-8"))
    data.update(fields)
    if placed is not None:
        data = {**without_flat_keys(data), PLACED: placed.to_json()}
    await h.write_bytes(f"{run_dir}/{RUN_JSON}", _dump(data))
    return data


async def submit(h: Host, record: dict[str, Any], ranks: Sequence[RankCommand] = ()) -> dict[str, Any]:
    """Write ``job.sbatch`` in the run folder, ``sbatch --parsable`` it, record the job id (and, for
    a multi-node job, its node count). The run's ``run.json`` must be written already; the updated
    record is returned."""
    cfg = h.config
    run_dir = str(record["run_dir"])
    script = script_for(cfg, str(record["id"]), run_dir, list(record["argv"]), dict(record["env"]), ranks)
    path = f"{run_dir}/{SCRIPT_NAME}"
    await h.write_bytes(path, script.encode("utf-8"))
    job_id = await control.submit(h, settings_of(cfg), path)
    return await _update(h, run_dir, Placed(job=job_id, node_count=max(1, len(ranks))), status=str(RunState.QUEUED))


def _local_clock(slurm_time: str | None) -> str:
    """Slurm's ``2026-12-03T11:12:45`` as a run record's ``started_local`` (``2026-12-03 11:12:45``)."""
    if not slurm_time:
        return ""
    try:
        return dt.datetime.fromisoformat(slurm_time).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return ""


async def state(h: Host, rec: dict[str, Any]) -> tuple[JobView, dict[str, Any]]:
    """Slurm's view of the run's job, and the record brought up to date (written back when it
    changed: nodes and head once placed, the final state once ended)."""
    settings = settings_of(h.config)
    run_dir = str(rec["run_dir"])
    placed = placed_of(rec)
    job_id = placed.job
    stop_requested = await h.exists(f"{run_dir}/{STOP_REQUESTED}")
    final = RunState.parse(rec.get("status") or "launching")
    if has_ended(placed.state):  # ended, and servelab saw how: Slurm need not be asked
        return _recorded(rec, placed, final), rec
    job = await control.query(h, settings, job_id)
    if job is None:
        v = gone(job_id, stop_requested=stop_requested)
        return v, await _update(h, run_dir, replace(placed, state="gone", reason=""), status=str(v.state))
    position = await control.queue_position(h, settings, job) if job.state is JobState.PENDING else None
    v = view(job, stop_requested=stop_requested, queue_position=position)
    updates: dict[str, Any] = {}
    now = placed
    if v.node_list and not rec.get("head_address"):
        # the head is the first host of the allocation (what a multi-node job's script dials)
        head = (placed.node_count <= 1 and job.batch_host) or await control.first_node(h, settings, v.node_list)
        now = replace(now, nodes=v.node_list)
        updates.update(head_node=head, head_address=await control.node_address(h, settings, head))
    if v.started_at and not rec.get("started_local"):
        updates["started_local"] = _local_clock(v.started_at)
    status = str(v.state)
    if status != rec.get("status") or v.scheduler_state != placed.state or v.reason != placed.reason:
        now = replace(now, state=v.scheduler_state, reason=v.reason)
        updates["status"] = status
        if v.exit_code is not None and v.state.is_terminal:
            updates["exit_code"] = v.exit_code
    if updates or now != placed:
        rec = await _update(h, run_dir, now if now != placed else None, **updates)
    return v, rec


def _recorded(rec: dict[str, Any], placed: Placed, final: RunState) -> JobView:
    """The view of an ended job from what ``run.json`` recorded of it (``placed``: its job's facts)."""
    if placed.state == "gone":
        return gone(placed.job, stop_requested=final is RunState.STOPPED)
    job = SlurmJob(
        job_id=placed.job, name="", state=JobState.parse(placed.state), state_text=placed.state,
        reason=placed.reason, submit_time=None, start_time=None, end_time=None, time_limit="",
        node_list=placed.nodes, batch_host=str(rec.get("head_node") or ""),
        exit_code=rec.get("exit_code"), exit_signal=None, partition="",
    )
    return view(job, stop_requested=final is RunState.STOPPED)


async def cancel(h: Host, rec: dict[str, Any], grace: float) -> tuple[JobView, dict[str, Any]]:
    """``scancel`` the run's own job (the id servelab recorded at submit) and wait until Slurm says
    it ended (at most ``grace`` + 30 s)."""
    job_id = placed_of(rec).job
    if not job_id:
        raise ServelabError(f"run {rec.get('id')} has no Slurm job recorded: nothing of servelab's to cancel")
    await h.write_bytes(f"{rec['run_dir']}/{STOP_REQUESTED}", b"")
    await control.cancel(h, settings_of(h.config), job_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace + 30
    while True:
        v, rec = await state(h, rec)
        if v.state.is_terminal or loop.time() > deadline:
            return v, rec
        await asyncio.sleep(0.2)
