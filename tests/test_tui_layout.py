"""Screens that fit and reach (issue #22), driven with Textual's pilot on real run folders:
compare keeps its row labels and two runs side by side, every screen keeps its essential keys in
the footer at 80x24 and the run screen's log its height, a launch's preflight stays on the run
screen as a collapsible block, the palette reaches every key's action, and help shows ``?``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.preflight.checks import run_preflight
from servelab.engines.runs.manager import Runs
from tests.conftest import TINY_MODEL
from tests.fixtures.runlab import STUB_PATH, toml_value
from tests.fixtures.ports import free_port
from tests.fixtures.tui import TuiFolder, screen_text, settle, wait_for
from tests.fixtures.screens import NGRAM_SERVE, probe_summary
from servelab.tui.app import ServelabApp
from servelab.tui.screens.campaigns import CampaignsScreen
from servelab.tui.screens.compare import CompareScreen
from servelab.tui.screens.experiments import ExperimentsScreen
from servelab.tui.screens.help import HelpScreen
from servelab.tui.screens.run import RunScreen
from servelab.tui.screens.runs import RunsScreen
from servelab.tui.screens.why import WhyScreen
from servelab.tui.widgets.log_view import LogPanel


def quiet_app(folder: Path) -> ServelabApp:
    app = ServelabApp(folder)
    app.watch_runs = False
    return app


def footer_text(app: ServelabApp) -> str:
    return screen_text(app).splitlines()[-1]


def row_text(app: ServelabApp, label: str) -> str:
    """The screen's first line that starts with ``label`` ("" when none does yet)."""
    return next((r for r in screen_text(app).splitlines() if r.lstrip().startswith(label)), "")


async def loaded_experiments(app: ServelabApp, pilot: Any) -> ExperimentsScreen:
    screen = app.screen
    assert isinstance(screen, ExperimentsScreen)
    await wait_for(pilot, lambda: bool(screen.rows) and "tiny-cpu-vllm-ngram" in screen_text(app))
    return screen


