"""The run screen's GPU rows on the H200's recorded nvidia-smi answers (FakeNvidiaSmi), for a real
run (a replayed log, alive until stopped) whose pid stands where the recorded torch process was,
beside a foreign process; stopping it, the GPUs come back to their pre-launch memory on screen."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from servelab.engines.gpus.view import GpuView
from servelab.engines.runs.records import RunRecord
from servelab.tui.app import ServelabApp
from servelab.tui.palette import key_commands
from servelab.tui.screens.confirm import ConfirmScreen
from servelab.tui.screens.gpus import HostGpusScreen
from servelab.tui.screens.runs import RunsScreen
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
            assert "first allocation" in text[3] and "peak GPU 0 10852 MiB" in text[3]  # the run's own, not the foreign 1636 MiB with it
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


async def test_the_host_view_from_the_runs_list_names_the_run_the_foreign_process_and_the_campaign_lock(
    tui_folder: TuiFolder, fake_smi: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``g`` on the runs list opens the highlighted run's host: each GPU with its holders (the servelab
    run by id and experiment, a foreign process) and the campaign holding its GPU lock, from one
    long-lived sampler that ends when the view is left. The key is in the footer and the palette."""
    run_id = tui_folder.replay("tiny-cpu-vllm-baseline", LOG, hold_s=120, exit_code=0)
    rec = json.loads((tui_folder.workdir / "runs" / run_id / "run.json").read_text())
    foreign = subprocess.Popen(["sleep", "120"])
    locks = tui_folder.workdir / "campaigns"
    locks.mkdir()
    (locks / "gpus-holder-all.json").write_text(json.dumps({"campaign": "sweep-7", "pid": 4242, "since": "2026-12-04T06:00:00"}))
    calls = tmp_path / "smi-calls"
    fake_smi("two-gpus.csv", "two-apps.csv", {RECORDED_PID: rec["pid"], RECORDED_OTHER_PID: foreign.pid})
    monkeypatch.setenv("FAKE_SMI_CALLS", str(calls))
    try:
        with open(locks / "gpus-all.lock", "a+") as held:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # a campaign's lock on every GPU, held now
            app = ServelabApp(tui_folder.folder)
            app.watch_runs = False
            async with app.run_test(size=(140, 36)) as pilot:
                await pilot.press("R")
                runs = app.screen
                assert isinstance(runs, RunsScreen)
                await pilot_wait(pilot, lambda: runs.current() is not None and runs.current().id == run_id)  # type: ignore[union-attr]
                assert "GPUs" in shown_text(app)  # the footer
                assert any(text.startswith("GPUs — the host view") and "(g)" in text for text, _, _ in key_commands(runs))
                await pilot.press("g")
                view = app.screen
                assert isinstance(view, HostGpusScreen) and view.host == "local"
                await pilot_wait(pilot, lambda: view.view is not None and "tiny-cpu-vllm-baseline" in shown_text(app), timeout=30)
                text = shown_text(app)
                assert f"pid {rec['pid']} python3 10852 MiB (run {run_id}, tiny-cpu-vllm-baseline)" in text
                assert f"pid {foreign.pid} python3 1636 MiB (foreign)" in text
                assert "GPU lock: campaign sweep-7 (pid 4242, since 2026-12-04T06:00:00, GPUs all)" in text
                assert view.view is not None and view.view.lines() == GpuView.of(view.view.sample, [RunRecord.from_json(rec)]).lines()
                loop = next(ln.split() for ln in calls.read_text().splitlines() if "-lms" in ln)
                await pilot.press("q")
                await pilot_wait(pilot, lambda: app.screen is runs and not _alive(int(loop[0])) and not _alive(int(loop[1])), timeout=10)
    finally:
        foreign.kill()
        foreign.wait()


async def test_after_a_crash_a_leftover_of_the_run_holding_a_gpu_is_named_and_s_ends_it(
    tui_folder: TuiFolder, fake_smi: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run crashed, but a process of its group (its marker) still holds 10 GiB: within N s the
    screen names it as this run's, ``s`` (disabled for an ended run otherwise) ends it, and the
    GPUs are then judged back to their pre-launch memory."""
    monkeypatch.setattr("servelab.engines.gpus.watch.RETURN_WITHIN_S", 3.0)
    run_id = tui_folder.replay("tiny-cpu-vllm-baseline", LOG, hold_s=1, exit_code=1)
    leftover = subprocess.Popen(["sleep", "300"], env={**os.environ, "SERVELAB_RUN_ID": run_id})
    gpus, apps = tmp_path / "gpus.csv", tmp_path / "apps.csv"
    gpus.write_text((RECORDED / "held-gpus.csv").read_text())
    apps.write_text((RECORDED / "held-apps.csv").read_text())
    fake_smi(str(gpus), str(apps), {RECORDED_PID: leftover.pid})
    try:
        app = ServelabApp(tui_folder.folder)
        app.watch_runs = False
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            screen = await open_run_screen(app, pilot, run_id)
            rows = screen.query_one(GpuRows)
            await pilot_wait(pilot, lambda: "still held" in rows._shown, timeout=40)
            assert screen.alive is False and leftover.poll() is None
            assert f"pid {leftover.pid} python3 10852 MiB (this run)" in rows._shown and "(this run's group: s ends it)" in rows._shown
            assert screen.check_action("stop", ()) is True
            await pilot.press("s")
            await pilot_wait(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            await pilot_wait(pilot, lambda: leftover.poll() is not None, timeout=30)
            gpus.write_text((RECORDED / "idle-gpus.csv").read_text())
            apps.write_text((RECORDED / "idle-apps.csv").read_text())
            await pilot_wait(pilot, lambda: "pre-launch memory" in rows._shown, timeout=30)
            assert screen.check_action("stop", ()) is None  # nothing of the run is left
    finally:
        leftover.kill()
        leftover.wait()
