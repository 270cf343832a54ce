"""The dashboard's campaign screens, driven with Textual's pilot over real campaigns.

The queue is the real supervisor (engines/helpers/campaignctl.py) run detached on the local host,
the engine is the StubEngine (real processes, real HTTP), so start, the live state, stop with its
confirmation, resume and the finished table are what an operator would see.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.campaign import control
from servelab.engines.campaign.plots import CampaignPlots, plot_series
from servelab.engines.catalog.folder import load_catalog
from tests.fixtures.campaignlab import marked, recorded_campaign, two_load_campaign
from tests.fixtures.runlab import Lab
from tests.fixtures.tui import pilot_wait, screen_text
from servelab.tui.app import ServelabApp
from servelab.tui.screens.campaign import CampaignScreen
from servelab.tui.screens.campaigns import CampaignsScreen
from servelab.tui.screens.confirm import ConfirmScreen
from servelab.tui.widgets.campaign_plots import ChartPlot


@pytest.fixture(autouse=True)
def _private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("SERVELAB_KEYMAP", str(tmp_path / "config" / "keymap.toml"))
    monkeypatch.setenv("SERVELAB_STATE_DIR", str(tmp_path / "state"))


def _app(lab: Lab, readonly: bool = False) -> ServelabApp:
    app = ServelabApp(lab.folder, readonly=readonly)
    app.watch_runs = False
    return app


def _campaigns(app: ServelabApp) -> CampaignsScreen:
    screen = app.screen
    assert isinstance(screen, CampaignsScreen), type(screen)
    return screen


async def _open_campaigns(app: ServelabApp, pilot: Any) -> None:
    """M, then wait until the list is loaded and every file's row is drawn."""
    await pilot.press("M")
    await pilot_wait(pilot, lambda: isinstance(app.screen, CampaignsScreen) and _campaigns(app).loaded)
    await pilot.pause()
    # the hosts line and the table's rows are drawn in separate frames: wait for both
    await pilot_wait(pilot, lambda: "campaign file(s)" in screen_text(app) and all(e.name in screen_text(app) for e in _campaigns(app).entries))


def campaign_plots(app: ServelabApp) -> CampaignPlots:
    screen = app.screen
    assert isinstance(screen, CampaignScreen) and screen.plots is not None
    return screen.plots


def _points(app: ServelabApp) -> dict[str, str]:
    screen = app.screen
    assert isinstance(screen, CampaignScreen), type(screen)
    return {p.name: p.status for p in screen.status.points} if screen.status is not None else {}


async def test_lists_files_and_plans_and_a_broken_file_is_one_line(lab: Lab) -> None:
    two_load_campaign(lab)
    broken = lab.folder / "campaigns" / "broken.toml"
    broken.write_text('base = ["stub-base"]\n[axes]\n"speculative.num_tokns" = [2]\n')
    app = _app(lab)
    async with app.run_test(size=(140, 40)) as pilot:
        await _open_campaigns(app, pilot)
        screen = _campaigns(app)
        # each row's cells may land in a later frame than its name: wait for what is asserted
        await pilot_wait(pilot, lambda: all(w in screen_text(app) for w in ("not started", "invalid", "num_tokns")))
        text = screen_text(app)
        assert "sweep" in text and "not started" in text
        assert "broken" in text and "invalid" in text and "num_tokns" in text  # in its own row
        screen.select_row(f"file:{lab.folder / 'campaigns' / 'sweep.toml'}")
        await pilot_wait(pilot, lambda: "4 points in 2 loads" in screen_text(app))
        text = screen_text(app)
        assert "concurrency=2" in text and "ngram K=2" in text
        assert "--speculative-config" in text  # the load's engine flags, as the plan gives them
        screen.select_row(f"file:{broken}")
        await pilot_wait(pilot, lambda: "4 points in 2 loads" not in screen_text(app))
        await pilot.press("S")  # starting a broken campaign: one line, no confirm, nothing started
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        messages = [n.message for n in app._notifications]
        assert any("num_tokns" in m and "\n" not in m for m in messages), messages
        assert not (lab.workdir / "campaigns").exists()
        assert broken.read_text().endswith('= [2]\n')  # the file is as the operator left it


