"""The run screen of a Slurm run (the real Slurm, the StubEngine): the core's words for the job in
its liveness line: queued with the reason and position while the nodes are drained, then running
on the node Slurm chose, then the end servelab's stop brought."""

from __future__ import annotations

import pytest

from servelab.tui.app import ServelabApp
from servelab.tui.screens.run import RunScreen
from tests.fixtures.slurm import SlurmLab
from tests.fixtures.tui import screen_text, wait_for
from tests.fixtures.runlab import STUB_PATH, toml_value
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.slurm


async def test_run_screen_shows_queue_reason_then_running_then_the_end(slurm_lab: SlurmLab) -> None:
    (slurm_lab.folder / "stub.toml").write_text(
        f'engine = "vllm"\nhost = "cluster"\nmodel = "no-model"\nport = {free_port()}\n[env]\nPYTHONPATH = {toml_value(STUB_PATH)}\nSTUB_INTERVAL = "0.2"\n'
    )
    runs = slurm_lab.runs()
    slurm_lab.cluster.drain("maint")
    rec = await runs.launch("stub", skip_preflight=True)
    app = ServelabApp(slurm_lab.folder)
    app.watch_runs = False
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        await app.push_screen(RunScreen(rec.id))
        screen = app.screen
        assert isinstance(screen, RunScreen)
        await wait_for(pilot, lambda: "queued: drained (position 1)" in screen.liveness, timeout=30)
        await wait_for(pilot, lambda: "queued: drained" in screen_text(app), timeout=10)
        assert f"job {rec.placement.job}" in screen.liveness
        slurm_lab.cluster.resume()
        await wait_for(pilot, lambda: screen.liveness.startswith("running · job") and " on n" in screen.liveness, timeout=30)
        await runs.stop(rec.id)
        await wait_for(pilot, lambda: "cancelled by servelab stop" in screen.liveness, timeout=30)
