"""Cross-node root cause and rendezvous hints, on real two-node logs recorded here
(tests/data/logs/multinode/, two processes of the real engine on this machine, bound to 127.0.0.1):

- ``vllm-cpu-api-server-worker-n{0,1}``: vLLM native TP=2 with the worker started through the
  api_server module: its ``--headless`` is ignored, the worker's engine core dies first
  ("collective_rpc should not be called on follower node"), 45 s later the head's TP0 reports
  gloo's "Connection closed by peer";
- ``sglang-cpu-join-hang-wrong-port-n{0,1}``: SGLang ``--nnodes 2 --tp 2`` with the worker's
  ``--dist-init-addr`` on a port nobody listens on: both stop at "Init parallel begin.".
"""

from __future__ import annotations

from pathlib import Path

from servelab.engines.adapters.base import get_adapter
from servelab.engines.logs.files import analyze_file
from servelab.engines.nodes.hints import join_args, rendezvous_hint, stamp_of
from servelab.engines.nodes.run import NodeRun, NodeState, first_failure
from servelab.engines.runs.records import RunRecord, RunStatus
from servelab.engines.runs.state import RunState

LOGS = Path(__file__).parent / "data" / "logs" / "multinode"


def ended_node(rank: int, host: str, log: Path, engine: str, exit_code: int = 1) -> tuple[NodeState, float | None]:
    rec = RunRecord(f"r-n{rank}", "two", engine, host, [], {}, 0, "", "", str(log), status=RunState.EXITED, exit_code=exit_code)
    st = RunStatus(rec, alive=False, exit_code=exit_code, analysis=analyze_file(log, engine))
    last = next((t for t in (stamp_of(ln, 2026) for ln in reversed(log.read_text().splitlines())) if t is not None), None)
    return NodeState(NodeRun(rank, host, "server" if rank == 0 else "headless", f"r-n{rank}", rank == 0), st), last


def test_the_worker_that_died_first_is_the_root_cause_not_the_heads_gloo_error() -> None:
    head, t0 = ended_node(0, "gpu-a", LOGS / "vllm-cpu-api-server-worker-n0.log", "vllm")
    worker, t1 = ended_node(1, "gpu-b", LOGS / "vllm-cpu-api-server-worker-n1.log", "vllm")
    assert head.status and head.status.analysis and head.status.analysis.root_cause
    assert "Connection closed by peer" in head.status.analysis.root_cause.message  # the head alone blames the wire
    rc = first_failure([head, worker], {"r-n0": t0, "r-n1": t1})
    assert rc is not None and (rc.rank, rc.host) == (1, "gpu-b")
    assert rc.summary == "AssertionError: collective_rpc should not be called on follower node"
    # whichever order the nodes come in
    assert first_failure([worker, head], {"r-n0": t0, "r-n1": t1}) == rc


def test_a_node_killed_with_no_traceback_still_wins_when_it_stopped_first() -> None:
    head, t0 = ended_node(0, "gpu-a", LOGS / "vllm-cpu-api-server-worker-n0.log", "vllm")
    worker, _ = ended_node(1, "gpu-b", LOGS / "sglang-cpu-join-hang-wrong-port-n1.log", "sglang", exit_code=-9)
    assert worker.status and worker.status.analysis and worker.status.analysis.root_cause is None
    rc = first_failure([head, worker], {"r-n0": t0, "r-n1": stamp_of("12-01 14:04:20", 2026)})
    assert rc is not None and rc.rank == 1 and rc.summary == "killed by signal 9 with no error in its log"


def test_a_join_stuck_past_the_expected_time_names_the_node_and_the_settings() -> None:
    grammar = get_adapter("sglang").rendezvous
    logs = {r: (h, (LOGS / f"sglang-cpu-join-hang-wrong-port-n{r}.log").read_text().splitlines()) for r, h in ((0, "gpu-a"), (1, "gpu-b"))}
    begun = stamp_of("[2026-12-01 14:34:00 TP1] Init parallel begin.", 2026)
    assert begun is not None
    assert rendezvous_hint(grammar, logs, now=begun + grammar.expected_s - 1) is None  # still inside the expected time
    hint = rendezvous_hint(grammar, logs, now=begun + grammar.expected_s + 1)
    assert hint is not None and (hint.rank, hint.host) == (1, "gpu-b")  # node 0 began 22 s later: not yet over
    assert "Init parallel begin." in hint.line and "--dist-init-addr" in hint.hint and "stale head" in hint.hint
    assert "node 1 (gpu-b) stuck for 91 s at" in hint.render()


