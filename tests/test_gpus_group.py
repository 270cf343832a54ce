"""A worker its engine starts with a fresh environment: no servelab marker, but in the run's process
group. It is the run's alike in ``servelab gpus``, on the run screen's GPU rows and in the run's
recorded peak (issue #36), on nvidia-smi answers recorded on a real H200 and replayed by
FakeNvidiaSmi (this machine has no GPU); the worker is a real process of a real StubEngine run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.engines.gpus.sample import sample_host
from servelab.engines.gpus.inventory import Holder
from servelab.engines.gpus.watch import RunGpus
from tests.conftest import REPO
from tests.fixtures.gpus import replayed_h200
from tests.fixtures.runlab import Lab, wait_for


def _worker(log: Path) -> int:
    m = re.search(r"STUB children (\[[^\]]*\])", log.read_text(errors="replace")) if log.exists() else None
    return int(json.loads(m.group(1))[0]) if m and json.loads(m.group(1)) else 0


async def test_an_unmarked_worker_in_the_runs_group_is_the_runs_in_gpus_the_run_screen_and_the_peak(
    lab: Lab, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data, apps, pids = replayed_h200(monkeypatch, tmp_path, "0.5")  # the launch finds the GPU free
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        lab.experiment("held", env={"STUB_CHILDREN": "1", "STUB_UNMARKED": "1"})
        runs = lab.runs()
        rec = await runs.launch("held", skip_preflight=True)
        try:
            log = Path(rec.log_path)
            wait_for(lambda: _worker(log) > 0, timeout=15)
            worker = _worker(log)
            # the double is what it stands for: not the engine, no marker, in the engine's group
            assert worker != rec.pid and os.getpgid(worker) == rec.pgid == rec.pid
            assert not any(v.startswith(b"SERVELAB_RUN_ID=") for v in Path(f"/proc/{worker}/environ").read_bytes().split(b"\0"))
            # recorded pid 794 (10,852 MiB on GPU 0) is the worker, 1148 (1,622 MiB) a foreign process
            pids.write_text(f"794:{worker},1148:{foreign.pid}")
            apps.write_text((data / "two-apps.csv").read_text())

            # the supervisor's peak: the worker's memory, not the GPU's, not the foreign process's
            run_json = Path(rec.run_dir) / "run.json"
            wait_for(lambda: json.loads(run_json.read_text()).get("gpu_peak_mib") == {"0": 10852}, timeout=20)

            # servelab gpus: the run, by id and experiment; the other process foreign
            out = subprocess.run(
                [sys.executable, "-m", "servelab.tui.cli", "--dir", str(lab.folder), "gpus", "local", "--json"],
                capture_output=True, text=True, cwd=REPO, env=dict(os.environ), stdin=subprocess.DEVNULL, timeout=120,
            )
            assert out.returncode == 0 and out.stderr == "", out.stderr
            holders = {h["pid"]: h for g in json.loads(out.stdout)["gpus"] for h in g["holders"]}
            assert (holders[worker]["holder"], holders[worker]["run"], holders[worker]["experiment"]) == (Holder.OTHER_RUN.value, rec.id, "held")
            assert (holders[foreign.pid]["holder"], holders[foreign.pid]["run"]) == (Holder.FOREIGN.value, None)
            text = subprocess.run(
                [sys.executable, "-m", "servelab.tui.cli", "--dir", str(lab.folder), "gpus", "local"],
                capture_output=True, text=True, cwd=REPO, env=dict(os.environ), stdin=subprocess.DEVNULL, timeout=120,
            ).stdout
            assert f"pid {worker} " in text and f"run {rec.id}, held)" in text, text

            # the run screen's GPU rows (the object the screen draws): this run's, and its peak
            gpus = RunGpus(rec, others=tuple(await runs.list("local")))
            gpus.feed(await sample_host(runs.host("local")))
            whose = {line.holder for line in gpus.panel().lines if f"pid {worker} " in line.text}
            assert whose == {Holder.THIS_RUN}, gpus.panel()
            assert {line.holder for line in gpus.panel().lines if f"pid {foreign.pid} " in line.text} == {Holder.FOREIGN}
            assert gpus.track.figures.peak_mib == {0: 10852}
        finally:
            await runs.stop(rec.id, grace=1)
    finally:
        foreign.kill()
        foreign.wait()
