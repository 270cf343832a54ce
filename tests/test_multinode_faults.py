"""Faults of a multi-node run on the real engine, on two hosts of this machine (``local`` and the real
sshd as ``box``): the worker dials a stale head address, hangs in SGLang's own rendezvous, and
servelab names the setting within ``[multinode] rendezvous_s`` while the engine still hangs.

On loopback every 127.0.0.0/8 address reaches the head's TCPStore (it listens on ``*:PORT``), so the
wrong address is a port nobody listens on: ``[multinode] head_address = "127.0.0.1:<stale port>"``,
what a head behind a port mapping that changed looks like. No traffic leaves 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from engines.catalog import load_catalog
from engines.hosts.registry import close_all
from engines.nodes_hints import local_now, stamp_of
from engines.nodes_run import MultiNodeRecord, MultiNodeRuns, MultiNodeStatus
from engines.runs import Runs
from engines.runstate import RunState
from tests.conftest import need_sglang
from tests.fixtures.engine import free_port
from tests.fixtures.multinode_lab import SGLANG_2N, NodesLab, write_folder
from tests.fixtures.procs import members
from tests.fixtures.sshd import SshServer
from tui.cli import main

pytestmark = [pytest.mark.engine, pytest.mark.ssh]

#: Short, so the test is cheap: a healthy join of the tiny model on this box takes a few seconds.
RENDEZVOUS_S = 15.0
#: Status is asked once a second and takes a second or two over SSH on a loaded machine.
POLL_SLACK_S = 8.0


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, nodes_sshd: SshServer) -> NodesLab:
    return write_folder(tmp_path_factory.mktemp("faults"), nodes_sshd)


def left_on_machine(lab: NodesLab, rec: MultiNodeRecord) -> dict[int, str]:
    """Live processes of the run's sessions (runctl starts each node process in its own session)."""
    out: dict[int, str] = {}
    for n in rec.nodes:
        data = json.loads((lab.run_dir(n.host, n.run_id) / "run.json").read_text())
        if data.get("pgid"):
            out.update(members(session=int(data["pgid"])))
    return out


def stale_head(lab: NodesLab, stale_port: int) -> str:
    """SGLang's two-node definition whose workers dial the head at a port nobody listens on."""
    name = f"{SGLANG_2N}-stale-head"
    text = (lab.folder / f"{SGLANG_2N}.toml").read_text()
    assert "rendezvous_s = 60\n" in text
    text = text.replace("rendezvous_s = 60\n", f'rendezvous_s = {RENDEZVOUS_S}\nhead_address = "127.0.0.1:{stale_port}"\n')
    (lab.folder / f"{name}.toml").write_text(text)
    return name


def test_a_stale_head_address_hangs_the_join_and_the_hint_names_it_within_rendezvous_s(lab: NodesLab, capsys: pytest.CaptureFixture[str]) -> None:
    need_sglang()
    stale_port = free_port()
    name = stale_head(lab, stale_port)
    seen: dict[str, float] = {}

    async def go() -> tuple[MultiNodeRecord, MultiNodeStatus]:
        m = MultiNodeRuns(Runs(load_catalog(lab.folder)))
        t0 = time.monotonic()
        rec = await m.launch(name, skip_preflight=True)
        try:
            worker = next(n for n in rec.nodes if n.rank == 1)
            log = lab.run_dir(worker.host, worker.run_id) / "engine.log"
            deadline = time.monotonic() + 300
            while True:
                st = await m.status(rec)
                if st.hint is not None:
                    seen["hint_at"] = local_now()
                    break
                assert st.root_cause is None and not st.ended, (st.root_cause, [n.status and n.status.exit_code for n in st.nodes])
                assert time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
                await asyncio.sleep(1.0)
            seen["launch_to_hint_s"] = time.monotonic() - t0
            begun = next(ln for ln in log.read_text(errors="replace").splitlines() if "Init parallel begin." in ln)
            at = stamp_of(begun, time.localtime().tm_year)
            assert at is not None
            seen["begun_at"] = at
            # the engine still hangs on both nodes: the hint came while it waits, not after it gave up
            again = await m.status(rec)
            assert all(n.status is not None and n.status.alive for n in again.nodes)
            assert not again.ready and again.root_cause is None
            capsys.readouterr()
            # the CLI reads the same group (its own event loop, so in a thread)
            assert await asyncio.to_thread(main, ["--dir", str(lab.folder), "nodes", rec.id]) == 0
            return rec, st
        finally:
            t1 = time.monotonic()
            report = await m.stop(rec, grace=10)
            seen["stop_s"] = time.monotonic() - t1
            assert report.problems == [], report.problems
            assert {s.record.status for s in report.stopped} == {RunState.STOPPED}
            await close_all()

    rec, st = asyncio.run(go())
    out = capsys.readouterr().out
    hint = st.hint
    assert hint is not None and (hint.rank, hint.host) == (1, "box"), hint
    assert "Init parallel begin." in hint.line and hint.waited_s is not None
    # within the expected time: not before rendezvous_s, and no later than one poll after it
    assert RENDEZVOUS_S <= seen["hint_at"] - seen["begun_at"] <= RENDEZVOUS_S + POLL_SLACK_S, seen
    text = hint.render()
    assert "--dist-init-addr (the head's address and port)" in text and "GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME" in text and "stale head" in text
    head_port = load_catalog(lab.folder).get(name).experiment.multinode.port  # type: ignore[union-attr]
    assert f"node 1 was given --dist-init-addr 127.0.0.1:{stale_port} but the head (node 0) --dist-init-addr 127.0.0.1:{head_port}: they differ ([multinode] head_address" in text, text
    assert f"hint        node 1 (box) stuck for " in out and f"127.0.0.1:{stale_port}" in out, out
    assert left_on_machine(lab, rec) == {}
    print(
        f"\nstale head: hint {seen['hint_at'] - seen['begun_at']:.0f} s after the worker's 'Init parallel begin.' (rendezvous_s {RENDEZVOUS_S:.0f}),"
        f" {seen['launch_to_hint_s']:.0f} s after launch; stop across nodes {seen['stop_s']:.1f} s (load {os.getloadavg()[0]:.1f})"
    )
