"""A multi-node run as one run (engines/nodes/view.py), on real two-node logs: a stage row per node,
per rank where the lines carry SGLang's TP tags, the merged lines tagged with their node, the filter."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from servelab.engines.logs.files import analyze_bytes
from servelab.engines.logs.live import LiveAnalyses
from servelab.engines.nodes.run import MultiNodeRecord, MultiNodeStatus, NodeLine, NodeRun, NodeState
from servelab.engines.runs.records import RunRecord, RunStatus
from servelab.engines.nodes.view import NodeChunk, NodesLog, filter_label, group_id_of, next_filter, rank_analyzer
from servelab.engines.runs.state import RunState

LOGS = Path(__file__).parent / "data" / "logs" / "multinode"
GROUP = "tiny-2n-20261201-172451-1983"
SGLANG_2N = ("sglang-cpu-2n-tp2-serve-n0.log", "sglang-cpu-2n-tp2-serve-n1.log")
VLLM_2N = ("vllm-cpu-api-server-worker-n0.log", "vllm-cpu-api-server-worker-n1.log")


def record(engine: str, hosts: list[str]) -> MultiNodeRecord:
    nodes = [NodeRun(i, h, "server" if i == 0 else "worker", f"tiny-2n.n{i}-20261201-172451-1983", i == 0) for i, h in enumerate(hosts)]
    return MultiNodeRecord(GROUP, "tiny-2n", engine, "native", nodes)


def disk_lines(name: str) -> list[str]:
    """A log's lines as the merged follow cuts them: at each newline, a CR before it dropped."""
    parts = (LOGS / name).read_bytes().decode("utf-8", "replace").split("\n")
    return [p.rstrip("\r") for p in (parts[:-1] if parts[-1] == "" else parts)]


def feed_all(rec: MultiNodeRecord, files: tuple[str, ...], chunk: int, live: LiveAnalyses | None = None) -> tuple[NodesLog, list[NodeLine]]:
    """Each node's real log in ``chunk``-byte pieces, the nodes interleaved as the merged follow delivers them."""
    nodes_log = NodesLog(rec, live or LiveAnalyses())
    datas = {n.run_id: (LOGS / f).read_bytes() for n, f in zip(rec.nodes, files, strict=True)}
    lines: list[NodeLine] = []

    async def go() -> None:
        longest = max(len(d) for d in datas.values())
        for start in range(0, longest, chunk):
            for n in rec.nodes:
                piece = datas[n.run_id][start : start + chunk]
                if piece:
                    lines.extend(await nodes_log.feed(NodeChunk(n, start, piece)))
        for n in rec.nodes:
            lines.extend(nodes_log.log_ended(n))

    asyncio.run(go())
    return nodes_log, lines


@pytest.mark.parametrize("chunk", [97, 4096, 1 << 20])
def test_sglang_two_nodes_a_stage_row_per_rank(chunk: int) -> None:
    """Node 1's only rank is TP1: the node's own analysis reads stages from rank 0 and sees none of
    them, its TP1 row sees weights and KV cache done. Every line comes back once, tagged."""
    rec = record("sglang", ["local", "box"])
    nodes_log, lines = feed_all(rec, SGLANG_2N, chunk)
    view = nodes_log.view()
    assert [lv.lane.label for lv in view.lanes] == ["n0 local TP0", "n1 box TP1"]
    head, worker = view.lanes
    assert head.analysis is not None and head.analysis.stage("ready").status == "done"
    assert head.analysis.stage("weights").progress is not None and head.analysis.stage("weights").progress.total == 1
    assert worker.analysis is not None
    assert [s.name for s in worker.stages if s.status == "done"] == ["process", "config", "weights", "kv_cache"]
    n1 = (LOGS / SGLANG_2N[1]).read_bytes()
    assert analyze_bytes(n1, "sglang").stage("weights").status == "pending"  # what the node's own analysis shows
    for n, f in zip(rec.nodes, SGLANG_2N, strict=True):
        assert [ln.text for ln in lines if ln.rank == n.rank] == disk_lines(f)
    assert any(ln.render().startswith("[n1 box] [2026-12-01 17:25:28 TP1] Load weight end") for ln in lines)


def test_a_node_with_eight_ranks_gets_eight_rows() -> None:
    """A real 8-GPU node's log (every rank logs "Load weight begin"): one row per TP rank, each
    reading its own rank's lines."""
    rec = record("sglang", ["gpu-a"])
    nodes_log, _ = feed_all(rec, ("sglang-tp8-ranks-load-weight-pr11716.log",), 256)
    view = nodes_log.view()
    assert [lv.lane.label for lv in view.lanes] == [f"n0 gpu-a TP{r}" for r in range(8)]
    for lv in view.lanes:
        stage = lv.stage
        assert stage is not None and (stage.name, stage.status) == ("weights", "running"), lv.lane.label
        assert lv.analysis is not None and lv.analysis.stage("config").status == "done"


def test_rank_analyzer_reads_only_its_rank() -> None:
    """Rank 3's analyzer moves on TP3's lines, not on TP0's."""
    text = b"[2025-10-16 09:06:10 TP0] Load weight begin. avail mem=137.34 GB\n"
    a = rank_analyzer("sglang", 3)
    a.feed(text)
    assert a.snapshot().stage("weights").status == "pending"
    b = rank_analyzer("sglang", 3)
    b.feed(text.replace(b"TP0]", b"TP3]"))
    assert b.snapshot().stage("weights").status == "running"


