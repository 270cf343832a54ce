"""An experiment's history on a screen, and the toasts read again (issue #36). Real replayed runs."""

from __future__ import annotations

from servelab.tui.app import ServelabApp
from servelab.tui.screens.compare import CompareScreen
from servelab.tui.screens.experiments import ExperimentsScreen
from servelab.tui.screens.history import HistoryScreen
from servelab.tui.screens.toasts import ToastsScreen
from tests.fixtures.tui import SHARED_LOGS, TuiFolder, pilot_wait, shown_text

LOG = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"


async def test_shift_h_shows_the_runs_newest_first_with_owners_and_b_then_c_compares_against_the_chosen_run(tui_folder: TuiFolder) -> None:
    older = tui_folder.replay("tiny-cpu-vllm-ngram", LOG, started_at="2026-01-01T00:00:00", owner=("alice-h", "box-1"))
    newer = tui_folder.replay("tiny-cpu-vllm-ngram", LOG, started_at="2026-01-02T00:00:00", owner=("bob-h", "box-2"))
    other = tui_folder.replay("tiny-cpu-vllm-baseline", LOG, started_at="2026-01-03T00:00:00")
    app = ServelabApp(tui_folder.folder)
    try:
        async with app.run_test(size=(160, 36)) as pilot:
            experiments = app.screen
            assert isinstance(experiments, ExperimentsScreen)
            await pilot_wait(pilot, lambda: any(r.name == "tiny-cpu-vllm-ngram" for r in experiments.rows))
            experiments.select_row(next(r.key for r in experiments.rows if r.name == "tiny-cpu-vllm-ngram"))
            await pilot.press("H")
            await pilot_wait(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.loaded)
            history = app.screen
            assert isinstance(history, HistoryScreen)
            assert [r.run_id for r in history.rows] == [newer, older]  # this experiment's runs only, newest first
            await pilot_wait(pilot, lambda: "alice-h@box-1" in shown_text(app) and "bob-h@box-2" in shown_text(app))
            assert other not in shown_text(app)

            await pilot.press("c")  # no baseline chosen yet: it says how, and stays
            await pilot_wait(pilot, lambda: any("choose the baseline run first" in str(n.message) for n in app._notifications))
            assert isinstance(app.screen, HistoryScreen)
            history.select_row(older)
            await pilot.press("b")
            await pilot_wait(pilot, lambda: f"baseline: {older}" in shown_text(app) and "◆" in shown_text(app))
            history.select_row(newer)
            await pilot_wait(pilot, lambda: (row := history.current_row()) is not None and row.run_id == newer)
            await pilot.press("c")
            await pilot_wait(pilot, lambda: isinstance(app.screen, CompareScreen))
            compare = app.screen
            assert isinstance(compare, CompareScreen)
            assert (compare.run_ids, compare.baseline_run) == ([older, newer], older)
    finally:
        tui_folder.stop_all()


async def test_the_palettes_notifications_show_every_toast_shown_so_far_newest_first(tui_folder: TuiFolder) -> None:
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot_wait(pilot, lambda: isinstance(app.screen, ExperimentsScreen))
        app.notify("the first thing that happened", title="run ready")
        app.screen.notify("a later failure", title="probe failed", severity="error")
        assert any(c.title == "Notifications" for c in app.get_system_commands(app.screen))  # reached from the palette
        next(c for c in app.get_system_commands(app.screen) if c.title == "Notifications").callback()
        await pilot_wait(pilot, lambda: isinstance(app.screen, ToastsScreen))
        await pilot_wait(pilot, lambda: "probe failed: a later failure" in shown_text(app))
        text = shown_text(app)
        assert text.index("probe failed: a later failure") < text.index("run ready: the first thing that happened")