async def test_start_follow_stop_with_confirm_resume_and_finished_table(lab: Lab) -> None:
    two_load_campaign(lab, tokens="0.02")  # 8 tokens x 20 ms: each point takes a few seconds
    app = _app(lab)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open_campaigns(app, pilot)
        _campaigns(app).select_row(f"file:{lab.folder / 'campaigns' / 'sweep.toml'}")
        await pilot.press("X")  # start without preflight (the StubEngine is no real vLLM)
        await pilot_wait(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await pilot_wait(pilot, lambda: isinstance(app.screen, CampaignScreen), timeout=60)
        screen = app.screen
        assert isinstance(screen, CampaignScreen) and screen.campaign_id.startswith("sweep-")
        # the live state: a point running, marked as the current one, on the screen
        await pilot_wait(pilot, lambda: "running" in _points(app).values() and "▶" in screen_text(app) and "now: probing" in screen_text(app), timeout=60)
        # stop asks first; n keeps it running
        await pilot.press("s")
        await pilot_wait(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")
        await pilot_wait(pilot, lambda: app.screen is screen)  # the question answered and gone
        st = await control.status(load_catalog(lab.folder), screen.campaign_id)
        assert st.supervisor_alive
        await pilot.press("s")
        await pilot_wait(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await pilot_wait(pilot, lambda: screen.status is not None and screen.status.status == "stopped", timeout=120)
        await pilot_wait(pilot, lambda: "stopped" in screen_text(app))  # the state, then the frame that shows it
        assert marked({ld.run_id for ld in screen.status.loads if ld.run_id}) == []
        # resume from the screen, and the finished table with every point's figures
        await pilot.press("u")
        await pilot_wait(pilot, lambda: screen.status is not None and screen.status.status == "done", timeout=120)
        await pilot_wait(pilot, lambda: screen.report is not None and all(r.output_tps for r in screen.report.rows), timeout=30)
        await pilot_wait(pilot, lambda: "Speedup over baseline against K" in screen_text(app) and "recommendation:" in screen_text(app))
        await pilot.pause()  # the last update laid out
        text = screen_text(app)
        assert text.count("done") >= 4
        assert "x" in text and "tok/s" in text and "recommendation" in text
        assert screen.report is not None
        speedups = [r.speedup for r in screen.report.rows if r.baseline_point]
        assert len(speedups) == 2 and all(s is not None for s in speedups)
        assert f"{speedups[0]:.2f}x" in text  # the report's figure, as drawn
        assert "▶" not in text  # nothing current once done
        # the three charts draw the core's series, named as the core names them
        drawn = {p.key: [s.label for s in p.chart.series] for p in screen.query(ChartPlot) if p.chart is not None}
        assert drawn == {c.key: [s.label for s in c.series] for c in plot_series(screen.report).charts}
        assert drawn["throughput"] == ["vllm baseline", "vllm ngram K=2"]
        assert drawn["speedup"] == ["vllm ngram c=1", "vllm ngram c=2"]
        assert drawn["acceptance"] == []  # the StubEngine reports no per-position rates: said, not drawn as 0
        for label in ("vllm baseline", "vllm ngram K=2", "vllm ngram c=1", "Speedup over baseline against K", "no measured points yet"):
            assert label in text, label
        state = json.loads((lab.workdir / "campaigns" / screen.campaign_id / "state.json").read_text())
        assert state["status"] == "done"
        # back on the list, the file's row says so and enter on it opens its latest run again
        camp_id = screen.campaign_id
        await pilot.press("q")
        await pilot_wait(pilot, lambda: isinstance(app.screen, CampaignsScreen) and "latest done" in screen_text(app))
        _campaigns(app).select_row(f"file:{lab.folder / 'campaigns' / 'sweep.toml'}")
        await pilot.press("enter")
        await pilot_wait(pilot, lambda: isinstance(app.screen, CampaignScreen) and app.screen.campaign_id == camp_id)


async def test_readonly_offers_no_start_or_stop(lab: Lab) -> None:
    two_load_campaign(lab)
    app = _app(lab, readonly=True)
    async with app.run_test(size=(140, 30)) as pilot:
        await _open_campaigns(app, pilot)
        assert "Start" not in screen_text(app).splitlines()[-1]
        await pilot.press("X")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert not (lab.workdir / "campaigns").exists()


async def test_a_finished_real_campaign_shows_its_table_charts_and_recommendation(lab: Lab) -> None:
    camp_id = recorded_campaign(lab)  # a tiny-vLLM campaign's own records: real acceptance per position
    app = _app(lab)
    async with app.run_test(size=(160, 50)) as pilot:
        await _open_campaigns(app, pilot)
        screen = _campaigns(app)
        await pilot_wait(pilot, lambda: camp_id in screen_text(app) and "done" in screen_text(app))
        screen.select_row(next(r.key for r in screen.rows if r.started is not None and r.started.id == camp_id))
        await pilot.press("enter")
        await pilot_wait(pilot, lambda: isinstance(app.screen, CampaignScreen) and app.screen.plots is not None)
        campaign = app.screen
        assert isinstance(campaign, CampaignScreen) and campaign.report is not None and campaign.plots is not None
        await pilot_wait(pilot, lambda: "recommendation:" in screen_text(app) and "Acceptance per draft position" in screen_text(app))
        await pilot_wait(pilot, lambda: all(s.label in screen_text(app) for s in campaign_plots(app).acceptance.series))
        await pilot.pause()  # the last update laid out
        text = screen_text(app)
        acc = {s.label: s for s in campaign.plots.acceptance.series}
        assert {"vllm ngram K=2 c=1", "vllm ngram K=2 c=4"} <= set(acc)  # one line per measured K and concurrency
        for label in acc:
            assert label in text, label  # the legend of the acceptance chart
        assert "no measured points yet" not in text
        spec = [r for r in campaign.report.rows if r.k is not None and r.acceptance_rate is not None]
        assert spec and all(f"{r.acceptance_rate * 100:.0f}%" in text for r in spec)
        assert " ".join(f"{p:.2f}" for p in spec[0].per_position) in text
        assert campaign.report.recommendation and campaign.report.recommendation[:40] in text
        assert "▶" not in text
        unfinished = [r for r in campaign.report.rows if r.status != "done" and r.error]
        assert unfinished, "the recorded campaign has a point that did not run"
        for r in unfinished:  # the reason, under the table
            assert f"{r.status} {r.engine} {r.label}: {r.error[:40]}" in text, r
        assert ("diagnosis vllm" in text) == any(r.diagnosis for r in campaign.report.rows)


def test_a_fleet_campaign_shows_each_points_host_and_its_move() -> None:
    """What the campaign screen draws for a fleet campaign: the fleet and its dropped host in the
    status line, a host column with where a moved point came from (no column on one host)."""
    from rich.console import Console

    from servelab.engines.campaign.control import CampaignStatus, LoadState, PointState
    from servelab.engines.runs.state import CampaignState
    from servelab.tui.widgets.campaign_view import points_table, status_line

    def text(renderable: Any) -> str:
        console = Console(width=220, record=True)
        console.print(renderable)
        return console.export_text()

    st = CampaignStatus(
        "spread-20261204-120000-abcd", "spread", "local", "/x", CampaignState.RUNNING, True,
        loads=[LoadState(0, CampaignState.DONE, host="local"), LoadState(1, CampaignState.READY, host="local")],
        points=[PointState("a", 0, CampaignState.DONE, host="remote"),
                PointState("b", 1, CampaignState.RUNNING, host="local", moved_from="remote", moved_why="unreachable")],
        hosts=["local", "remote"], down={"remote": "connection refused"},
    )
    assert "on the fleet local, remote: running" in text(status_line(st)) and "remote dropped out" in text(status_line(st))
    table = text(points_table(st, None, None))
    assert "host" in table.splitlines()[0] and "local (moved from remote: unreachable)" in table
    one_host = CampaignStatus("x-20261204-120000-abcd", "x", "box", "/x", CampaignState.RUNNING, True, points=[PointState("a", 0, CampaignState.DONE)])
    assert "host" not in text(points_table(one_host, None, None)).splitlines()[0]
