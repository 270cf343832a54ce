"""Compare, runs and preflight screens, on real run folders (replayed logs) of this machine."""

from __future__ import annotations

import json
from pathlib import Path

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.runs.manager import Runs
from tests.fixtures.screens import NGRAM_SERVE, probe_summary
from tests.fixtures.tui import TuiFolder
from tests.fixtures.tui import screen_text
from tests.fixtures.tui import wait_for
from servelab.tui.app import ServelabApp
from servelab.engines.verdict.compare import Row, build
from servelab.tui.screens.compare import CompareScreen
from servelab.tui.screens.confirm import ConfirmScreen
from servelab.tui.screens.preflight import PreflightScreen
from servelab.tui.screens.run import RunScreen
from servelab.tui.screens.runs import RunsScreen




async def probed_pair(folder: TuiFolder) -> tuple[str, str]:
    base = folder.replay("tiny-cpu-vllm-baseline", NGRAM_SERVE)
    spec = folder.replay("tiny-cpu-vllm-ngram", NGRAM_SERVE)
    runs = Runs(load_catalog(folder.folder))
    await runs.write_artifact(base, "probe.json", json.dumps(probe_summary(base, "tiny-cpu-vllm-baseline", None, 40.0, False)).encode())
    await runs.write_artifact(spec, "probe.json", json.dumps(probe_summary(spec, "tiny-cpu-vllm-ngram", "tiny-cpu-vllm-baseline", 80.0, True)).encode())
    return base, spec


def test_best_column_knows_the_direction_of_each_metric() -> None:
    """The comparison's rows carry numbers and a direction: the screen never parses its cells."""
    assert best_column("output tok/s", [40.0, 80.0]) == 1
    assert best_column("TPOT p50 (ms)", [25.0, 12.5]) == 1
    assert best_column("TTFT p50 (ms)", [100.0, 300.0]) == 0
    assert best_column("engine", ["vllm", "sglang"]) is None
    assert best_column("output tok/s", [None, 80.0]) is None  # one number: nothing to pick


def best_column(label: str, values: list[float | None] | list[str]) -> int | None:
    """The best cell of a row as the core builds it (``engines.verdict.compare.build``)."""
    summaries = [{"output_throughput": v, "median_tpot_ms": v, "median_ttft_ms": v} for v in values]
    comp = build([(f"r{i}", s) for i, s in enumerate(summaries)], {}) if label != "engine" else None
    if comp is None:
        return Row(label, [str(v) for v in values], "identity").best()
    return next(r for r in comp.rows if r.label == label).best()


async def test_compare_highlights_best_toggles_diff_and_exports_markdown(tui_folder: TuiFolder, tmp_path: Path) -> None:
    base, spec = await probed_pair(tui_folder)
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        await app.push_screen(CompareScreen(["tiny-cpu-vllm-baseline", "tiny-cpu-vllm-ngram"]))
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        await wait_for(pilot, lambda: screen.comparison is not None)
        await wait_for(pilot, lambda: "VERDICT" in screen_text(app))  # the comparison, then the frame that shows it
        text = screen_text(app)
        assert "VERDICT" in text and "speculation HELPS" in text
        assert "2.00x" in text  # 80 / 40 tok/s, from the compare engine
        rows_all = screen.query_one("#compare-table").row_count
        await pilot.press("d")
        await pilot.pause()
        assert screen.query_one("#compare-table").row_count < rows_all
        await pilot.press("m")
        await pilot.pause()
        assert screen.exported is not None and screen.exported.exists()
        markdown = screen.exported.read_text()
        assert markdown.startswith("| |") and "**Verdict**" in markdown and spec in markdown


async def test_compare_without_probe_says_what_to_do(tui_folder: TuiFolder) -> None:
    tui_folder.replay("tiny-cpu-vllm-baseline", NGRAM_SERVE)
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(100, 30)) as pilot:
        await app.push_screen(CompareScreen(["tiny-cpu-vllm-baseline", "tiny-cpu-vllm-ngram"]))
        await wait_for(pilot, lambda: "no probed run" in screen_text(app))


async def test_runs_screen_lists_opens_and_stops_a_run(tui_folder: TuiFolder) -> None:
    ended = tui_folder.replay("tiny-cpu-vllm-baseline", NGRAM_SERVE)
    live = tui_folder.replay("tiny-cpu-vllm-ngram", NGRAM_SERVE, hold_s=120)
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        await pilot.press("R")
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        await wait_for(pilot, lambda: len(screen.records) == 2 and any(r.status == "running" for r in screen.records))
        # The records arrive before the table is drawn; under load the first frame can lag behind them.
        await wait_for(pilot, lambda: ended in screen_text(app) and live in screen_text(app))
        text = screen_text(app)
        assert ended in text and live in text
        assert screen.current() is not None and screen.current().id == live  # newest first
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_for(pilot, lambda: any(r.id == live and r.status == "stopped" for r in screen.records), timeout=60)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, RunScreen) and app.screen.run_id == live


async def test_preflight_shows_each_check_and_refuses_a_broken_engine_python(tui_folder: TuiFolder) -> None:
    """The local host's python does not have vLLM: preflight says so per check, and launch does not start."""
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: "tiny-cpu-vllm-ngram" in screen_text(app))  # the dashboard's first screen is up
        catalog = load_catalog(tui_folder.folder)
        results: list[str | None] = []
        await app.push_screen(PreflightScreen(catalog, "tiny-cpu-vllm-ngram", launch=True), results.append)
        screen = app.screen
        assert isinstance(screen, PreflightScreen)
        await wait_for(pilot, lambda: screen.outcome.startswith("✗"), timeout=120)
        # the outcome, then the frame that shows it
        await wait_for(pilot, lambda: all(s in screen_text(app) for s in ("host reachable", "✓", "✗")))
        await pilot.press("escape")
        await pilot.pause()
        assert results == [None]
        assert not list((tui_folder.workdir / "runs").glob("tiny-cpu-vllm-ngram-*")) if (tui_folder.workdir / "runs").exists() else True
