"""A fleet campaign over ``local`` and the real Slurm partition, its login node reached over the real sshd.

The StubEngine serves every load (a real vLLM adds nothing to what is proved here: placement,
moves, the report). Four loads of two points each spread over the two hosts; once the Slurm host
has finished a point, its login node's sshd goes down (the listener and every session: the host is
unreachable); the coordinator moves that host's unfinished points (the rest of its running load,
and its queued load) to ``local``, and the report has all eight points, each with its host.

One machine: the job left running on the cluster serves on 127.0.0.1, where ``local`` reruns its
load on the same port; on a real fleet it is another machine. The test cancels that job itself
(Slurm's own ``scancel``, not servelab's: servelab cannot reach the login node any more).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.campaign import control
from servelab.engines.campaign.report import build_report
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.hosts.registry import close_all
from servelab.engines.runs.manager import Runs
from servelab.engines.runs.state import CampaignState
from tests.fixtures.campaignlab import marked, stub_experiment
from tests.fixtures.runlab import toml_value
from tests.fixtures.ports import free_port
from tests.fixtures.slurm import SlurmLab
from tests.fixtures.sshd import SshServer

pytestmark = pytest.mark.slurm


def servelab(folder: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "servelab", "--dir", str(folder), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout


def _state(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


async def _until(path: Path, what: str, predicate: Any, timeout: float = 90.0) -> dict[str, Any]:
    t0 = time.monotonic()
    while True:
        state = _state(path)
        if predicate(state):
            return state
        assert time.monotonic() - t0 < timeout, f"not {what} after {timeout:.0f} s: {json.dumps(state, indent=1)[-3000:]}"
        await asyncio.sleep(0.1)


@pytest.mark.ssh
async def test_fleet_campaign_moves_a_dropped_hosts_points_and_reports_them_all(slurm_lab: SlurmLab, downable_sshd: SshServer, tmp_path: Path) -> None:
    t_test = time.monotonic()
    lab = slurm_lab
    local_work = tmp_path / "local-work"
    with (lab.folder / "hosts.toml").open("a") as f:
        f.write(f"\n[hosts.local]\npython = {toml_value(sys.executable)}\nworkdir = {toml_value(str(local_work))}\n")
    lab.add_host("remote", python=sys.executable, ssh=downable_sshd.alias)
    ports = [free_port() for _ in range(4)]
    stub_experiment(lab, "stub", ports[0], {"STUB_TOKEN_S": "0.01"})  # type: ignore[arg-type]  # a SlurmLab has the folder it reads
    (lab.folder / "campaigns").mkdir()
    (lab.folder / "campaigns" / "spread.toml").write_text(
        'hosts = ["local", "remote"]\nbase = ["stub"]\nbaseline = "stub"\n[axes]\n'
        f'port = {json.dumps(ports)}\n"probe.concurrency" = [1, 2]\n'
    )
    planned = servelab(lab.folder, "campaign", "plan", "spread")
    assert "fleet: local (plain, 1 at a time), remote (slurm, 1 at a time)" in planned
    assert "load 1: vllm on local (nothing queued there yet)" in planned
    assert "load 2: vllm on remote (nothing queued there yet)" in planned
    assert "load 3: vllm on local (least queued work (~60 s ahead of it))" in planned

    st = await control.start(load_catalog(lab.folder), "spread", skip_preflight=True)
    state_path = Path(st.dir) / "state.json"
    assert st.hosts == ["local", "remote"] and Path(st.dir).parent == local_work / "campaigns"
    assert st.supervisor_alive, st.to_json()
    try:
        before = await _until(state_path, "a point done on remote",
                              lambda s: any(p["host"] == "remote" and p["status"] == "done" for p in s["points"].values()))
        remote_load = next(ld for ld in before["loads"] if ld["host"] == "remote" and ld["status"] in ("launching", "ready"))
        done_there = {n for n, p in before["points"].items() if p["host"] == "remote" and p["status"] == "done"}
        job = json.loads((lab.shared / "runs" / remote_load["run_id"] / "run.json").read_text())["placement"]["job"]
        t_drop = time.monotonic()
        downable_sshd.go_down()
        lab.cluster.run("scancel", job, check=False)  # one machine: see the module's docstring
        moved = await _until(state_path, "moved", lambda s: "remote" in s["fleet"]["down"] and all(
            ld["host"] == "local" for ld in s["loads"] if ld["status"] not in ("done",)))
        t_moved = time.monotonic() - t_drop
        final = await _until(state_path, "done", lambda s: s["status"] in ("done", "failed", "stopped"), timeout=120)
    finally:
        downable_sshd.come_back() if downable_sshd.process.poll() is not None else None
        if _state(state_path)["status"] not in ("done", "failed", "stopped"):
            await control.stop(load_catalog(lab.folder), st.id)
        await close_all()
    assert final["status"] == "done", json.dumps(final, indent=1)
    assert "unreachable" in moved["fleet"]["down"]["remote"] or "remote" in moved["fleet"]["down"]["remote"]
    # every point done exactly once, each with its host; what remote did not finish was moved to local
    points = final["points"]
    assert len(points) == 8 and {p["status"] for p in points.values()} == {"done"}
    for name in done_there:
        assert points[name]["host"] == "remote" and points[name]["moved_from"] is None
    moved_points = {n for n, p in points.items() if p["moved_from"] == "remote"}
    assert moved_points and not moved_points & done_there
    assert all(points[n]["host"] == "local" and points[n]["moved_why"] == "unreachable" for n in moved_points)
    for name, p in points.items():
        record = json.loads((Path(st.dir) / p["result"]).read_text())
        assert record["host"] == p["host"] and len(record["repeats"]) == 2
    moved_load = next(ld for ld in final["loads"] if ld["index"] == remote_load["index"])
    assert moved_load["moves"][0]["from"] == "remote" and moved_load["moves"][0]["to"] == "local"
    assert moved_load["left"] == [[remote_load["run_id"], "remote"]]  # recorded: its host could not be asked to stop it
    # the local runs this campaign started are stopped, their processes gone
    local_runs = {ld["run_id"] for ld in final["loads"] if ld["run_id"]}
    assert marked(local_runs) == []
    # the report: all eight points with their hosts (CLI table and JSON)
    report = await build_report(Runs(load_catalog(lab.folder)), st.id)
    assert report.hosts == ["local", "remote"] and len(report.rows) == 8
    assert {r.point: r.host for r in report.rows} == {n: p["host"] for n, p in points.items()}
    assert all(r.status is CampaignState.DONE and r.output_tps for r in report.rows)
    table = servelab(lab.folder, "campaign", "report", st.id)
    assert "(fleet: local, remote)" in table and "local (moved from remote: unreachable)" in table
    status = servelab(lab.folder, "campaign", "status", st.id)
    assert "campaign " + st.id + " on the fleet local, remote: done" in status and "remote dropped out:" in status
    (drop,) = final["drops"]
    # the drop names every load it moved: the running one, and load 3 unless local had room first and took it
    # from remote's queue while remote was still busy (a steal, not a move: the rule in engines/campaign/fleet.py)
    moved_off = sorted(ld["index"] for ld in final["loads"] if any(m["from"] == "remote" and m["why"] == "unreachable" for m in ld["moves"]))
    assert remote_load["index"] in moved_off and set(moved_off) <= {remote_load["index"], 3}
    assert drop["host"] == "remote" and drop["loads"] == moved_off and drop["silent_s"] is not None
    print(f"\nfleet campaign: drop seen and points moved in {t_moved:.2f} s; whole test {time.monotonic() - t_test:.1f} s; "
          f"drops {final['drops']}")


async def test_stop_ends_only_its_own_runs_and_jobs_and_resume_keeps_done_points(slurm_lab: SlurmLab, tmp_path: Path) -> None:
    """``campaign stop`` on a fleet campaign: the coordinator ends its local run and ``scancel``s its own
    job (a job servelab did not submit keeps running); ``resume`` finishes without running a done point again."""
    lab = slurm_lab
    with (lab.folder / "hosts.toml").open("a") as f:
        f.write(f"\n[hosts.local]\npython = {toml_value(sys.executable)}\nworkdir = {toml_value(str(tmp_path / 'local-work'))}\n")
    ports = [free_port() for _ in range(2)]
    stub_experiment(lab, "stub", ports[0], {"STUB_TOKEN_S": "0.05"})  # type: ignore[arg-type]  # a SlurmLab has the folder it reads
    (lab.folder / "campaigns").mkdir()
    (lab.folder / "campaigns" / "pair.toml").write_text(
        f'hosts = ["local", "cluster"]\nbase = ["stub"]\n[axes]\nport = {json.dumps(ports)}\n"probe.concurrency" = [1, 2]\n'
    )
    other = lab.cluster.run("sbatch", "--parsable", "--wrap", "sleep 300", "-o", "/dev/null").stdout.strip()  # not servelab's
    try:
        st = await control.start(load_catalog(lab.folder), "pair", skip_preflight=True)
        state_path = Path(st.dir) / "state.json"
        running = await _until(state_path, "a point done and both loads ready", lambda s: any(p["status"] == "done" for p in s["points"].values())
                               and all(ld["status"] == "ready" for ld in s["loads"]))
        job = json.loads((lab.shared / "runs" / next(ld["run_id"] for ld in running["loads"] if ld["host"] == "cluster") / "run.json").read_text())["placement"]["job"]
        stopped = servelab(lab.folder, "campaign", "stop", st.id)
        assert f"campaign {st.id} on the fleet local, cluster: stopped" in stopped, stopped
        state = _state(state_path)
        assert job not in lab.cluster.jobs() and other in lab.cluster.jobs()
        assert marked({ld["run_id"] for ld in running["loads"]}) == []
        done_before = {n: (Path(st.dir) / p["result"]).stat().st_mtime_ns for n, p in state["points"].items() if p["status"] == "done"}
        assert done_before and all(p["status"] in ("done", "pending") for p in state["points"].values())
        servelab(lab.folder, "campaign", "resume", st.id)
        final = await _until(state_path, "done", lambda s: s["status"] in ("done", "failed", "stopped"), timeout=120)
    finally:
        if _state(state_path)["status"] not in ("done", "failed", "stopped"):
            await control.stop(load_catalog(lab.folder), st.id)
        lab.cluster.run("scancel", other, check=False)
        await close_all()
    assert final["status"] == "done" and {p["status"] for p in final["points"].values()} == {"done"}
    for name, mtime in done_before.items():  # never run again
        assert (Path(st.dir) / final["points"][name]["result"]).stat().st_mtime_ns == mtime


async def test_a_node_failure_requeues_the_loads_unfinished_points(slurm_lab: SlurmLab, tmp_path: Path) -> None:
    """The load's node fails under its job (set down): Slurm puts the job back in its queue; the
    coordinator cancels it and requeues the load's unfinished points as a new job (on the other
    node), and the done point is not run again."""
    lab = slurm_lab
    with (lab.folder / "hosts.toml").open("a") as f:
        f.write(f"\n[hosts.local]\npython = {toml_value(sys.executable)}\nworkdir = {toml_value(str(tmp_path / 'local-work'))}\n")
    stub_experiment(lab, "stub", free_port(), {"STUB_TOKEN_S": "0.05"})  # type: ignore[arg-type]  # a SlurmLab has the folder it reads
    (lab.folder / "campaigns").mkdir()
    (lab.folder / "campaigns" / "one.toml").write_text('hosts = ["cluster"]\nbase = ["stub"]\n[axes]\n"probe.concurrency" = [1, 2, 3]\n')
    st = await control.start(load_catalog(lab.folder), "one", skip_preflight=True)
    state_path = Path(st.dir) / "state.json"
    try:
        first = await _until(state_path, "a point done", lambda s: any(p["status"] == "done" for p in s["points"].values()))
        job = json.loads((lab.shared / "runs" / first["loads"][0]["run_id"] / "run.json").read_text())["placement"]["job"]
        node = lab.cluster.run("squeue", "-h", "-j", job, "-o", "%N").stdout.strip()
        lab.cluster.run("scontrol", "update", f"nodename={node}", "state=down", "reason=fleet-test")
        requeued = await _until(state_path, "requeued", lambda s: bool(s["loads"][0]["moves"]))
        final = await _until(state_path, "done", lambda s: s["status"] in ("done", "failed", "stopped"), timeout=120)
    finally:
        if _state(state_path)["status"] not in ("done", "failed", "stopped"):
            await control.stop(load_catalog(lab.folder), st.id)
        await close_all()
    move = requeued["loads"][0]["moves"][0]
    assert (move["from"], move["to"]) == ("cluster", "cluster") and move["why"].startswith("Slurm requeued its job"), move
    assert job not in lab.cluster.jobs()  # the requeued job was cancelled, not left to start again
    assert final["status"] == "done" and {p["status"] for p in final["points"].values()} == {"done"}
    done_first = {n for n, p in first["points"].items() if p["status"] == "done"}
    for name, p in final["points"].items():
        assert (p["moved_from"] is None) == (name in done_first), (name, p)
        record = json.loads((Path(st.dir) / p["result"]).read_text())
        assert record["run_id"] == (first["loads"][0]["run_id"] if name in done_first else final["loads"][0]["run_id"])
    assert final["loads"][0]["requeues"] == 1
