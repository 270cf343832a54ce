"""A run whose host cannot be reached: its host is named, its state is unknown, its last known state is
given, and only that host is asked (a real OpenSSH server taken down and brought back)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from servelab.engines.runs.records import RunUnreachable
from tests.conftest import REPO
from tests.fixtures.runlab import Lab, is_running
from tests.fixtures.sshd import SshServer

pytestmark = pytest.mark.ssh

LAST_SEEN = re.compile(r"; the run's state is unknown, last seen running at \d\d:\d\d:\d\d$")


def servelab_start(lab: Lab, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "servelab.tui.cli", "--dir", str(lab.folder), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=dict(os.environ), stdin=subprocess.DEVNULL,
    )


def servelab(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servelab.tui.cli", "--dir", str(lab.folder), *args],
        capture_output=True, text=True, cwd=REPO, env=dict(os.environ), stdin=subprocess.DEVNULL, timeout=120,
    )


async def test_status_stop_and_logs_name_the_host_and_the_last_known_state(downable_sshd: SshServer, lab: Lab) -> None:
    # a second remote host that must never be asked about a run this machine saw on box
    with (lab.folder / "hosts.toml").open("a") as f:
        f.write('\n[hosts.other]\nssh = "no-such-host.invalid"\nworkdir = "/tmp/x"\nconnect_timeout = 2.0\n')
    lab.experiment("held", host="box", env={"STUB_LINES": "100000", "STUB_INTERVAL": "0.05"})
    runs = lab.runs()
    rec = await runs.launch("held", skip_preflight=True)
    assert rec.pid is not None
    assert [r.id for r in await runs.list("box")] == [rec.id]  # seen running from this machine

    downable_sshd.go_down()
    try:
        t0 = time.monotonic()
        commands = (["status", rec.id], ["stop", rec.id], ["logs", rec.id])
        procs = [servelab_start(lab, *command) for command in commands]  # all at once: the suite stays fast
        for command, proc in zip(commands, procs, strict=True):
            _, err = proc.communicate(timeout=120)
            print(f"\n{command[0]} with box down: done {time.monotonic() - t0:.1f} s after start (load {os.getloadavg()[0]:.2f}): {err.strip()}")
            assert proc.returncode == 1
            line = err.strip()
            assert line.count("\n") == 0 and "no run" not in line
            assert line.startswith("servelab: box unreachable: cannot connect: ")
            assert LAST_SEEN.search(line), line
        seen = json.loads((downable_sshd.folder.parent / "servelab-state" / "seen.json").read_text())
        other = [h for k, h in seen["hosts"].items() if k.startswith("other|")]
        assert other == [] or other[0]["down_since"] is None  # stop asked box only, never every host in turn
        assert is_running(rec.pid)  # nothing happened to the run

        with pytest.raises(RunUnreachable) as info:  # the same for the library (the dashboard's stop)
            await runs.stop(rec.id)
        assert info.value.host == "box" and info.value.last is not None and info.value.last.status == "running"
    finally:
        downable_sshd.come_back()
    st = await runs.status(rec.id)  # the host is back: a real answer again
    assert st.alive and st.status == "running"
    stopped = await runs.stop(rec.id, grace=2)
    assert stopped.status == "stopped" and not is_running(rec.pid)


async def test_a_run_never_seen_here_is_still_placed_on_its_experiments_host(downable_sshd: SshServer, lab: Lab) -> None:
    lab.experiment("elsewhere", host="box")
    downable_sshd.go_down()
    try:
        out = servelab(lab, "status", "elsewhere-20261201-070000-abcd")
    finally:
        downable_sshd.come_back()
    assert out.returncode == 1
    assert out.stderr.startswith("servelab: box unreachable: cannot connect: ")
    assert out.stderr.strip().endswith("; the run's state is unknown, not seen from this machine before")
