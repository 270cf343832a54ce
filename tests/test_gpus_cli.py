"""``servelab gpus HOST``: a StubEngine run launched by servelab (a real process with the run marker)
stands where the recorded torch process was (FakeNvidiaSmi replays the H200's answers, its pid
mapped), beside a foreign process; a CPU host says "no GPU" once. One StubEngine start."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable

import pytest

from servelab.tui.cli import main
from tests.fixtures.gpus import RECORDED_OTHER_PID, RECORDED_PID, fake_smi
from tests.fixtures.runlab import Lab, lab

__all__ = ["fake_smi", "lab"]


async def test_gpus_names_the_servelab_run_and_the_foreign_process(lab: Lab, fake_smi: Callable[..., None], capsys: pytest.CaptureFixture[str]) -> None:
    lab.experiment("holder")
    runs = lab.runs()
    rec = await runs.launch("holder", skip_preflight=True)
    foreign = subprocess.Popen(["sleep", "60"])
    try:
        assert rec.pid
        fake_smi("two-gpus.csv", "two-apps.csv", {RECORDED_PID: rec.pid, RECORDED_OTHER_PID: foreign.pid})
        assert await asyncio.to_thread(main, ["--dir", str(lab.folder), "gpus", "local"]) == 0
        text = capsys.readouterr().out.splitlines()
        assert text[0] == "local: 1 GPU"
        assert text[1].startswith("GPU 0 NVIDIA H200 [█") and "12503/143771 MiB util 0% 130 W 44°C P0" in text[1]
        assert text[2] == f"  pid {rec.pid} python3 10852 MiB (run {rec.id}, holder)"
        assert text[3] == f"  pid {foreign.pid} python3 1636 MiB (foreign)"
        assert await asyncio.to_thread(main, ["--dir", str(lab.folder), "gpus", "local", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        holders = data["gpus"][0]["holders"]
        assert [(h["pid"], h["holder"], h["run_id"], h["experiment"]) for h in holders] == [
            (rec.pid, "other run", rec.id, "holder"),
            (foreign.pid, "foreign", None, None),
        ]
    finally:
        foreign.kill()
        foreign.wait()
        await runs.stop(rec.id, grace=2)


def test_cpu_host_says_no_gpu_once(lab: Lab, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert main(["--dir", str(lab.folder), "gpus", "local"]) == 0
    assert capsys.readouterr().out == "local: no GPU (no nvidia-smi on PATH)\n"
    assert main(["--dir", str(lab.folder), "gpus", "local", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"host": "local", "gpu": False, "reason": "no nvidia-smi on PATH", "gpus": []}


def test_unknown_host_is_one_line(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dir", str(lab.folder), "gpus", "nowhere"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("servelab: ") and err.count("\n") == 1
