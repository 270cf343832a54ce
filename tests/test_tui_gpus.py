"""The run screen's GPU rows on the H200's recorded nvidia-smi answers (FakeNvidiaSmi), for a real
run (a replayed log, alive until stopped) whose pid stands where the recorded torch process was,
beside a foreign process; stopping it, the GPUs come back to their pre-launch memory on screen."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from servelab.tui.app import ServelabApp
from servelab.tui.widgets.gpu_rows import GpuRows
from tests.fixtures.gpus import RECORDED, RECORDED_OTHER_PID, RECORDED_PID, fake_smi
from tests.fixtures.tui import RECORDED_LOGS, TuiFolder, open_run_screen, pilot_wait, shown_text, tui_folder

__all__ = ["fake_smi", "tui_folder"]
LOG = RECORDED_LOGS / "vllm-cpu-kv-cache-too-small.log"


async def test_gpu_rows_mark_this_run_and_foreign_then_the_gpus_come_back(
    tui_folder: TuiFolder, fake_smi: Callable[..., None], tmp_path: Path
) -> None:
    run_id = tui_folder.replay("tiny-cpu-vllm-baseline", LOG, hold_s=120, exit_code=0)
    rec = json.loads((tui_folder.workdir / "runs" / run_id / "run.json").read_text())
    foreign = subprocess.Popen(["sleep", "120"])
    gpus, apps = tmp_path / "gpus.csv", tmp_path / "apps.csv"
    gpus.write_text((RECORDED / "two-gpus.csv").read_text())
    apps.write_text((RECORDED / "two-apps.csv").read_text())
    fake_smi(str(gpus), str(apps), {RECORDED_PID: rec["pid"], RECORDED_OTHER_PID: foreign.pid})  # files swapped below
    try:
        app = ServelabApp(tui_folder.folder)
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause()
            screen = await open_run_screen(app, pilot, run_id)
            rows = screen.query_one(GpuRows)
            await pilot_wait(pilot, lambda: "(foreign)" in rows._shown, timeout=30)
            text = rows._shown.splitlines()
            assert text[0].startswith("GPU 0 NVIDIA H200 [") and "12503/143771 MiB util 0% 130 W" in text[0]
            assert text[1] == f"  pid {rec['pid']} python3 10852 MiB (this run)"
            assert text[2] == f"  pid {foreign.pid} python3 1636 MiB (foreign)"
            assert "first allocation" in text[3] and "peak GPU 0 12503 MiB" in text[3]
            assert "(no GPU)" not in shown_text(app)
            screen._stop()
            await pilot_wait(pilot, lambda: screen.alive is False, timeout=30)
            gpus.write_text((RECORDED / "idle-gpus.csv").read_text())  # the run's memory freed, the foreign one gone too
            apps.write_text((RECORDED / "idle-apps.csv").read_text())
            await pilot_wait(pilot, lambda: "pre-launch memory" in rows._shown, timeout=30)
            assert screen.gpus is not None and screen.gpus.outcome is not None and screen.gpus.outcome.returned
            assert foreign.poll() is None  # servelab never signalled the foreign process
    finally:
        foreign.kill()
        foreign.wait()
