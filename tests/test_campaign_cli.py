"""``servelab campaign start|status|stop|resume`` as an operator types them (StubEngine, real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests.conftest import REPO
from tests.fixtures.campaignlab import marked, two_load_campaign
from tests.fixtures.runlab import Lab


def servelab(lab: Lab, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servelab.tui.cli", "--dir", str(lab.folder), *args],
        capture_output=True, text=True, cwd=REPO, env=dict(os.environ), stdin=subprocess.DEVNULL, timeout=timeout,
    )


def test_start_status_stop_resume_from_the_command_line(lab: Lab) -> None:
    two_load_campaign(lab, tokens="0.005")
    out = servelab(lab, "campaign", "start", "sweep", "--skip-preflight", "--json")
    assert out.returncode == 0, out.stderr
    started = json.loads(out.stdout)
    assert started["supervisor_alive"] and started["id"].startswith("sweep-") and len(started["points"]) == 4
    stopped = json.loads(servelab(lab, "campaign", "stop", started["id"], "--json").stdout)
    assert stopped["status"] == "stopped" and not stopped["supervisor_alive"]
    assert marked({ld["run_id"] for ld in stopped["loads"] if ld["run_id"]}) == []
    text = servelab(lab, "campaign", "status", "sweep")
    assert text.returncode == 0 and f"campaign {started['id']} on local: stopped" in text.stdout
    resumed = servelab(lab, "campaign", "resume", "sweep", "--json")
    assert resumed.returncode == 0, resumed.stderr
    t0 = time.monotonic()
    while True:
        st = json.loads(servelab(lab, "campaign", "status", started["id"], "--json").stdout)
        if st["status"] == "done":
            break
        assert time.monotonic() - t0 < 120, st
        time.sleep(0.3)
    assert st["counts"] == {"done": 4}


def test_errors_are_one_line(lab: Lab) -> None:
    for args in (("status", "nope"), ("resume", "nope"), ("start", "nope")):
        out = servelab(lab, "campaign", *args)
        assert out.returncode == 1
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "nope" in out.stderr
