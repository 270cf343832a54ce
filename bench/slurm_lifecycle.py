"""Figures for runs on a Slurm host: submit, submit-to-running, running-to-ready, cancel-to-gone.

Starts the test suite's real Slurm (tests/fixtures/slurm.py: munged, slurmctld, two slurmd on this
machine) for the occasion, and runs through ``Runs`` as the CLI does: the StubEngine ``--stub N``
times (what Slurm and servelab cost, the engine starting at once), then the tiny vLLM once (a real
load: queued while drained, resumed, ready, probed, cancelled). Prints one line per figure.

    .venv/bin/python bench/slurm_lifecycle.py [--stub 5] [--no-vllm]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from servelab.engines.hosts.registry import close_all  # noqa: E402
from servelab.engines.probe.artifacts import probe_run, wait_for_ready  # noqa: E402
from servelab.engines.runs.manager import Runs  # noqa: E402
from servelab.engines.runs.state import RunState  # noqa: E402
from tests.conftest import ENGINE_PYTHON  # noqa: E402
from tests.fixtures.ports import free_port  # noqa: E402
from tests.fixtures.runlab import STUB_PATH, toml_value  # noqa: E402
from tests.fixtures.slurm import SlurmCluster, SlurmLab, start_cluster, tiny_vllm_experiment  # noqa: E402


async def until_running(runs: Runs, run_id: str, timeout: float = 120) -> float:
    t0 = time.perf_counter()
    while (await runs.status(run_id, analyze=False)).status is not RunState.RUNNING:
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"{run_id} not running after {timeout:.0f} s")
        await asyncio.sleep(0.05)
    return time.perf_counter() - t0


async def cancel_to_gone(runs: Runs, cluster: SlurmCluster, run_id: str, job: str) -> tuple[float, float]:
    """(stop call, stop start to the job gone from squeue) in seconds."""
    t0 = time.perf_counter()
    await runs.stop(run_id)
    stop_s = time.perf_counter() - t0
    while job in cluster.jobs():
        await asyncio.sleep(0.02)
    return stop_s, time.perf_counter() - t0


def line(name: str, values: list[float]) -> None:
    if len(values) == 1:
        print(f"{name:<34} {values[0]:8.3f} s")
    else:
        print(f"{name:<34} median {statistics.median(values):7.3f} s  min {min(values):.3f}  max {max(values):.3f}  (n={len(values)})")


async def main(stubs: int, vllm: bool) -> None:
    root = Path(tempfile.mkdtemp(prefix="servelab-bench-slurm-"))
    t0 = time.perf_counter()
    cluster = start_cluster(root / "slurm")
    print(f"{'slurm daemons up (both nodes idle)':<34} {time.perf_counter() - t0:8.3f} s")
    folder = root / "experiments"
    folder.mkdir()
    (folder / "hosts.toml").write_text("")
    lab = SlurmLab(folder, root / "shared", cluster)
    lab.add_host("cluster", python=sys.executable)
    lab.add_host("gpu", python=str(ENGINE_PYTHON), time_limit="15")
    (folder / "stub.toml").write_text(
        f'engine = "vllm"\nhost = "cluster"\nmodel = "no-model"\nport = {free_port()}\n[env]\nPYTHONPATH = {toml_value(STUB_PATH)}\nSTUB_INTERVAL = "0.2"\n'
    )
    runs = lab.runs()
    try:
        submit, running, stop, gone = [], [], [], []
        for _ in range(stubs):
            t = time.perf_counter()
            rec = await runs.launch("stub", skip_preflight=True)
            submit.append(time.perf_counter() - t)
            running.append(submit[-1] + await until_running(runs, rec.id))
            s, g = await cancel_to_gone(runs, cluster, rec.id, str(rec.placement.job))
            stop.append(s)
            gone.append(g)
        if stubs:
            print("StubEngine (idle nodes):")
            line("  launch (sbatch --parsable)", submit)
            line("  submit to running", running)
            line("  servelab stop (scancel, ended)", stop)
            line("  cancel to gone from squeue", gone)
        if vllm:
            tiny_vllm_experiment(lab, "tiny", host="gpu")
            runs = lab.runs()
            cluster.drain("maint")
            rec = await runs.launch("tiny", skip_preflight=True)
            await asyncio.sleep(2)
            st = await runs.status(rec.id)
            print("tiny vLLM:")
            print(f"  {'while drained':<32} {st.job.words if st.job else st.status}")
            t = time.perf_counter()
            cluster.resume()
            line("  resume to running", [await until_running(runs, rec.id)])
            t = time.perf_counter()
            await wait_for_ready(runs, rec.id, timeout_s=600, poll_s=0.5)
            line("  running to ready (load)", [time.perf_counter() - t])
            t = time.perf_counter()
            await probe_run(runs, rec.id)
            line("  probe through the head address", [time.perf_counter() - t])
            s, g = await cancel_to_gone(runs, cluster, rec.id, str(rec.placement.job))
            line("  servelab stop (scancel, ended)", [s])
            line("  cancel to gone from squeue", [g])
    finally:
        await close_all()
        cluster.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stub", type=int, default=5, help="StubEngine rounds (default 5)")
    p.add_argument("--no-vllm", action="store_true", help="skip the tiny vLLM round")
    a = p.parse_args()
    asyncio.run(main(a.stub, not a.no_vllm))
