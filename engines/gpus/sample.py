"""Running ``helpers/gpusample.py`` on a host: one sample of every GPU (and the campaigns' GPU locks)."""

from __future__ import annotations

from servelab.engines.gpus.parse import GpuSampleError, parse_output
from servelab.engines.gpus.inventory import HostGpus
from servelab.engines.helpers import HelperError, last_line, run_script
from servelab.engines.hosts.base import Host, host_workdir
from servelab.engines.hosts.scripts import ScriptUploadError

SAMPLER = "gpusample.py"
#: The campaigns' folder under a host's workdir (``campaign/control.py``'s CAMPAIGNS_DIR), where their GPU-set locks live.
CAMPAIGNS_DIR = "campaigns"


async def sample_host(host: Host, python: str | None = None, timeout: float = 30.0) -> HostGpus:
    """One sample of ``host``'s GPUs; a CPU host answers ``gpu=False`` with its reason. HelperError or
    GpuSampleError (one line) when the sampler cannot run or says something else."""
    locks = f"{host_workdir(host.config)}/{CAMPAIGNS_DIR}"
    try:
        done = await run_script(host, python or host.config.python, SAMPLER, "--count", "1", "--locks", locks, timeout=timeout)
    except ScriptUploadError as exc:
        raise HelperError(str(exc)) from None
    except TimeoutError:
        raise HelperError(f"{SAMPLER} did not answer on {host.name} within {timeout:g} s") from None
    if not done.stdout.strip():
        why = last_line(done.stderr) or f"exit code {done.exit_code}"
        raise HelperError(f"{SAMPLER} gave no answer on {host.name}: {why}")
    samples = parse_output(host.name, done.stdout)
    return samples[-1]


__all__ = ["GpuSampleError", "HostGpus", "sample_host"]
