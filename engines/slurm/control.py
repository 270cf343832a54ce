"""Slurm's client commands on a Slurm host's login node: submit, cancel, query. Argv lists only.

Each runs through the login node's :class:`Host` (this machine or SSH), with ``$SLURM_CONF`` set
when the host names one. A failure is one line (``ServelabError``), never a traceback.
"""

from __future__ import annotations

from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import Completed, Host
from servelab.engines.slurm.settings import SlurmSettings
from servelab.engines.slurm.scontrol import SlurmJob, parse_pairs


def _env(settings: SlurmSettings) -> dict[str, str] | None:
    return {"SLURM_CONF": settings.conf} if settings.conf else None


def _why(done: Completed) -> str:
    lines = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"exit code {done.exit_code}"


async def _run(host: Host, settings: SlurmSettings, argv: list[str], timeout: float = 60.0) -> Completed:
    done = await host.run(argv, env=_env(settings), timeout=timeout)
    if done.exit_code == 127:
        raise ServelabError(f"{host.name}: {argv[0]} not found on the login node ({_why(done)})")
    return done


async def submit(host: Host, settings: SlurmSettings, script_path: str) -> str:
    """``sbatch --parsable SCRIPT``: the job id."""
    done = await _run(host, settings, ["sbatch", "--parsable", script_path])
    if not done.ok:
        raise ServelabError(f"{host.name}: sbatch refused the job: {_why(done)}")
    first = done.text().strip().splitlines()[-1:] or [""]
    job_id = first[0].split(";")[0].strip()  # "123" or "123;cluster"
    if not job_id.isdigit():
        raise ServelabError(f"{host.name}: sbatch gave no job id (stdout: {done.text()[:200]!r})")
    return job_id


async def cancel(host: Host, settings: SlurmSettings, job_id: str) -> None:
    """``scancel JOBID``: only ever a job id servelab recorded when it submitted the job."""
    if not job_id.isdigit():
        raise ServelabError(f"not a Slurm job id: {job_id!r}")
    done = await _run(host, settings, ["scancel", job_id])
    if not done.ok and "Invalid job id" not in _why(done):
        raise ServelabError(f"{host.name}: scancel {job_id} failed: {_why(done)}")


async def query(host: Host, settings: SlurmSettings, job_id: str) -> SlurmJob | None:
    """``scontrol show job -o JOBID``; None when Slurm no longer knows the job."""
    done = await _run(host, settings, ["scontrol", "show", "job", "-o", job_id])
    if not done.ok:
        if "Invalid job id" in _why(done):
            return None
        raise ServelabError(f"{host.name}: scontrol show job {job_id} failed: {_why(done)}")
    line = next((ln for ln in done.text().splitlines() if ln.startswith("JobId=")), "")
    return SlurmJob.from_scontrol(line) if line else None


async def queue_position(host: Host, settings: SlurmSettings, job: SlurmJob) -> int | None:
    """1 for the next pending job of its partition (Slurm's priority order), None when not listed."""
    done = await _run(host, settings, ["squeue", "-h", "-t", "PENDING", "-p", job.partition or settings.partition, "-o", "%i", "-S", "-p,i"])
    if not done.ok:
        return None
    ids = done.text().split()
    return ids.index(job.job_id) + 1 if job.job_id in ids else None


async def first_node(host: Host, settings: SlurmSettings, node_list: str) -> str:
    """The first host name of an allocation (``n[1-2]`` -> ``n1``), Slurm's own expansion."""
    done = await _run(host, settings, ["scontrol", "show", "hostnames", node_list])
    names = done.text().split() if done.ok else []
    return names[0] if names else node_list


async def node_address(host: Host, settings: SlurmSettings, node: str) -> str:
    """A node's ``NodeAddr`` (where its ports are reached), its name when Slurm gives none."""
    done = await _run(host, settings, ["scontrol", "show", "node", "-o", node])
    addr = parse_pairs(done.text().strip()).get("NodeAddr", "") if done.ok else ""
    return addr or node
