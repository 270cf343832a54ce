"""Faults of a multi-node run on the real engine, on two hosts of this machine (``local`` and the real
sshd as ``box``): the worker dials a stale head address, hangs in SGLang's own rendezvous, and
servelab names the setting within ``[multinode] rendezvous_s`` while the engine still hangs.

On loopback every 127.0.0.0/8 address reaches the head's TCPStore (it listens on ``*:PORT``), so the
wrong address is a port nobody listens on: ``[multinode] head_address = "127.0.0.1:<stale port>"``,
what a head behind a port mapping that changed looks like. No traffic leaves 127.0.0.1.

The patch set per node: each host's ``python`` runs SGLang with its own package root first on the
path (a mirror of the installed ``sglang`` of real folders and symlinked files; the patch tool
replaces a file by rename, so the install is never written), so each node's preflight checks and
applies the experiment's patch in its own root and each node's run records it. A node whose copy no
longer takes the patch stops the launch before any node starts or is patched.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
import time
from pathlib import Path

import pytest

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.hosts.registry import close_all
from servelab.engines.nodes.hints import local_now, stamp_of
from servelab.engines.nodes.run import MultiNodeRecord, MultiNodeStatus
from servelab.engines.runs.state import RunState
from tests.conftest import SGLANG_PYTHON, need_sglang
from tests.fixtures.ports import free_port
from tests.fixtures.multinode_lab import SGLANG_2N, NodesLab, left_on_machine, mn, refusal, write_folder
from tests.fixtures.patching import udiff
from tests.fixtures.sshd import SshServer
from servelab.tui.cli import main

pytestmark = [pytest.mark.engine, pytest.mark.ssh]

#: Short, so the test is cheap: a healthy join of the tiny model on this box takes a few seconds.
RENDEZVOUS_S = 15.0
#: Status is asked once a second and takes a second or two over SSH on a loaded machine.
POLL_SLACK_S = 8.0


#: The file the experiment's patch touches: small, and imported by the patch check in a second.
PATCHED = "sglang/version.py"
MARK = b"# servelab multi-node patch record test\n"


def sglang_site() -> Path:
    return next((SGLANG_PYTHON.parent.parent / "lib").glob("python3*/site-packages")).resolve()


def mirror(dest: Path) -> Path:
    """A package root holding ``sglang`` as real folders of symlinks to the installed files."""
    src = sglang_site() / "sglang"
    for folder, _dirs, files in os.walk(src):
        rel = Path(folder).relative_to(src.parent)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            os.symlink(Path(folder) / name, dest / rel / name)
    return dest


def python_with_root(path: Path, root: Path) -> Path:
    """The host's interpreter: SGLang's, with this node's package root first on the path."""
    path.write_text(f'#!/bin/sh\nPYTHONPATH={root}${{PYTHONPATH:+:$PYTHONPATH}} exec {SGLANG_PYTHON} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, nodes_sshd: SshServer) -> NodesLab:
    """The two-node lab with a package root per node and the experiment's patch in the folder."""
    need_sglang()
    root = tmp_path_factory.mktemp("faults")
    lab = write_folder(root, nodes_sshd)
    hosts = (lab.folder / "hosts.toml").read_text()
    for node in ("local", "box"):
        wrapper = python_with_root(root / f"{node}-python", mirror(root / f"{node}-root"))
        hosts = hosts.replace(f"python = {json.dumps(str(SGLANG_PYTHON))}", f"python = {json.dumps(str(wrapper))}", 1)
    (lab.folder / "hosts.toml").write_text(hosts)
    original = (sglang_site() / PATCHED).read_bytes()
    (lab.folder / "patches").mkdir()
    (lab.folder / "patches" / "mark.diff").write_bytes(udiff(PATCHED, original, MARK + original))
    return lab


def root_of(lab: NodesLab, node: str) -> Path:
    return lab.folder.parent / f"{node}-root"


def stale_head(lab: NodesLab, stale_port: int) -> str:
    """SGLang's two-node definition whose workers dial the head at a port nobody listens on."""
    name = f"{SGLANG_2N}-stale-head"
    text = (lab.folder / f"{SGLANG_2N}.toml").read_text()
    assert "rendezvous_s = 60\n" in text
    text = text.replace("rendezvous_s = 60\n", f'rendezvous_s = {RENDEZVOUS_S}\nhead_address = "127.0.0.1:{stale_port}"\n')
    (lab.folder / f"{name}.toml").write_text(text + '[[patches]]\nfile = "patches/mark.diff"\n')
    return name


def test_a_node_whose_copy_does_not_take_the_patch_stops_the_launch_and_no_node_is_patched(lab: NodesLab) -> None:
    """box's ``sglang/version.py`` was edited by hand: its patch conflicts, so the launch names node 1 and
    starts nothing, and local's package, whose check passed, is left unpatched too."""
    name = stale_head(lab, free_port())
    box_file, local_file = root_of(lab, "box") / PATCHED, root_of(lab, "local") / PATCHED
    edited = (sglang_site() / PATCHED).read_bytes().replace(b"try:\n", b"try:  # edited by hand\n", 1)
    box_file.unlink()
    box_file.write_bytes(edited)

    try:
        msg = refusal(mn(lab).launch(name))
    finally:
        box_file.unlink()
        os.symlink(sglang_site() / PATCHED, box_file)
    assert msg.startswith(f"{name}: node 1 (box) failed preflight, nothing started: "), msg
    assert "patch set" in msg and PATCHED in msg and "\n" not in msg, msg
    assert local_file.is_symlink()  # local's check passed; nothing was applied there
    for host in ("local", "box"):
        assert not any((lab.workdir(host) / "runs").glob(f"{name}*"))


def test_a_stale_head_address_hangs_the_join_and_the_hint_names_it_within_rendezvous_s(lab: NodesLab, capsys: pytest.CaptureFixture[str]) -> None:
    need_sglang()
    stale_port = free_port()
    name = stale_head(lab, stale_port)
    seen: dict[str, float] = {}
    printed: dict[str, str] = {}

    async def go() -> tuple[MultiNodeRecord, MultiNodeStatus]:
        m = mn(lab)
        t0 = time.monotonic()
        installed = hashlib.sha256((sglang_site() / PATCHED).read_bytes()).hexdigest()
        rec = await m.launch(name)  # preflight on both nodes applies the patch in each node's own root
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
            assert await asyncio.to_thread(main, ["--dir", str(lab.folder), "nodes", rec.id, "--json"]) == 0
            printed["nodes"] = capsys.readouterr().out
            # status and logs take the group id too: each node's status, and the head's log, said on stderr
            assert await asyncio.to_thread(main, ["--dir", str(lab.folder), "status", rec.id]) == 0
            both = capsys.readouterr()
            assert f"{rec.id} is a multi-node run" in both.err and both.out.splitlines()[0].startswith(f"{rec.id}  sglang")
            assert all(n.run_id in both.out for n in rec.nodes), both.out
            assert await asyncio.to_thread(main, ["--dir", str(lab.folder), "logs", rec.id]) == 0
            both = capsys.readouterr()
            assert f"its head's log is {rec.head.run_id}'s" in both.err
            assert both.out == (lab.run_dir(rec.head.host, rec.head.run_id) / "engine.log").read_text(errors="replace")[: len(both.out)] and both.out
            assert hashlib.sha256((sglang_site() / PATCHED).read_bytes()).hexdigest() == installed  # the install is never written
            return rec, st
        finally:
            t1 = time.monotonic()
            report = await m.stop(rec, grace=10)
            seen["stop_s"] = time.monotonic() - t1
            assert report.problems == [], report.problems
            assert {s.record.status for s in report.stopped} == {RunState.STOPPED}
            await close_all()

    rec, st = asyncio.run(go())
    out = printed["nodes"]
    text_out, _, json_out = out.partition("\n{")
    doc = json.loads("{" + json_out)
    digest = hashlib.sha256((lab.folder / "patches" / "mark.diff").read_bytes()).hexdigest()
    for n, node in zip(doc["nodes"], ("local", "box")):  # each node's own record: its own root, the patch, the file after
        root = root_of(lab, node)
        assert n["host"] == node and n["patches"]["root"] == str(root) and n["patches"]["patches"] == {"mark.diff": digest}, n["patches"]
        assert n["patches"]["files"][PATCHED]["after"] == hashlib.sha256((root / PATCHED).read_bytes()).hexdigest()
        assert (root / PATCHED).read_bytes().startswith(MARK) and not (root / PATCHED).is_symlink()
        assert f"patches under {root}: mark.diff {digest[:12]}" in text_out, text_out
    out = text_out
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
