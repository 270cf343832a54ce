"""The tiny vLLM as a Slurm batch job on the real Slurm: submitted while both nodes are drained, it
reads "queued: drained" (not a load that never starts); resumed, it runs on the node Slurm chose,
its own stages follow, it is ready, probed through the recorded head address, and stopped by
``scancel`` of its job (one real vLLM start)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from servelab.engines.runs.history import display_state
from servelab.engines.preflight.checks import run_preflight
from servelab.engines.probe.artifacts import PROBE_JSON, load_probe, probe_run, wait_for_ready
from servelab.engines.runs.manager import Runs
from servelab.engines.runs.state import RunState
from tests.conftest import ENGINE_PYTHON, need_engine
from tests.fixtures.procs import marked
from tests.fixtures.slurm import SlurmLab, queued_status, tiny_vllm_experiment

pytestmark = [pytest.mark.slurm, pytest.mark.engine]


async def test_tiny_vllm_queued_then_ready_probed_and_cancelled(slurm_lab: SlurmLab) -> None:
    need_engine()
    slurm_lab.add_host("gpu", python=str(ENGINE_PYTHON), time_limit="15")
    tiny_vllm_experiment(slurm_lab, "tiny", host="gpu")
    runs: Runs = slurm_lab.runs()
    report = await run_preflight(runs.catalog, runs.catalog.get("tiny"))  # the engine's own checks, on the login node
    assert report.ok and "login node" in report.summary() and "no queue time" in report.summary(), report.summary()
    slurm_lab.cluster.drain("maint")
    rec = await runs.launch("tiny", skip_preflight=True)
    st = await queued_status(runs, rec.id)  # a scheduling pass: Slurm has looked at it and left it pending
    assert st.job is not None and st.job.words.startswith("queued: drained") and st.status is RunState.QUEUED
    assert display_state(st.status, st.exit_code, st.analysis) is RunState.QUEUED and not marked({rec.id})
    slurm_lab.cluster.resume()
    t0 = time.monotonic()
    while (st := await runs.status(rec.id)).status is RunState.QUEUED:
        assert time.monotonic() - t0 < 60, st.job
        await asyncio.sleep(0.2)
    assert st.status is RunState.RUNNING and st.job is not None and st.job.started_at
    assert st.record.head_address == "127.0.0.1" and st.record.placement.nodes in ("n1", "n2")
    await wait_for_ready(runs, rec.id, timeout_s=480, poll_s=1.0)
    st = await runs.status(rec.id)
    assert st.analysis is not None and display_state(st.status, st.exit_code, st.analysis) is RunState.READY
    assert st.record.started_local and st.record.argv == runs.catalog.launch_spec(runs.catalog.get("tiny"), runs.catalog.host("gpu")).argv
    result = await probe_run(runs, rec.id)
    assert result is not None and Path(rec.run_dir, PROBE_JSON).is_file()
    assert result.requests and all(r.get("error") in (None, "") for r in result.requests), result.requests[:1]
    summary = await load_probe(runs, rec.id)
    assert summary is not None and summary.engine == "vllm"
    stopped = await runs.stop(rec.id)
    assert stopped.status is RunState.STOPPED and rec.placement.job not in slurm_lab.cluster.jobs()
    for _ in range(50):  # the job's processes go with it (Slurm kills the step; servelab signals none)
        if not marked({rec.id}):
            break
        await asyncio.sleep(0.2)
    assert not marked({rec.id})
    assert json.loads(Path(rec.run_dir, "run.json").read_text())["status"] == "stopped"