def test_vllm_native_two_nodes_a_row_per_node_sharing_the_runs_analysis() -> None:
    """vLLM's lines carry no rank tag: one row per node, and each is the node's own live analysis
    (the one ``servelab status`` and the watcher read), not a second one."""
    rec = record("vllm", ["vlocal", "vbox"])
    live = LiveAnalyses()
    nodes_log, lines = feed_all(rec, VLLM_2N, 4096, live)
    view = nodes_log.view()
    assert [lv.lane.label for lv in view.lanes] == ["n0 vlocal", "n1 vbox"]
    for lv, n in zip(view.lanes, rec.nodes, strict=True):
        shared = live.get(n.run_id, "vllm")
        assert shared.streams == 1 and lv.analysis is shared.analysis
        assert shared.offset == (LOGS / VLLM_2N[n.rank]).stat().st_size
    assert view.lanes[0].analysis is not None and view.lanes[0].analysis.stage("weights").status == "done"
    nodes_log.close()
    assert all(live.get(n.run_id, "vllm").streams == 0 for n in rec.nodes)
    assert view.state in (RunState.LOADING, RunState.CRASHED)  # the head's own state until a status says more
    assert len(lines) == sum(len(disk_lines(f)) for f in VLLM_2N)


def test_filter_cycles_all_then_each_node_and_group_ids() -> None:
    rec = record("sglang", ["local", "box"])
    seen: list[int | None] = [None]
    for _ in range(3):
        seen.append(next_filter(rec, seen[-1]))
    assert seen == [None, 0, 1, None]
    assert [filter_label(rec, f) for f in seen[:3]] == ["all nodes", "n0 local only", "n1 box only"]
    assert group_id_of("tiny-2n.n1-20261201-172451-1983") == GROUP
    assert group_id_of("tiny-2n.n0.ray-head-20261201-172451-1983") == GROUP
    assert group_id_of(GROUP) is None and group_id_of("tiny-cpu-vllm-baseline-20261201-172451-1983") is None


def test_a_rank_first_seen_past_the_kept_prefix_reads_from_there_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the log's first bytes are kept to start a late rank's row: past them, the row starts
    with the chunk that named the rank (here every rank past TP7's first line), and still sees its
    own "Load weight begin"."""
    monkeypatch.setattr("servelab.engines.nodes.view.RANK_PREFIX_BYTES", 300)
    rec = record("sglang", ["gpu-a"])
    nodes_log, _ = feed_all(rec, ("sglang-tp8-ranks-load-weight-pr11716.log",), 120)
    view = nodes_log.view()
    assert [lv.lane.label for lv in view.lanes] == [f"n0 gpu-a TP{r}" for r in range(8)]
    assert all(lv.stage is not None and (lv.stage.name, lv.stage.status) == ("weights", "running") for lv in view.lanes)


@pytest.mark.parametrize(("engine", "files"), [("sglang", SGLANG_2N)])  # the recorded vLLM pair crashed before ready
def test_a_worker_serves_once_the_group_serves(engine: str, files: tuple[str, str]) -> None:
    """A worker never prints the head's ready line: its own log stops at its last stage. Once the
    group is ready, the worker's row reads ready too, and no stage of it still runs."""
    rec = record(engine, ["local", "box"])
    nodes_log = NodesLog(rec, LiveAnalyses())
    ready = {"sglang": b"The server is fired up and ready to roll!", "vllm": b"Application startup complete."}[engine]

    async def go() -> None:  # each node's log up to the moment the head says ready: the group is live
        head = (LOGS / files[0]).read_bytes()
        cut = head.index(b"\n", head.index(ready)) + 1
        stamp = re.compile(rb"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
        at_ready = max(m.group(1) for ln in head[:cut].splitlines() if (m := stamp.match(ln)))
        kept: list[bytes] = []
        for ln in (LOGS / files[1]).read_bytes().splitlines(keepends=True):  # the worker as it was at that second
            m = stamp.match(ln)
            if m and m.group(1) > at_ready:
                break
            kept.append(ln)
        worker = b"".join(kept)
        for n, data in zip(rec.nodes, (head[:cut], worker), strict=True):
            await nodes_log.feed(NodeChunk(n, 0, data))

    asyncio.run(go())
    view = nodes_log.view()
    assert view.state is RunState.READY
    workers = [lv for lv in view.lanes if not lv.lane.node.serves]
    assert workers and all(lv.analysis is not None and lv.analysis.state is not RunState.READY for lv in workers)  # their own logs
    assert all(lv.state is RunState.READY for lv in view.lanes)
    assert not any(lv.stage is not None and lv.stage.status == "running" for lv in view.lanes)


# -- when a group has ended -----------------------------------------------------------------------
@pytest.mark.parametrize("state", list(RunState))
def test_a_group_ends_only_when_every_node_record_says_how(state: RunState) -> None:
    """A node process just gone reads ``running`` until its supervisor writes the exit (Runs.status):
    the group has not ended then, nor while a node is alive or unanswered; it has once every node
    is gone with a terminal record (the nodes screen stops polling on it)."""
    def node(rank: int, st: RunState, alive: bool) -> NodeState:
        n = NodeRun(rank, f"h{rank}", "server" if rank == 0 else "headless", f"g-n{rank}", rank == 0)
        rec = RunRecord(id=n.run_id, experiment="e", engine="vllm", host=n.host, argv=[], env={}, port=1, model="m", run_dir="/r", log_path="/r/log", status=st)
        return NodeState(n, RunStatus(record=rec, alive=alive, exit_code=None))

    record = MultiNodeRecord("g", "e", "vllm", "native", [])
    done = node(1, RunState.EXITED, False)
    gone = MultiNodeStatus(record, [node(0, state, False), done], None, None)
    assert gone.ended is state.is_terminal, state
    assert not MultiNodeStatus(record, [node(0, state, True), done], None, None).ended  # alive: never ended
    assert not MultiNodeStatus(record, [NodeState(done.node, None, "unreachable"), done], None, None).ended
