"""A two-node tiny SGLang experiment on the real Slurm (tests/fixtures/slurm.py): one batch job over
n1 and n2 whose script runs ``srun`` with one task per node, SGLang ``--nnodes 2`` with each task's
own ``--node-rank``. It is ready, probed through the head the run recorded, and stopped by
``scancel`` of its job with nothing left (one real SGLang two-node start, ~2 min here).

Both Slurm nodes are this machine (NodeAddr 127.0.0.1), so the worker is at the head's address and
takes SGLang's ``--port`` + 1, as the plain two-host experiment does (tests/fixtures/multinode_lab.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from servelab.engines.probe.artifacts import PROBE_JSON, probe_run, wait_for_ready
from servelab.engines.runs.manager import Runs
from servelab.engines.runs.state import RunState
from servelab.engines.slurm.script import SCRIPT_NAME, node_log
from tests.conftest import SGLANG_PYTHON, TINY_MODEL, need_sglang
from tests.fixtures.ports import free_port
from tests.fixtures.procs import marked
from tests.fixtures.slurm import SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.engine]


def sglang_two_nodes(lab: SlurmLab, name: str) -> int:
    """The tiny SGLang over two Slurm nodes (SGLang's CPU path, one core per rank, as SGLANG_2N); its port."""
    port = free_port()
    (lab.folder / f"{name}.toml").write_text(
        f'engine = "sglang"\nhost = "sg"\nmodel = {json.dumps(str(TINY_MODEL))}\nserved_model_name = "tiny-llama"\nport = {port}\n'
        f'[multinode]\nbackend = "native"\nnodes = 2\nport = {free_port()}\nrendezvous_s = 60\n'
        "[parallel]\ntensor = 2\n"
        '[env]\nSGLANG_USE_CPU_ENGINE = "1"\nSGLANG_CPU_OMP_THREADS_BIND = "0|1"\n'
        '[engine_args]\ndevice = "cpu"\ndtype = "float32"\nmax-total-tokens = 2048\nmem-fraction-static = 0.8\n'
        'context-length = 512\nmax-running-requests = 2\nsleep-on-idle = true\nhost = "127.0.0.1"\n'
        '[probe]\nprompts = "builtin:mixed"\nmax_tokens = 4\nconcurrency = 1\nrepeats = 1\nwarmup = 0\n'
    )
    return port


async def test_sglang_two_nodes_under_srun_ready_probed_and_cancelled(slurm_lab: SlurmLab) -> None:
    need_sglang()
    slurm_lab.add_host("sg", python=str(SGLANG_PYTHON), time_limit="15")
    port = sglang_two_nodes(slurm_lab, "tiny2n")
    runs: Runs = slurm_lab.runs()
    rec = await runs.launch("tiny2n", skip_preflight=True)
    assert rec.placement.job and rec.placement.node_count == 2
    script = Path(rec.run_dir, SCRIPT_NAME).read_text()
    assert "#SBATCH --nodes=2" in script and "srun --nodes=2 --ntasks=2 --ntasks-per-node=1" in script
    t0 = time.monotonic()
    while (st := await runs.status(rec.id)).status is RunState.QUEUED:
        assert time.monotonic() - t0 < 60, st.job
        await asyncio.sleep(0.2)
    assert st.status is RunState.RUNNING, st.job
    running = time.monotonic() - t0
    # the run folder: the job, the nodes Slurm chose, the head (the allocation's first host) and its address
    assert st.record.placement.nodes == "n[1-2]" and st.record.head_node == "n1" and st.record.head_address == "127.0.0.1"
    await wait_for_ready(runs, rec.id, timeout_s=400, poll_s=1.0)
    ready = time.monotonic() - t0
    head_log = Path(rec.log_path).read_text(errors="replace")
    worker_log = Path(rec.run_dir, node_log(1)).read_text(errors="replace")
    # each task ran its own rank: TP0 on the head, TP1 on the worker, which (at the head's address) took --port + 1
    assert " TP0] " in head_log and " TP1] " not in head_log and " TP1] " in worker_log and " TP0] " not in worker_log
    assert f"Dummy health check server started in background thread at 127.0.0.1:{port + 1}" in worker_log
    result = await probe_run(runs, rec.id)  # through the head the run recorded
    assert result is not None and Path(rec.run_dir, PROBE_JSON).is_file()
    assert result.requests and all(r.get("error") in (None, "") for r in result.requests), result.requests[:1]
    both = marked({rec.id})
    assert len({pid for pid, _, cmd in both if "sglang" in cmd}) >= 2, both  # both ranks' engines, under the job
    t1 = time.monotonic()
    stopped = await runs.stop(rec.id)
    assert stopped.status is RunState.STOPPED and rec.placement.job not in slurm_lab.cluster.jobs()
    for _ in range(100):  # Slurm ends every task of the job; servelab signals no process
        if not marked({rec.id}):
            break
        await asyncio.sleep(0.2)
    assert not marked({rec.id}), marked({rec.id})
    print(f"\nsubmit to running {running:.1f} s, to ready {ready:.0f} s, cancel to nothing left {time.monotonic() - t1:.1f} s")
    assert json.loads(Path(rec.run_dir, "run.json").read_text())["status"] == "stopped"