def test_a_join_that_ended_is_no_hang_and_socket_fallback_is_a_hint_at_once() -> None:
    grammar = get_adapter("vllm").rendezvous
    lines = (LOGS / "vllm-cpu-api-server-worker-n1.log").read_text().splitlines()
    assert any("distributed_init_method=" in ln for ln in lines)
    assert rendezvous_hint(grammar, {1: ("gpu-b", lines)}, now=1e12) is None  # "is assigned as DP rank" closed it
    nccl = [*lines[:30], "gpu-b:1234:1234 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0"]
    hint = rendezvous_hint(grammar, {1: ("gpu-b", nccl)}, now=0)
    assert hint is not None and "NCCL_SOCKET_IFNAME" in hint.hint and hint.waited_s is None


def test_nccl_on_tcp_sockets_in_real_lines_is_a_hint_at_once_naming_the_interface() -> None:
    """Real NCCL lines (tests/data/logs/multinode, source on line 1): vLLM's "Using network Socket"
    (vllm#5405, a two-hour start) and NCCL's per-channel "via NET/Socket" between two nodes (nccl#1232)."""
    for name in ("vllm-ray-nccl-using-network-socket-5405.log", "nccl-via-net-socket-two-nodes-1232.log"):
        text = (LOGS / name).read_text()
        assert text.startswith("# source: ") and "(https://github.com/" in text.splitlines()[0]
        lines = text.splitlines()[1:]
        for engine in ("vllm", "sglang"):
            hint = rendezvous_hint(get_adapter(engine).rendezvous, {1: ("gpu-b", lines)}, now=0)
            assert hint is not None and hint.waited_s is None, (name, engine)
            assert hint.line in lines and ("Using network Socket" in hint.line or "via NET/Socket/0" in hint.line)
            assert "NCCL_SOCKET_IFNAME" in hint.hint and "NCCL_IB_HCA" in hint.hint
            assert hint.render().startswith("node 1 (gpu-b) stuck at ")
    healthy = ["gpu-b:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA", "gpu-b:1:1 [0] NCCL INFO Using network IB"]
    assert rendezvous_hint(get_adapter("vllm").rendezvous, {1: ("gpu-b", healthy)}, now=0) is None


def test_a_stuck_worker_is_told_where_it_dials_against_the_head_and_wins_over_the_waiting_head() -> None:
    grammar = get_adapter("sglang").rendezvous
    logs = {r: (h, (LOGS / f"sglang-cpu-join-hang-wrong-port-n{r}.log").read_text().splitlines()) for r, h in ((0, "gpu-a"), (1, "gpu-b"))}
    late = stamp_of("[2026-12-01 14:36:00] both stuck for minutes", 2026)
    assert late is not None
    head = ["python", "-m", "sglang.launch_server", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:29629"]
    stale = [*head[:-3], "1", "--dist-init-addr", "127.0.0.1:29999"]
    hint = rendezvous_hint(grammar, logs, now=late, argvs={0: head, 1: stale})
    assert hint is not None and hint.rank == 1  # the head waits too, but its wait is the worker's absence
    assert "node 1 was given --dist-init-addr 127.0.0.1:29999 but the head (node 0) --dist-init-addr 127.0.0.1:29629: they differ" in hint.render()
    same = rendezvous_hint(grammar, logs, now=late, argvs={0: head, 1: [*head[:-3], "1", "--dist-init-addr", "127.0.0.1:29629"]})
    assert same is not None and "as the head was (the head's address in hosts.toml, [multinode] port)" in same.render()
    alone = rendezvous_hint(grammar, {0: logs[0]}, now=late, argvs={0: head})
    assert alone is not None and alone.rank == 0 and alone.render().endswith("; node 0 was given --dist-init-addr 127.0.0.1:29629")
    vllm = get_adapter("vllm").rendezvous
    assert join_args(vllm, ["x", "--master-addr", "10.0.0.11", "--master-port", "29501", "--headless"]) == "--master-addr 10.0.0.11 --master-port 29501"
