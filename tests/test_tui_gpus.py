"""The run screen's GPU rows on the H200's recorded nvidia-smi answers (FakeNvidiaSmi), for a real
run (a replayed log, alive until stopped) whose pid stands where the recorded torch process was,
beside a foreign process; stopping it, the GPUs come back to their pre-launch memory on screen."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

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


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


async def test_one_long_lived_sampler_serves_the_run_screen_and_leaving_the_screen_ends_it(
    tui_folder: TuiFolder, fake_smi: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run screen reads its samples from one nvidia-smi loop (``-lms``), not one nvidia-smi per
    sample, and closing the screen ends that loop and the sampler that started it."""
    run_id = tui_folder.replay("tiny-cpu-vllm-baseline", LOG, hold_s=120, exit_code=0)
    calls = tmp_path / "smi-calls"
    fake_smi("held-gpus.csv", "held-apps.csv")
    monkeypatch.setenv("FAKE_SMI_CALLS", str(calls))
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        screen = await open_run_screen(app, pilot, run_id)
        await pilot_wait(pilot, lambda: screen.gpus is not None and screen.gpus.fed >= 5, timeout=30)
        lines = [ln.split() for ln in calls.read_text().splitlines()]
        loops = [ln for ln in lines if "-lms" in ln]
        assert len(loops) == 1, lines  # one long-lived nvidia-smi for every sample
        assert len([ln for ln in lines if any(a.startswith("--query-gpu") for a in ln)]) == 2  # the loop + the sampler's first count
        assert len(lines) < 5  # memory unchanged: the process list is asked for on the first sample only (then every 10th)
        loop_pid, sampler_pid = int(loops[0][0]), int(loops[0][1])
        assert _alive(loop_pid) and _alive(sampler_pid)
        app.pop_screen()
        await pilot_wait(pilot, lambda: not _alive(loop_pid) and not _alive(sampler_pid), timeout=10)