def stub_experiment(folder: Path, name: str) -> None:
    """A vLLM definition whose engine is the StubEngine (a real process that serves and logs)."""
    env = {"PYTHONPATH": STUB_PATH, "STUB_INTERVAL": "0.01"}
    lines = ['engine = "vllm"', 'host = "local"', f"model = {toml_value(str(TINY_MODEL))}", f"port = {free_port()}", "[env]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in env.items()]
    (folder / f"{name}.toml").write_text("\n".join(lines) + "\n")


async def probed_pair(folder: TuiFolder) -> tuple[str, str]:
    """A baseline at 40 and an n-gram run at 80 tok/s, probed, each replay on its own port."""
    runs = Runs(load_catalog(folder.folder))
    ids = []
    for experiment, baseline, tok_s, spec in (("tiny-cpu-vllm-baseline", None, 40.0, False), ("tiny-cpu-vllm-ngram", "tiny-cpu-vllm-baseline", 80.0, True)):
        run = folder.replay(experiment, NGRAM_SERVE, port=free_port())
        await runs.write_artifact(run, "probe.json", json.dumps(probe_summary(run, experiment, baseline, tok_s, spec)).encode())
        ids.append(run)
    return ids[0], ids[1]


# -- compare ------------------------------------------------------------------------------------
async def test_compare_shows_two_runs_side_by_side_at_100_columns(tui_folder: TuiFolder) -> None:
    base, spec = await probed_pair(tui_folder)
    app = quiet_app(tui_folder.folder)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.push_screen(CompareScreen(run_ids=[base, spec]))
        await wait_for(pilot, lambda: "VERDICT" in screen_text(app))
        # the frame that shows both runs' cells and the method row
        await settle(pilot, lambda: "tiny-cpu-vllm-ngram" in row_text(app, "experiment ") and row_text(app, "spec method").split()[-2:] == ["none", "ngram"])
        rows = screen_text(app).splitlines()
        experiment = next((r for r in rows if r.lstrip().startswith("experiment ")), "\n".join(rows))
        # both runs' cells whole on the label's line: nothing to scroll to
        assert "tiny-cpu-vllm-baseline" in experiment and "tiny-cpu-vllm-ngram" in experiment, experiment
        method = next(r for r in rows if r.lstrip().startswith("spec method"))
        assert method.split()[-2:] == ["none", "ngram"], method


async def test_compare_keeps_the_row_labels_when_the_runs_scroll_sideways(tui_folder: TuiFolder) -> None:
    base, spec = await probed_pair(tui_folder)
    runs = Runs(load_catalog(tui_folder.folder))
    more = []
    for tok_s in (50.0, 60.0, 70.0):  # five runs do not fit 80 columns
        run = tui_folder.replay("tiny-cpu-vllm-ngram", NGRAM_SERVE, port=free_port())
        await runs.write_artifact(run, "probe.json", json.dumps(probe_summary(run, "tiny-cpu-vllm-ngram", "tiny-cpu-vllm-baseline", tok_s, True)).encode())
        more.append(run)
    app = quiet_app(tui_folder.folder)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.push_screen(CompareScreen(run_ids=[base, spec, *more]))
        await wait_for(pilot, lambda: "VERDICT" in screen_text(app))
        table = app.screen.query_one("#compare-table")
        table.scroll_to(x=table.max_scroll_x, y=table.max_scroll_y, animate=False)
        # the frame drawn after the scroll: the last run's figures beside the label
        await settle(pilot, lambda: table.scroll_x > 0 and row_text(app, "speedup vs baseline").split()[-2:] == ["1.75x", "±0.04"])
        assert table.scroll_x > 0  # the runs did scroll
        rows = screen_text(app).splitlines()
        speedup = next((r for r in rows if r.lstrip().startswith("speedup vs baseline")), None)
        assert speedup is not None, "\n".join(rows)  # the labels stayed
        assert speedup.split()[-2:] == ["1.75x", "±0.04"], speedup  # the last run (70 tok/s), beside its label


# -- the footer and the log at 80x24 ---------------------------------------------------------------
async def test_every_screen_keeps_its_essential_keys_in_the_footer_at_80x24(tui_folder: TuiFolder) -> None:
    base, spec = await probed_pair(tui_folder)
    app = quiet_app(tui_folder.folder)
    essential = {
        "experiments": ["? Help", "q Back", "l Launch", "p Preflight", "c Compare"],
        "run": ["? Help", "q Back", "s Stop", "P Probe", "y Why"],
        "compare": ["? Help", "q Back", "d Diff only", "m Markdown", "y Why"],
        "why": ["? Help", "q Back", "D Diagnose now"],
        "runs": ["? Help", "q Back", "s Stop", "C Cleanup", "r Refresh"],
        "campaigns": ["? Help", "q Back", "S Start", "r Refresh"],
    }
    shown: dict[str, str] = {}

    async def footer_of(name: str, kind: type) -> None:
        """The screen's footer once the frame shows that screen's keys (or the wait gives up)."""
        await settle(pilot, lambda: isinstance(app.screen, kind) and all(k in footer_text(app) for k in essential[name]))
        shown[name] = footer_text(app)

    async with app.run_test(size=(80, 24)) as pilot:
        await loaded_experiments(app, pilot)
        await footer_of("experiments", ExperimentsScreen)
        await app.push_screen(RunScreen(spec))
        await wait_for(pilot, lambda: "Stop" in footer_text(app))
        await footer_of("run", RunScreen)
        await app.push_screen(CompareScreen(run_ids=[base, spec]))
        await wait_for(pilot, lambda: "VERDICT" in screen_text(app))
        await footer_of("compare", CompareScreen)
        await app.push_screen(WhyScreen([spec]))
        await footer_of("why", WhyScreen)
        await app.push_screen(RunsScreen())
        await footer_of("runs", RunsScreen)
        await app.push_screen(CampaignsScreen())
        await footer_of("campaigns", CampaignsScreen)
    missing = {name: [k for k in keys if k not in shown[name]] for name, keys in essential.items()}
    assert not any(missing.values()), (missing, shown)


async def test_the_run_screen_log_keeps_a_usable_height_at_80x24(tui_folder: TuiFolder) -> None:
    _base, spec = await probed_pair(tui_folder)
    app = quiet_app(tui_folder.folder)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.push_screen(RunScreen(spec))
        screen = app.screen
        assert isinstance(screen, RunScreen)
        # the replay has ended, the probe panel is up: what is left of 24 rows for the log?
        await wait_for(pilot, lambda: screen.view.state == "ready" or screen.alive is False)
        await wait_for(pilot, lambda: "PROBE output" in screen_text(app))
        await settle(pilot, lambda: screen.query_one(LogPanel).region.height >= 12)  # the layout after the probe panel came up
        assert screen.query_one(LogPanel).region.height >= 12, screen.query_one(LogPanel).region


# -- the preflight stays -----------------------------------------------------------------------------
async def test_a_launch_leaves_its_preflight_on_the_run_screen(tui_folder: TuiFolder) -> None:
    """X launches the StubEngine without a preflight: the run screen says so, in a block that stays."""
    stub_experiment(tui_folder.folder, "stubbed")
    app = quiet_app(tui_folder.folder)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await loaded_experiments(app, pilot)
        screen.select_row(next(r.key for r in screen.rows if r.name == "stubbed"))
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(app.screen, RunScreen))
        from servelab.tui.widgets.preflight_checks import PreflightBlock

        from servelab.tui.screens.preflight import PreflightScreen

        run_screen = app.screen
        # the launch screen is gone from the stack and the run screen drew its preflight block
        await settle(pilot, lambda: not any(isinstance(s, PreflightScreen) for s in app.screen_stack) and "preflight: skipped" in screen_text(app))
        assert app.screen is run_screen
        block = run_screen.query_one(PreflightBlock)
        assert "preflight: skipped" in screen_text(app) and block.collapsed
        await pilot.press("i")
        await pilot.pause()
        assert not block.collapsed


