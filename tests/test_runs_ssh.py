"""The run lifecycle over the real SSH server, with faults: cut connections, killed followers."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from servelab.engines.hosts.ssh import SshHost
from servelab.engines.runs.manager import Runs
from tests.conftest import REPO
from tests.fixtures.runlab import STUB_PATH, Lab, group_members, is_running, wait_for
from tests.fixtures.sshd import SshServer

pytestmark = pytest.mark.ssh


def _lines(data: bytes) -> list[str]:
    return [line for line in data.decode().splitlines() if line.startswith("line ")]


def _check_exact(data: bytes, total: int) -> tuple[int, int]:
    """(lost, repeated) numbered lines compared with 0..total-1; the order must also be exact."""
    got = _lines(data)
    numbers = [int(line.split()[1]) for line in got]
    lost = len(set(range(total)) - set(numbers))
    repeated = len(numbers) - len(set(numbers))
    assert numbers == sorted(numbers)
    return lost, repeated


async def test_follow_survives_cut_connections_with_no_line_lost_or_repeated(ssh_config: SshServer, lab: Lab) -> None:
    total = 2500
    lab.experiment("steady", host="box", env={"STUB_LINES": str(total), "STUB_INTERVAL": "0.002"})
    runs = lab.runs()
    rec = await runs.launch("steady", skip_preflight=True)
    assert rec.pid is not None and Path(rec.run_dir).parent == lab.remote_workdir / "runs"
    host = runs.host("box")
    assert isinstance(host, SshHost)
    data = b""
    cuts = 0
    alive_after_cut = []
    t0 = time.monotonic()
    next_cut = t0 + 0.5
    async for _, chunk in runs.follow(rec.id):
        data += chunk
        if cuts < 3 and time.monotonic() > next_cut:
            for pid in ssh_config.session_pids():  # the server side of our connection dies
                os.kill(pid, signal.SIGKILL)
            cuts += 1
            alive_after_cut.append(is_running(rec.pid))
            next_cut = time.monotonic() + 1.0
    took = time.monotonic() - t0
    lost, repeated = _check_exact(data, total)
    print(
        f"\nfollow over SSH: {len(_lines(data))} lines in {took:.1f}s, {cuts} connections cut, "
        f"{host.connects} connections opened, engine alive after each cut: {alive_after_cut}, lost={lost} repeated={repeated}"
    )
    assert cuts == 3 and all(alive_after_cut)
    assert host.connects >= 1 + cuts
    assert (lost, repeated) == (0, 0)
    st = await runs.status(rec.id)
    deadline = time.monotonic() + 15
    while st.exit_code is None and time.monotonic() < deadline:  # the supervisor records the exit a moment after the log ends
        await asyncio.sleep(0.2)
        st = await runs.status(rec.id)
    assert (st.alive, st.exit_code) == (False, 0)


async def test_a_killed_follower_is_replaced_with_no_line_lost_or_repeated(ssh_config: SshServer, lab: Lab, tmp_path: Path) -> None:
    total = 2000
    lab.experiment("reattach", host="box", env={"STUB_LINES": str(total), "STUB_INTERVAL": "0.002"})
    rec = await lab.runs().launch("reattach", skip_preflight=True)
    out = tmp_path / "followed.log"
    env = {**os.environ, "SERVELAB_SSH_CONFIG": str(ssh_config.ssh_config), "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "tests.fixtures.follower", str(lab.folder), rec.id, str(out)]
    kills = 0
    sizes = []
    for _ in range(2):
        follower = subprocess.Popen(argv, env=env, cwd=REPO)
        wait_for(lambda: out.exists() and out.stat().st_size > (sizes[-1] if sizes else 0) + 1000, 20)
        follower.send_signal(signal.SIGKILL)
        follower.wait()
        kills += 1
        sizes.append(out.stat().st_size)
    last = subprocess.run(argv, env=env, cwd=REPO, timeout=60)
    assert last.returncode == 0
    lost, repeated = _check_exact(out.read_bytes(), total)
    print(f"\nreattach: {kills} followers SIGKILLed at {sizes} bytes, a new one finished: lost={lost} repeated={repeated}")
    assert (lost, repeated) == (0, 0)
    assert out.read_bytes() == (lab.remote_workdir / "runs" / rec.id / "engine.log").read_bytes()


async def test_injection_over_ssh_reaches_the_engine_literally(ssh_config: SshServer, lab: Lab, tmp_path: Path) -> None:
    trap = tmp_path / "trap"
    trap.mkdir()
    values = {
        "subst": f"$(touch {trap}/a)",
        "ticks": f"`touch {trap}/b`",
        "semi": f"x; touch {trap}/c",
        "quotes": "it's \"q\" '$HOME'",
        "newline": f"a\ntouch {trap}/d\n",
    }
    lab.experiment("inject", host="box", env={"STUB_LINES": "1", "SL_X": values["subst"]}, engine_args=values)
    runs = lab.runs()
    rec = await runs.launch("inject", skip_preflight=True)
    data = b""
    async for _, chunk in runs.follow(rec.id):
        data += chunk
    import json

    argv = json.loads(data.split(b"\n", 1)[0][len(b"STUB argv ") :])
    for key, value in values.items():
        assert argv[argv.index(f"--{key}") + 1] == value
    assert list(trap.iterdir()) == []


async def test_stop_base_url_and_a_second_dashboard_over_ssh(ssh_config: SshServer, lab: Lab) -> None:
    lab.experiment("served", host="box", env={"STUB_HTTP": "1", "STUB_CHILDREN": "2"})
    runs = lab.runs()
    rec = await runs.launch("served", skip_preflight=True)
    assert rec.pid is not None
    wait_for(lambda: b"STUB serving" in Path(rec.log_path).read_bytes())
    url = await runs.base_url(rec.id)
    assert url != f"http://127.0.0.1:{rec.port}"  # reached through the SSH tunnel
    async with httpx.AsyncClient() as client:
        body = (await client.get(url + "/")).json()
    assert body["pid"] == rec.pid

    other = Runs(lab.runs().catalog)  # another dashboard sees the same run and does not disturb it
    assert [r.id for r in await other.list("box")] == [rec.id]
    assert (await other.status(rec.id)).alive
    members = group_members(rec.pid)
    assert len(members) == 3
    st = await other.stop(rec.id, grace=2)
    assert not st.alive and st.status == "stopped"
    assert not any(is_running(p) for p in members)
