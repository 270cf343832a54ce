"""The dashboard when a host goes down and comes back (a real OpenSSH server of the test's own):
every view of that host says "unreachable, checked HH:MM" (on that host's rows alone, no toast),
keeps the last known state, and recovers."""

from __future__ import annotations

import json
import sys

import pytest
from textual.widgets import DataTable

from tests.fixtures.runlab import until
from tests.fixtures.sshd import SshServer
from tests.fixtures.tui import SHARED_LOGS, TuiFolder
from tests.fixtures.tui import pilot_wait as wait_for
from tests.fixtures.tui import shown_text as screen_text
from servelab.tui.app import ServelabApp
from servelab.tui.screens.run import RunScreen

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
            assert "blackwell unreachable, checked " in title and "state unknown, last seen running at " in title
            assert "alive" not in title and screen.alive is None
            assert "cannot connect" in title  # the whole message, not cut at 120 columns
            downable_sshd.come_back()
            await wait_for(pilot, lambda: "alive" in screen.liveness and screen.host_down is None, timeout=30)
            assert "unreachable" not in screen_text(app)
    finally:
        tui_folder.stop_all()


async def test_runs_and_experiments_keep_a_down_hosts_runs_and_see_runs_launched_elsewhere(
    tui_folder: TuiFolder, downable_sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servelab.tui.screens import runs as runs_screen
    from servelab.tui.screens.experiments import ExperimentsScreen
    from servelab.tui.screens.runs import RunsScreen

    monkeypatch.setattr(runs_screen, "REFRESH_SECONDS", 600.0)  # only the folder watch can show a new run
    remote_blackwell(tui_folder, downable_sshd)
    remote = tui_folder.replay("kimi-k25-vllm-eagle3", SHARDS, rate=5, hold_s=120, host="blackwell")
    app = ServelabApp(tui_folder.folder)
    try:
        async with app.run_test(size=(160, 30)) as pilot:
            await pilot.pause()
            experiments = app.screen
            assert isinstance(experiments, ExperimentsScreen)
            await app.push_screen(RunsScreen())
            runs = app.screen
            assert isinstance(runs, RunsScreen)
            await wait_for(pilot, lambda: [r.id for r in runs.records] == [remote], timeout=30)

            # launched elsewhere (not from this dashboard): shown within the poll interval, no key pressed
            local = tui_folder.replay("kimi-k25-vllm-baseline", SHARDS, rate=5, hold_s=120, host="local", port=18998)
            await wait_for(pilot, lambda: local in [r.id for r in runs.records], timeout=8)
            await wait_for(pilot, lambda: "kimi-k25-vllm-baseline" in experiments.latest, timeout=10)

            downable_sshd.go_down()
            await wait_for(pilot, lambda: "blackwell" in runs.down and "blackwell" in experiments.down, timeout=30)
            assert {r.id for r in runs.records} == {remote, local}  # the running remote run did not vanish
            stale = next(k for k in runs.known if k.record.id == remote)
            assert stale.stale and stale.record.status == "running"
            # the model first, then the frame that shows it (a loaded machine can lag a frame behind)
            await wait_for(pilot, lambda: "running?" in screen_text(app) and "blackwell unreachable, checked " in screen_text(app), timeout=10)
            assert "blackwell unreachable, checked " in experiments.sub_title
            assert "kimi-k25-vllm-eagle3" in experiments.latest  # its last known run is kept, greyed
            assert not any("unreachable" in str(n.message) for n in app._notifications)  # no toast: it would land on any screen
            table = runs.query_one(DataTable)
            rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
            assert {r[2] for r in rows} == {"blackwell", "local"}  # the host column keeps its width: the note is not in it

            downable_sshd.come_back()
            await wait_for(pilot, lambda: not runs.down and not experiments.down, timeout=30)
            assert not any(k.stale for k in runs.known)
            assert "unreachable" not in experiments.sub_title
    finally:
        tui_folder.stop_all()


async def test_no_notification_for_a_run_that_was_ready_before_the_dashboard_opened(tui_folder: TuiFolder, monkeypatch: pytest.MonkeyPatch) -> None:
    from servelab.engines.runs import watch

    monkeypatch.setattr(watch, "LIST_SECONDS", 0.3)
    old = tui_folder.replay("tiny-cpu-vllm-ngram", SHARDS, rate=0, hold_s=60)
    log = tui_folder.workdir / "runs" / old / "engine.log"
    await until(lambda: log.exists() and log.stat().st_size == SHARDS.stat().st_size, timeout=20)
    app = ServelabApp(tui_folder.folder)
    try:
        async with app.run_test(size=(120, 30)) as pilot:
            # the watcher has ruled on the old run's ready (history: marked, not said)
            await wait_for(pilot, lambda: app.watcher is not None and app.watcher.has_ruled(old, "ready"), timeout=30)
            assert not any(n.title == "run ready" for n in app._notifications)  # old news
            new = tui_folder.replay("tiny-cpu-vllm-baseline", SHARDS, rate=400, hold_s=60, port=18997, delay_s=1.0)
            await wait_for(pilot, lambda: any(n.title == "run ready" for n in app._notifications), timeout=30)
            ready = [n.message for n in app._notifications if n.title == "run ready"]
            assert len(ready) == 1 and new in ready[0]  # a change this dashboard saw
    finally:
        tui_folder.stop_all()
