"""The issue's "done when", on a real vLLM, driven only through the dashboard's keys:
launch the tiny n-gram experiment and its baseline (preflight first), watch them become ready,
see the probe figures (auto-probe), compare them, stop them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import ENGINE_PYTHON, TINY_MODEL, need_engine
from tests.fixtures.ports import free_port
from tests.fixtures.tui import TuiFolder
from tests.fixtures.tui import screen_text
from tests.fixtures.tui import wait_for
from servelab.tui.app import ServelabApp
from servelab.tui.screens.compare import CompareScreen
from servelab.tui.screens.confirm import ConfirmScreen
from servelab.tui.screens.experiments import ExperimentsScreen
from servelab.tui.screens.run import RunScreen

pytestmark = pytest.mark.engine
BASELINE, NGRAM = "tiny-cpu-vllm-baseline", "tiny-cpu-vllm-ngram"
LOAD_TIMEOUT_S = 900.0


def engine_folder(folder: TuiFolder) -> None:
    """Point the copied tiny experiments at the engine venv, the tiny model and free ports."""
    hosts = folder.folder / "hosts.toml"
    text = hosts.read_text()
    first_python = text.index("python = ")
    end = text.index("\n", first_python)
    hosts.write_text(text[:first_python] + f"python = {json.dumps(str(ENGINE_PYTHON))}" + text[end:])
    for name in (BASELINE, NGRAM):
        path = folder.folder / f"{name}.toml"
        toml = re.sub(r"(?m)^model = .*$", f"model = {json.dumps(str(TINY_MODEL))}", path.read_text())
        path.write_text(re.sub(r"(?m)^port = .*$", f"port = {free_port()}", toml))


async def launch_from_list(app: ServelabApp, pilot, name: str) -> RunScreen:  # type: ignore[no-untyped-def]
    experiments = next(s for s in app.screen_stack if isinstance(s, ExperimentsScreen))
    while not isinstance(app.screen, ExperimentsScreen):
        await pilot.press("q")
        await pilot.pause()
    experiments.select_row(str(app.folder / f"{name}.toml"))
    await pilot.pause()
    await pilot.press("l")
    await wait_for(pilot, lambda: isinstance(app.screen, RunScreen), timeout=LOAD_TIMEOUT_S)
    screen = app.screen
    assert isinstance(screen, RunScreen)
    return screen


async def test_launch_ready_probe_compare_stop(tui_folder: TuiFolder) -> None:
    need_engine()
    engine_folder(tui_folder)
    app = ServelabApp(tui_folder.folder)
    bells: list[int] = []
    app.bell = lambda: bells.append(1)  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ExperimentsScreen) and app.screen.catalog is not None)
        base = await launch_from_list(app, pilot, BASELINE)
        ngram = await launch_from_list(app, pilot, NGRAM)
        await wait_for(pilot, lambda: ngram.view.state == "ready", timeout=LOAD_TIMEOUT_S)
        await wait_for(pilot, lambda: "READY" in screen_text(app), timeout=60)
        text = screen_text(app)
        assert "READY" in text and "weights" in text and "KV cache" in text
        await wait_for(pilot, lambda: ngram.probe is not None, timeout=LOAD_TIMEOUT_S)
        # the screen repaints after the figures arrive; on a loaded machine that can take a while
        await wait_for(pilot, lambda: "PROBE" in screen_text(app) and "pos 1" in screen_text(app), timeout=60)
        text = screen_text(app)
        assert "PROBE" in text and "tok/s" in text and "acceptance" in text
        assert "pos 1" in text  # per-position acceptance bars
        assert ngram.probe is not None and ngram.probe["spec_decode_acceptance_length"] > 1.0
        # The baseline's screen was left: the app probed it anyway (auto probe runs app-wide).
        await wait_for(pilot, lambda: base.run_id in app.probe_results, timeout=LOAD_TIMEOUT_S)
        await wait_for(pilot, lambda: len(bells) >= 2, timeout=60)  # both became ready
        # Compare from the list: `c` on the n-gram row compares it with its baseline.
        while not isinstance(app.screen, ExperimentsScreen):
            await pilot.press("q")
            await pilot.pause()
        app.screen.select_row(str(app.folder / f"{NGRAM}.toml"))
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.comparison is not None, timeout=120)
        await wait_for(pilot, lambda: "VERDICT" in screen_text(app), timeout=60)
        compare = app.screen
        assert isinstance(compare, CompareScreen) and compare.comparison is not None
        speedup = next(r for r in compare.comparison.rows if r.label == "speedup vs baseline")
        assert "x" in speedup.values[compare.comparison.runs.index(ngram.run_id)]  # a real ratio, e.g. "1.8x ±0.1"
        assert any("speculation" in line for line in compare.comparison.verdict)
        # Stop both from their run screens.
        for run in (ngram, base):
            await pilot.press("q")
            await pilot.pause()
            await app.push_screen(RunScreen(run.run_id))
            await pilot.press("s")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            screen = app.screen_stack[-1]
            assert isinstance(screen, RunScreen)
            await wait_for(pilot, lambda screen=screen: screen.alive is False, timeout=120)
