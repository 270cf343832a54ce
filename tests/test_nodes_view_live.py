"""A real two-node group (the StubEngine on ``local`` and on ``box`` over the real sshd): its view
from the followed node logs, probe and compare through the group id or any node's id, the
identity listing the nodes."""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing

import pytest

from servelab.engines.verdict.compare import compare_runs, render
from servelab.engines.nodes.run import MultiNodeRuns, NodeLine
from servelab.engines.nodes.view import NodeChunk, NodesLog, current_view, follow_chunks, head_run_id, lanes_json, resolve_group
from servelab.engines.probe.artifacts import load_probe, probe_run
from servelab.engines.runs.records import NoSuchRun
from tests.fixtures.runlab import Lab
from tests.fixtures.sshd import SshServer
from tests.fixtures.stub_nodes import stub_group

pytestmark = pytest.mark.ssh

PROBE = '[probe]\nprompts = "builtin:mixed"\nmax_tokens = 4\nrepeats = 1\nwarmup = 0\n'


async def test_a_stub_group_is_one_run_for_view_probe_and_compare(ssh_config: SshServer, lab: Lab) -> None:
    stub_group(lab, "stub-2n", probe=PROBE)
    lab.experiment("solo")
    runs = lab.runs()
    m = MultiNodeRuns(runs)
    rec = await m.launch("stub-2n", skip_preflight=True)
    head, worker = rec.nodes
    nodes_log = NodesLog(rec, runs.live)
    lines: list[NodeLine] = []

    async def follow() -> None:
        async with aclosing(follow_chunks(runs, rec)) as chunks:
            async for item in chunks:
                if isinstance(item, NodeChunk):
                    lines.extend(await nodes_log.feed(item))
                else:
                    lines.extend(nodes_log.log_ended(item))

    follower = asyncio.create_task(follow())
    try:
        for _ in range(400):  # both nodes' StubEngines write numbered lines
            if {ln.rank for ln in lines if ln.text.startswith("line ")} == {0, 1}:
                break
            await asyncio.sleep(0.05)
        assert any(ln.render().startswith("[n1 box] STUB argv") and "--headless" in ln.text for ln in lines)
        status = await m.status(rec)
        view = nodes_log.view(status)
        assert [lv.lane.label for lv in view.lanes] == ["n0 local", "n1 box"]
        assert view.alive == {0: True, 1: True} and view.root_cause is None
        assert all(lv.analysis is runs.live.get(lv.lane.node.run_id, "vllm").analysis for lv in view.lanes)
        # what `servelab nodes` shows: the same rows, from the logs as they are on the hosts
        assert [r["label"] for r in lanes_json(await current_view(runs, status))] == ["n0 local", "n1 box"]

        # every id of the group names the head's server; an ordinary run is not a group
        for rid in (rec.id, head.run_id, worker.run_id):
            assert await head_run_id(runs, rid) == (head.run_id, rec)
        solo = await runs.launch("solo", skip_preflight=True)
        assert await resolve_group(runs, solo.id) is None
        with pytest.raises(NoSuchRun):
            await resolve_group(runs, "stub-2n-20990101-000000-abcd")

        result = await probe_run(runs, rec.id, ready_timeout_s=60)
        ident = result.summary["identity"]
        assert ident["host"] == "local" and ident["group"] == rec.id
        assert [(n["rank"], n["host"], n["role"], n["run"]) for n in ident["nodes"]] == [
            (0, "local", "server", head.run_id), (1, "box", "headless", worker.run_id)]
        for rid in (rec.id, worker.run_id, head.run_id):
            stored = await load_probe(runs, rid)
            assert stored is not None and stored["identity"]["nodes"] == ident["nodes"]
        doc = json.loads(render(await compare_runs(runs, [rec.id]), "json"))
        nodes_row = next(r for r in doc["rows"] if r["label"] == "nodes")
        assert nodes_row["values"] == {rec.id: f"n0 local server {head.run_id}; n1 box headless {worker.run_id}"}
        await runs.stop(solo.id)
    finally:
        report = await m.stop(rec, grace=5)
        await asyncio.wait_for(follower, 30)
        nodes_log.close()
    assert report.problems == []
    assert {ln.rank for ln in lines} == {0, 1}
