"""The dashboard's preflight view shows each drafter finding as its own line, before any load."""

from __future__ import annotations

import json
from pathlib import Path

from servelab.engines.catalog.folder import load_catalog
from tests.conftest import TINY_MODEL
from tests.fixtures.drafter_files import tiny_eagle3_config, write_drafter
from tests.fixtures.tui import TuiFolder, screen_text, wait_for
from servelab.tui.app import ServelabApp
from servelab.tui.screens.preflight import PreflightScreen

EXP = """\
engine = "vllm"
model = "{model}"
port = 18777

[speculative]
method = "eagle3"
draft_model = "{draft}"
num_tokens = 2

[engine_args]
max-model-len = 512
"""


async def test_a_launch_with_a_faulty_drafter_shows_the_finding_and_starts_nothing(tui_folder: TuiFolder, tmp_path: Path) -> None:
    target = json.loads((TINY_MODEL / "config.json").read_text())
    drafter = write_drafter(tmp_path / "tiny-e3-default-ids", tiny_eagle3_config(target, eagle_config={"use_aux_hidden_state": True}))
    (tui_folder.folder / "tiny-e3-faulty.toml").write_text(EXP.format(model=TINY_MODEL, draft=drafter))
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_for(pilot, lambda: "tiny-e3-faulty" in screen_text(app))  # the dashboard's first screen is up
        results: list[str | None] = []
        await app.push_screen(PreflightScreen(load_catalog(tui_folder.folder), "tiny-e3-faulty", launch=True), results.append)
        screen = app.screen
        assert isinstance(screen, PreflightScreen)
        await wait_for(pilot, lambda: screen.outcome.startswith("✗"))
        await wait_for(pilot, lambda: "aux-layers-out-of-range" in screen_text(app))  # the outcome, then its frame
        text = screen_text(app)
        assert "aux-layers-out-of-range" in text and "launch refused" in screen.outcome
        drafter_line = next(c for c in screen.checks if c.name == "drafter path")
        assert not drafter_line.ok and drafter_line.findings[0].code == "aux-layers-out-of-range"
        await pilot.press("escape")
        await pilot.pause()
    assert results == [None]
    runs = tui_folder.workdir / "runs"
    assert not runs.exists() or not list(runs.glob("tiny-e3-faulty-*"))
