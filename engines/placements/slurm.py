"""A Slurm host: the run is a batch job servelab submits from the login node (``engines/slurm``);
Slurm holds the GPUs, starts it when it can on the nodes it picks, and says how it ended. The job is
the unit that is found alive and stopped (``scancel`` of the job servelab recorded, never a pid),
and the server is reached at the head node's address."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import Host
from servelab.engines.placements.base import Preview
from servelab.engines.placements.plain import PlainPlacement, exit_code
from servelab.engines.runs.records import RunRecord, RunStatus, runs_root
from servelab.engines.runs.state import RunState
from servelab.engines.slurm import jobs
from servelab.engines.slurm.scontrol import has_ended
from servelab.engines.slurm.script import RankCommand
from servelab.engines.runs.placed import JobView

if TYPE_CHECKING:
    from servelab.engines.adapters.exchange import LaunchSpec
    from servelab.engines.hosts.hostsfile import HostConfig
    from servelab.engines.catalog.experiment import SourcedExperiment
    from servelab.engines.catalog.folder import Catalog


def ranks_of(catalog: Catalog, exp: SourcedExperiment) -> list[RankCommand]:
    """A multi-node experiment's command per node rank (empty for any other experiment): one engine
    process per node, from the adapter's node plans (each rank's own address, and the head's)."""
    e = exp.experiment
    if e.multinode is None or e.spans_hosts:
        return []
    own, shared = catalog.node_plans(exp), catalog.node_plans(exp, shared=True)
    out: list[RankCommand] = []
    for a, b in zip(own, shared):
        if len(a.processes) != 1 or len(b.processes) != 1:
            raise ServelabError(f"{exp.name}: node {a.node.rank} runs {len(a.processes)} processes: one srun task per node runs one engine process")
        out.append(RankCommand(a.node.rank, a.processes[0].spec, b.processes[0].spec))
    return out


class SlurmPlacement:
    """A run as the batch job of one Slurm host (one job, ``srun`` over its nodes when it spans several)."""

    kind = "slurm"
    rehearsal_port_of_its_own = False  # Slurm places the job on a node of its choosing

    def __init__(self) -> None:
        #: Slurm's last view of each run asked about, by run id.
        self.views: dict[str, JobView] = {}
        #: A record with no job yet (its submission under way) reads as a plain run would.
        self._plain = PlainPlacement()

    async def start(self, h: Host, rec: RunRecord, exp: SourcedExperiment, catalog: Catalog, *, rehearsal: bool) -> RunRecord:
        ranks = ranks_of(catalog, exp)  # a multi-node job: srun, one task per node
        if ranks and rehearsal:
            raise ServelabError(f"{exp.name}: rehearsing a multi-node experiment on Slurm is not supported yet")
        return RunRecord.from_json(await jobs.submit(h, rec.to_json(), ranks))

    def may_change(self, rec: RunRecord) -> bool:
        return bool(rec.placement.job) and not has_ended(rec.placement.state)  # one scontrol each while it may still change

    async def liveness(self, h: Host, rec: RunRecord) -> tuple[bool, int | None]:
        if not rec.placement.job:
            return await self._plain.liveness(h, rec)
        job, data = await jobs.state(h, rec.to_json())
        self.views[rec.id] = job
        fresh = RunRecord.from_json(data)
        for f in fields(RunRecord):
            setattr(rec, f.name, getattr(fresh, f.name))
        code = await exit_code(h, rec)
        if code is None:
            code = job.exit_code if job.state.is_terminal else None
        rec.exit_code = code
        if code is not None and not job.state.is_terminal:  # the engine ended; Slurm is still ending its job
            rec.status = RunState.EXITED
            return False, code
        return job.alive, code

    def view(self, rec: RunRecord) -> JobView | None:
        return self.views.get(rec.id) if rec.placement.job else None

    async def stop(self, h: Host, rec: RunRecord, grace: float, *, leader_first: bool, engine_plan: bool) -> RunStatus:
        if not rec.placement.job:
            return await self._plain.stop(h, rec, grace, leader_first=leader_first, engine_plan=engine_plan)
        job, data = await jobs.cancel(h, rec.to_json(), grace)
        self.views[rec.id] = job
        stopped = RunRecord.from_json(data)
        return RunStatus(record=stopped, alive=job.alive, exit_code=stopped.exit_code, job=job)

    async def base_url(self, h: Host, rec: RunRecord) -> str:
        if rec.placement.job and rec.head_address and rec.head_address != "127.0.0.1":  # the job's head node
            if h.config.is_local:
                return f"http://{rec.head_address}:{rec.port}"
            return f"http://127.0.0.1:{await h.forward_port(rec.port, rec.head_address)}"
        return await self._plain.base_url(h, rec)

    def server_address(self, rec: RunRecord) -> str:
        return rec.head_address if rec.placement.job and rec.head_address else "127.0.0.1"

    def gpus(self, cfg: HostConfig) -> int | None:
        return jobs.settings_of(cfg).gpus_per_node or None

    preflight_where = " (its login node, with the host's Python: no job, no queue time)"

    def campaign_refusal(self, host: str, experiment: str) -> str | None:
        # campaignctl would start engines on the login node itself
        return f'{experiment} runs on Slurm host {host}: a campaign runs there as a fleet (hosts = ["{host}"]: each load a batch job)'

    def launch_facts(self, rec: RunRecord) -> dict[str, str]:
        return {"slurm_job": rec.placement.job} if rec.placement.job else {}

    def launch_note(self, rec: RunRecord) -> str | None:
        if not rec.placement.job:
            return None
        return f"submitted Slurm job {rec.placement.job} on {rec.host} (servelab status {rec.id}: its queue state)"

    def engine_state_in_listing(self, rec: RunRecord) -> bool:
        return not rec.placement.job

    def preview(self, cfg: HostConfig, catalog: Catalog, exp: SourcedExperiment, spec: LaunchSpec) -> Preview | None:
        run_id = f"{exp.name}-YYYYmmdd-HHMMSS-xxxx"
        script = jobs.script_for(cfg, run_id, f"{runs_root(cfg)}/{run_id}", spec.argv, spec.env, ranks_of(catalog, exp))
        return Preview("slurm_script", "job script  (sbatch --parsable on the login node; the run id is chosen at launch)", script)


PLACEMENT = SlurmPlacement