async def test_the_preflight_block_shows_each_check_and_opens_on_a_failure(tui_folder: TuiFolder) -> None:
    """Real checks (the engine python here has no vLLM: two fail) on a run's screen at 80x24."""
    from servelab.tui.widgets.preflight_checks import PreflightBlock

    stub_experiment(tui_folder.folder, "stubbed")
    report = await run_preflight(load_catalog(tui_folder.folder), "stubbed")
    run_id = tui_folder.replay("tiny-cpu-vllm-ngram", NGRAM_SERVE, port=free_port())
    app = quiet_app(tui_folder.folder)
    app.preflights[run_id] = list(report.checks)
    passed = sum(c.ok for c in report.checks)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.push_screen(RunScreen(run_id))
        failed = next(c for c in report.checks if not c.ok)
        summary = f"preflight: {passed} of {len(report.checks)} checks passed"
        await wait_for(pilot, lambda: summary in screen_text(app) and failed.name in screen_text(app))  # no fixed pause: a loaded machine draws late
        assert not app.screen.query_one(PreflightBlock).collapsed  # something failed: open
        await pilot.press("i")
        await pilot.pause()
        assert failed.name not in screen_text(app)


# -- the palette ---------------------------------------------------------------------------------------
async def palette_hits(app: ServelabApp, pilot: Any, query: str, *hits: str) -> str:
    """What the screen shows once the palette, asked ``query``, lists every one of ``hits``."""
    await pilot.press("ctrl+p")
    await pilot.pause()
    await pilot.press(*query)
    await settle(pilot, lambda: all(h in screen_text(app) for h in hits))
    return screen_text(app)


async def test_the_palette_reaches_every_key_of_the_screen_with_its_key(tui_folder: TuiFolder) -> None:
    _base, spec = await probed_pair(tui_folder)
    app = quiet_app(tui_folder.folder)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded_experiments(app, pilot)
        for query, hit in (("launch", "Launch  (l)"), ("compare", "Compare  (c)"), ("preflight", "Preflight  (p)")):
            text = await palette_hits(app, pilot, query, hit)
            assert hit in text, (query, text)
            await pilot.press("escape")
            await pilot.pause()
        await app.push_screen(RunScreen(spec))
        await wait_for(pilot, lambda: isinstance(app.screen, RunScreen) and "y Why" in screen_text(app).splitlines()[-1])  # its keys are up
        text = await palette_hits(app, pilot, "diagnose", "(y)", "Why?")
        assert "(y)" in text and "Why?" in text, text
        await pilot.press("enter")  # the same action as the key
        await wait_for(pilot, lambda: isinstance(app.screen, WhyScreen))


# -- help ------------------------------------------------------------------------------------------------
async def test_help_names_question_mark_for_help(tui_folder: TuiFolder) -> None:
    app = quiet_app(tui_folder.folder)
    async with app.run_test(size=(100, 40)) as pilot:
        await loaded_experiments(app, pilot)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        row = next(r for r in screen_text(app).splitlines() if "app.help" in r)
        cells = [t for t in row.split() if t not in ("█", "┃", "│", "▊", "▎")]  # the box's borders
        assert cells[0] == "?", row
