"""The run screen over a real SSH connection (OpenSSH on 127.0.0.1): it follows a run on the
"remote" host, and when the connection drops it shows so and carries on by itself."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest

from tests.fixtures.sshd import SshServer
from tests.fixtures.tui import SHARED_LOGS, TuiFolder
from tests.fixtures.tui import screen_text
from tests.fixtures.tui import open_run_screen, wait_for
from servelab.tui.app import ServelabApp

pytestmark = pytest.mark.ssh
SHARDS = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"


async def test_run_over_ssh_survives_a_dropped_connection(tui_folder: TuiFolder, ssh_config: SshServer) -> None:
    hosts = tui_folder.folder / "hosts.toml"
    text = hosts.read_text()
    head = text[: text.index("[hosts.blackwell]")]
    remote_workdir = tui_folder.workdir.parent / "work-blackwell"
    hosts.write_text(head + "[hosts.blackwell]\n" f"ssh = {json.dumps(ssh_config.alias)}\n"
                     f"python = {json.dumps(sys.executable)}\n" f"workdir = {json.dumps(str(remote_workdir))}\n")
    log_lines = SHARDS.read_bytes().count(b"\n")
    run_id = tui_folder.replay("kimi-k25-vllm-eagle3", SHARDS, rate=20, hold_s=3, host="blackwell")
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = await open_run_screen(app, pilot, run_id)
        await wait_for(pilot, lambda: screen.index.line_count > 20 and "alive" in screen.liveness)
        seen = screen.index.line_count
        for pid in ssh_config.session_pids():  # the connection drops (server side)
            os.kill(pid, signal.SIGKILL)
        # ...and the log keeps arriving on a new connection, to the end, without a key pressed.
        await wait_for(pilot, lambda: screen.index.line_count == log_lines, timeout=120)
        assert screen.index.line_count > seen
        await wait_for(pilot, lambda: "exit code 0" in screen.liveness, timeout=60)
        assert "on blackwell" in screen_text(app)
