"""A Slurm host on the real Slurm (tests/fixtures/slurm.py), with the StubEngine as the engine.

The lifecycle a batch job has: queued with its reason while the nodes are drained, running on the
node Slurm chose, its port reached at the recorded head address, stopped by ``scancel`` of its own
job only; ended by its time limit (said so, with the stage its log had reached); its engine
crashing (the root cause from its log, as for a plain host).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import httpx
import pytest

from servelab.engines.runs.history import display_state
from servelab.engines.logs.files import analyze_bytes
from servelab.engines.runs.records import RunStatus
from servelab.engines.runs.manager import Runs
from servelab.engines.runs.state import RunState, StageState
from servelab.engines.slurm.script import SCRIPT_NAME
from tests.conftest import REPO
from tests.fixtures.runlab import STUB_PATH, toml_value
from tests.fixtures.ports import free_port
from tests.fixtures.slurm import SlurmLab, queued_status

pytestmark = pytest.mark.slurm
LOGS = REPO / "tests" / "data" / "logs"


def stub_experiment(lab: SlurmLab, name: str, host: str = "cluster", **env: str) -> int:
    port = free_port()
    full = {"PYTHONPATH": STUB_PATH, "STUB_INTERVAL": "0.2", **env}
    lines = ['engine = "vllm"', f"host = {toml_value(host)}", f"model = {toml_value(str(lab.folder / 'no-model'))}", f"port = {port}", "[env]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in full.items()]
    (lab.folder / f"{name}.toml").write_text("\n".join(lines) + "\n")
    return port


def servelab(lab: SlurmLab, *args: str) -> str:
    """The servelab command line on the lab's folder: its stdout (a failure is an assertion)."""
    done = subprocess.run([sys.executable, "-m", "servelab", "--dir", str(lab.folder), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout


def test_show_prints_the_job_script(slurm_lab: SlurmLab) -> None:
    stub_experiment(slurm_lab, "shown", STUB_HTTP="1", WEIRD="a b'c $HOME")
    out = servelab(slurm_lab, "show", "shown")
    assert "job script" in out and "#SBATCH --partition=lab" in out and "#SBATCH --time=10" in out
    assert "export WEIRD='a b'\"'\"'c $HOME'" in out  # shlex-quoted: the shell reads one literal word
    data = json.loads(servelab(slurm_lab, "show", "shown", "--json"))
    assert data["slurm_script"].startswith("#!/bin/bash\n#SBATCH --job-name=servelab-shown-")


async def wait_state(runs: Runs, run_id: str, want: set[RunState], timeout: float = 60, *, job_ended: bool = False) -> RunStatus:
    """Until the run's status is one of ``want`` (``job_ended``: and Slurm has ended its job too, past
    COMPLETING: the engine's exit code is written while Slurm still cleans up)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        st = await runs.status(run_id)
        if st.status in want and (not job_ended or (st.job is not None and st.job.state.is_terminal)):
            return st
        if loop.time() > deadline:
            raise AssertionError(f"{run_id}: {st.status} ({st.job.words if st.job else '-'}) after {timeout:.0f} s, wanted {want}")
        await asyncio.sleep(0.3)


async def test_queued_while_drained_then_running_reached_and_cancelled_alone(slurm_lab: SlurmLab) -> None:
    port = stub_experiment(slurm_lab, "stub", STUB_HTTP="1")
    runs = slurm_lab.runs()
    other = slurm_lab.cluster.run("sbatch", "--parsable", "--wrap", "sleep 300", "-o", "/dev/null").stdout.strip()  # not servelab's
    slurm_lab.cluster.drain("maint")
    rec = await runs.launch("stub", skip_preflight=True)
    assert rec.placement.job and rec.placement.job != other and rec.status is RunState.QUEUED
    script = Path(rec.run_dir, SCRIPT_NAME).read_text()
    assert "#SBATCH --partition=lab" in script and f"export SERVELAB_RUN_ID={rec.id}" in script
    st = await queued_status(runs, rec.id)
    assert st.job is not None and st.status is RunState.QUEUED and st.job.words.startswith("queued: drained"), st.job
    assert not st.alive and st.job.started_at is None
    assert display_state(st.status, st.exit_code, st.analysis) is RunState.QUEUED
    cli = servelab(slurm_lab, "status", rec.id)
    assert f"{rec.id}  queued" in cli and f"slurm     job {rec.placement.job}: queued: drained" in cli, cli
    slurm_lab.cluster.resume()
    st = await wait_state(runs, rec.id, {RunState.RUNNING})
    assert st.record.placement.nodes in ("n1", "n2") and st.record.head_node == st.record.placement.nodes
    assert st.record.head_address == "127.0.0.1" and st.job.started_at and st.job.submitted_at
    assert st.job.submitted_at < st.job.started_at  # it waited in the queue: the load counts from the start
    assert st.record.started_local == st.job.started_at.replace("T", " ")
    on_disk = json.loads(Path(rec.run_dir, "run.json").read_text())
    assert on_disk["placement"]["job"] == rec.placement.job and on_disk["head_address"] == "127.0.0.1" and on_disk["placement"]["nodes"]
    url = await runs.base_url(rec.id)
    assert url == f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            body = json.loads(urllib.request.urlopen(url + "/v1/models", timeout=2).read())
            break
        except OSError:
            await asyncio.sleep(0.2)
    assert body["data"][0]["id"] == "stub-model"
    stopped = await runs.stop(rec.id)
    assert stopped.status is RunState.STOPPED and stopped.job is not None and stopped.job.words == "cancelled by servelab stop"
    jobs = slurm_lab.cluster.jobs()
    assert rec.placement.job not in jobs and other in jobs  # only its own job
    again = await slurm_lab.runs().status(rec.id)  # a new Runs reads the recorded end
    assert again.status is RunState.STOPPED


async def test_time_limit_is_a_time_limit_end_at_its_last_stage(slurm_lab: SlurmLab, tmp_path: Path) -> None:
    good = (LOGS / "vllm-cpu-good-ngram-serve.log").read_bytes().splitlines(keepends=True)
    cut = b"".join(line for line in good[:53])  # loading: warming up, never ready
    (tmp_path / "cut.log").write_bytes(cut)
    expected = analyze_bytes(cut, "vllm")
    slurm_lab.add_host("short", python=sys.executable, time_limit="1")
    stub_experiment(slurm_lab, "slow", host="short", STUB_LOG=str(tmp_path / "cut.log"), STUB_INTERVAL="1")
    runs = slurm_lab.runs()
    rec = await runs.launch("slow", skip_preflight=True)
    await wait_state(runs, rec.id, {RunState.RUNNING})
    st = await wait_state(runs, rec.id, {RunState.TIMED_OUT}, timeout=150)
    assert st.job is not None and st.job.words.startswith("time limit reached")
    assert display_state(st.status, st.exit_code, st.analysis) is RunState.TIMED_OUT
    assert st.analysis is not None
    running = [s.name for s in st.analysis.stages if s.status is StageState.RUNNING]
    assert running == [s.name for s in expected.stages if s.status is StageState.RUNNING] and running


async def test_engine_crash_in_a_job_gives_its_root_cause(slurm_lab: SlurmLab) -> None:
    log = LOGS / "vllm-cpu-kv-cache-too-small.log"
    expected = analyze_bytes(log.read_bytes(), "vllm")
    assert expected.root_cause is not None
    stub_experiment(slurm_lab, "crash", STUB_LOG=str(log), STUB_LINES="0", STUB_EXIT="1")
    runs = slurm_lab.runs()
    rec = await runs.launch("crash", skip_preflight=True)
    st = await wait_state(runs, rec.id, {RunState.EXITED}, job_ended=True)
    assert st.exit_code == 1 and st.job is not None and st.job.scheduler_state == "FAILED"
    assert display_state(st.status, st.exit_code, st.analysis) is RunState.CRASHED
    assert st.analysis is not None and st.analysis.root_cause is not None
    assert st.analysis.root_cause.message == expected.root_cause.message


async def test_login_node_over_ssh_submits_reads_and_cancels(slurm_lab: SlurmLab, ssh_config: object) -> None:
    """The login node reached over the real sshd: sbatch, scontrol and scancel run there (argv over SSH,
    ``$SLURM_CONF`` passed with them); the port is reached through a forward to the head address."""
    alias = getattr(ssh_config, "alias")
    slurm_lab.add_host("remote", python=sys.executable, ssh=alias)
    port = stub_experiment(slurm_lab, "far", host="remote", STUB_HTTP="1")
    runs = slurm_lab.runs()
    rec = await runs.launch("far", skip_preflight=True)
    assert rec.placement.job and rec.host == "remote"
    st = await wait_state(runs, rec.id, {RunState.RUNNING})
    assert st.job is not None and st.record.head_address == "127.0.0.1"
    url = await runs.base_url(rec.id)
    assert url != f"http://127.0.0.1:{port}"  # a local end of the SSH forward
    async with httpx.AsyncClient(trust_env=False) as client:  # async: the forward is served by this loop
        for _ in range(100):
            try:
                body = (await client.get(url + "/v1/models", timeout=2)).json()
                break
            except httpx.HTTPError:
                await asyncio.sleep(0.2)
    assert body["data"][0]["id"] == "stub-model"
    stopped = await runs.stop(rec.id)
    assert stopped.status is RunState.STOPPED and rec.placement.job not in slurm_lab.cluster.jobs()


async def test_runs_list_reads_each_jobs_state_from_slurm(slurm_lab: SlurmLab) -> None:
    """A job that ended while nobody watched lists as it ended (from Slurm), not as its record last said;
    the CLI's launch names the job on stderr."""
    stub_experiment(slurm_lab, "brief", STUB_LINES="3", STUB_EXIT="0")
    done = subprocess.run([sys.executable, "-m", "servelab", "--dir", str(slurm_lab.folder), "launch", "brief", "--skip-preflight"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "submitted Slurm job " in done.stderr, done.stderr
    run_id = done.stdout.strip()
    runs = slurm_lab.runs()
    for _ in range(100):
        listed = {r.id: r for r in await runs.list("cluster")}
        if listed[run_id].placement.state == "COMPLETED":
            break
        await asyncio.sleep(0.2)
    assert listed[run_id].status is RunState.EXITED and listed[run_id].placement.state == "COMPLETED"
    assert json.loads(Path(listed[run_id].run_dir, "run.json").read_text())["status"] == "exited"
