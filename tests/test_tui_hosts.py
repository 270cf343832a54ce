"""The dashboard when a host goes down and comes back (a real OpenSSH server of the test's own):
every view of that host says "unreachable since …", keeps the last known state, and recovers."""

from __future__ import annotations

import json
import sys

import pytest

from tests.fixtures.sshd import SshServer
from tests.fixtures.tui import SHARED_LOGS, TuiFolder
from tests.fixtures.tui import pilot_wait as wait_for
from tests.fixtures.tui import shown_text as screen_text
from tui.app import ServelabApp
from tui.screens.run import RunScreen

pytestmark = pytest.mark.ssh
SHARDS = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"


def remote_blackwell(tui_folder: TuiFolder, server: SshServer) -> None:
    """Host ``blackwell`` of the bundled experiments, reached over SSH."""
    hosts = tui_folder.folder / "hosts.toml"
    text = hosts.read_text()
    head = text[: text.index("[hosts.blackwell]")]
    hosts.write_text(
        head + "[hosts.blackwell]\n" f"ssh = {json.dumps(server.alias)}\n" f"python = {json.dumps(sys.executable)}\n"
        f"workdir = {json.dumps(str(tui_folder.workdir.parent / 'work-blackwell'))}\nconnect_timeout = 3.0\n"
    )


async def test_run_screen_says_unreachable_not_alive_and_recovers(tui_folder: TuiFolder, downable_sshd: SshServer) -> None:
    remote_blackwell(tui_folder, downable_sshd)
    run_id = tui_folder.replay("kimi-k25-vllm-eagle3", SHARDS, rate=5, hold_s=120, host="blackwell")
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    try:
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            await app.push_screen(RunScreen(run_id))
            screen = app.screen
            assert isinstance(screen, RunScreen)
            await wait_for(pilot, lambda: "alive" in screen.liveness, timeout=30)
            downable_sshd.go_down()
            await wait_for(pilot, lambda: screen.host_down is not None, timeout=30)
            title = str(screen.query_one("#run-title").render())
            assert "blackwell unreachable since " in title and "state unknown, last seen running at " in title
            assert "alive" not in title and screen.alive is None
            assert "cannot connect" in title  # the whole message, not cut at 120 columns
            downable_sshd.come_back()
            await wait_for(pilot, lambda: "alive" in screen.liveness and screen.host_down is None, timeout=30)
            assert "unreachable" not in screen_text(app)
    finally:
        tui_folder.stop_all()
