"""Ctrl-C during preflight stops what servelab started on the host, on this machine and over SSH
(a real OpenSSH server): the host-side check does not run on after the user gave up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.fixtures.runlab import is_running, wait_for
from tests.fixtures.sshd import SshServer


def slow_python(tmp_path: Path) -> tuple[Path, Path]:
    """An engine "python" that hangs like a long host-side check, and writes where it runs."""
    pidfile = tmp_path / "check.pid"
    script = tmp_path / "slow-python"
    script.write_text(f'#!/bin/sh\necho $$ > {pidfile}\nexec sleep 120\n')
    script.chmod(0o755)
    return script, pidfile


def folder_for(tmp_path: Path, host_table: str) -> Path:
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / "hosts.toml").write_text(host_table)
    (folder / "exp.toml").write_text(f'engine = "vllm"\nhost = "h"\nmodel = "{tmp_path / "model"}"\nport = 8000\n')
    return folder


def interrupt_preflight(folder: Path, pidfile: Path) -> tuple[int, str, float]:
    """Start `servelab preflight`, press Ctrl-C once the host-side check runs; (exit code, stderr, seconds it lived on)."""
    cli = subprocess.Popen(
        [sys.executable, "-m", "servelab.tui.cli", "--dir", str(folder), "preflight", "exp"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,  # like a terminal's Ctrl-C: to servelab only
    )
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip().isdigit(), 30)
        pid = int(pidfile.read_text())
        assert is_running(pid)
        cli.send_signal(signal.SIGINT)
        _, err = cli.communicate(timeout=30)
        t0 = time.monotonic()
        gone = True
        try:
            wait_for(lambda: not is_running(pid), 10)
        except AssertionError:
            gone = False
            os.kill(pid, signal.SIGKILL)
        assert gone, "the host-side check is still running after Ctrl-C"
        return cli.returncode, err, time.monotonic() - t0
    finally:
        if cli.poll() is None:
            cli.kill()


def test_ctrl_c_stops_the_check_on_this_machine(tmp_path: Path) -> None:
    python, pidfile = slow_python(tmp_path)
    folder = folder_for(tmp_path, f'[hosts.h]\npython = {json.dumps(str(python))}\nworkdir = {json.dumps(str(tmp_path / "w"))}\n')
    code, err, after = interrupt_preflight(folder, pidfile)
    assert code == 130 and err.strip() == "servelab: interrupted"


@pytest.mark.ssh
def test_ctrl_c_stops_the_check_over_ssh(ssh_config: SshServer, tmp_path: Path) -> None:
    python, pidfile = slow_python(tmp_path)
    folder = folder_for(
        tmp_path, f'[hosts.h]\nssh = "{ssh_config.alias}"\npython = {json.dumps(str(python))}\nworkdir = {json.dumps(str(tmp_path / "w"))}\n'
    )
    code, err, after = interrupt_preflight(folder, pidfile)
    print(f"\nover SSH: the host-side check ended {after:.2f} s after servelab exited (load {os.getloadavg()[0]:.2f})")
    assert code == 130 and err.strip() == "servelab: interrupted"
