"""A campaign started from the dashboard outlives the dashboard: tmux as the real terminal.

The operator starts a campaign from the campaigns screen, the dashboard process is SIGKILLed
mid-campaign (a closed laptop lid, a killed terminal), the queue goes on on the host (its
``state.json`` advances), and a new dashboard reattaches: it shows the point running now, then
the finished table. The engine is the StubEngine (real processes and HTTP), the queue the real
supervisor, the terminal a real tmux.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.campaign import control
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.errors import ServelabError
from tests.fixtures.campaignlab import two_load_campaign
from tests.fixtures.runlab import Lab
from tests.fixtures.tmux import SERVELAB, Tmux

pytestmark = pytest.mark.tmux


def _state(lab: Lab, camp_id: str) -> dict[str, Any]:
    data = json.loads((lab.workdir / "campaigns" / camp_id / "state.json").read_text())
    assert isinstance(data, dict)
    return data


def _done(state: dict[str, Any]) -> int:
    return sum(1 for p in state["points"].values() if p["status"] == "done")


def _dashboard(tmux: Tmux, lab: Lab, tmp_path: Path, name: str) -> Tmux:
    """``servelab --dir LAB`` in a new 140x40 tmux session (an argv: no shell), on the experiments screen."""
    env = {
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "SERVELAB_KEYMAP": str(tmp_path / "config" / "keymap.toml"),
        "SERVELAB_STATE_DIR": str(tmp_path / "state"),
        "TERM": "xterm-256color",
        "TEXTUAL_ANIMATIONS": "none",
        # the pane inherits COLUMNS=80/LINES=24 from the test run's environment, and Textual reads them first
        "COLUMNS": "140",
        "LINES": "40",
    }
    env_args = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
    session = Tmux(tmux.socket, name)
    session.cmd("new-session", "-d", "-s", name, "-x", "140", "-y", "40", *env_args, str(SERVELAB), "--dir", str(lab.folder))
    session.wait_for("stub-base", "stub-ngram")
    return session


def _started_id(lab: Lab) -> str:
    ids = sorted(p for p in (lab.workdir / "campaigns").glob("sweep-*") if p.is_dir())
    assert len(ids) == 1, ids
    return ids[0].name


def _point_row(screen: str, point: str) -> bool:
    """The marked (▶) row of the table is ``point`` (names read ``CAMPAIGN.BASE.concurrency-N``)."""
    base, value = point.split(".")[1], point.rsplit("-", 1)[-1]
    marked = [line for line in screen.splitlines() if "▶" in line]
    return len(marked) == 1 and base in marked[0] and f"concurrency={value}" in marked[0]


@pytest.fixture
def campaign_lab(lab: Lab) -> Iterator[Lab]:
    """A two-load, four-point StubEngine campaign; any campaign still running at the end is stopped."""
    two_load_campaign(lab, tokens="0.04")  # 8 tokens x 40 ms a request: several seconds a point
    yield lab
    root = lab.workdir / "campaigns"
    for camp in root.glob("sweep-*") if root.is_dir() else []:
        try:
            asyncio.run(control.stop(load_catalog(lab.folder), camp.name, grace=20))
        except ServelabError:
            pass


def test_killed_dashboard_campaign_goes_on_and_a_new_one_reattaches(campaign_lab: Lab, tmux: Tmux, tmp_path: Path) -> None:
    lab = campaign_lab
    first = _dashboard(tmux, lab, tmp_path, "first")
    first.keys("M")
    first.wait_for("sweep", "not started", "4 points in 2 loads")
    first.keys("X")  # start without preflight (the StubEngine is no real vLLM); it asks first
    first.wait_for("Start campaign sweep on local?")
    first.keys("y")
    first.wait_for("campaign sweep-", "▶", "now: probing", timeout=90)
    camp_id = _started_id(lab)
    before = _state(lab, camp_id)
    assert before["status"] == "running"

    pid = first.pane_pid()
    assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1].endswith(b"servelab")
    os.kill(pid, signal.SIGKILL)  # the dashboard we started, nothing else
    deadline = time.monotonic() + 20
    while first.alive():
        assert time.monotonic() < deadline, "the killed dashboard's tmux session did not end"
        time.sleep(0.1)

    # the queue goes on without any dashboard: another point finishes, the supervisor lives
    deadline = time.monotonic() + 120
    while _done(_state(lab, camp_id)) <= _done(before):
        assert time.monotonic() < deadline, _state(lab, camp_id)
        time.sleep(0.2)
    during = _state(lab, camp_id)
    assert during["status"] == "running", during

    # a new dashboard lists it as running and reattaches to the point running now
    second = _dashboard(tmux, lab, tmp_path, "second")
    second.keys("M")
    second.wait_for(camp_id, "running")
    second.keys("j", "Enter")  # the file's row, then the started campaign's
    second.wait_for(f"campaign {camp_id} on local", timeout=30)
    deadline = time.monotonic() + 60
    agreed = False
    while time.monotonic() < deadline and not agreed:
        screen = second.screen()
        current = (_state(lab, camp_id).get("current") or {}).get("point")
        agreed = bool(current) and f"point {current}" in screen and _point_row(screen, str(current))
        time.sleep(0.2)
    assert agreed, f"the reattached dashboard never showed the running point; screen:\n{second.screen()}\nstate: {_state(lab, camp_id)}"

    # later, the finished table in the same dashboard, with every point's figures and the recommendation
    screen = second.wait_for(f"{camp_id} on local: done (4 done)", "recommendation:", timeout=180)
    assert "▶" not in screen
    rows = [line for line in screen.splitlines() if "stub-" in line and " done " in f"{line} "]
    assert len(rows) == 4, screen
    assert len(re.findall(r"\d\.\d\dx", screen)) >= 2 and "Speedup over baseline against K" in screen  # two speedups
    assert _state(lab, camp_id)["status"] == "done"
    second.keys("q", "q", "q")
    deadline = time.monotonic() + 15
    while second.alive():
        assert time.monotonic() < deadline, "servelab did not quit on q:\n" + second.screen()
        time.sleep(0.2)
