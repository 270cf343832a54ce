"""Who launched each run, on the runs screen of a shared host (issue #36): every row names its owner,
``u`` switches between every user's runs and yours, and another user's run is read-only unless asked:
its stop confirmation names its owner, and answering no leaves it running. Real replayed runs."""

from __future__ import annotations

from textual.widgets import DataTable

from servelab.engines.hosts.owner import me
from servelab.tui.app import ServelabApp
from servelab.tui.screens.confirm import ConfirmScreen
from servelab.tui.screens.runs import RunsScreen
from tests.fixtures.ports import free_port
from tests.fixtures.tui import SHARED_LOGS, TuiFolder, pilot_wait, shown_text

LOG = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"


async def test_the_runs_screen_names_owners_filters_mine_and_asks_before_stopping_anothers_run(tui_folder: TuiFolder) -> None:
    you = me()
    mine = tui_folder.replay("tiny-cpu-vllm-baseline", LOG, rate=50, hold_s=120, port=free_port(), owner=(you.user, you.machine))
    theirs = tui_folder.replay("tiny-cpu-vllm-ngram", LOG, rate=50, hold_s=120, port=free_port(), owner=("alice-not-you", "box-2"))
    app = ServelabApp(tui_folder.folder)
    try:
        async with app.run_test(size=(160, 30)) as pilot:
            await app.push_screen(RunsScreen())
            runs = app.screen
            assert isinstance(runs, RunsScreen)
            await pilot_wait(pilot, lambda: {r.id for r in runs.rows} == {mine, theirs})
            await pilot_wait(pilot, lambda: "alice-not-you@box-2" in shown_text(app) and you.label in shown_text(app))

            await pilot.press("u")  # yours only
            await pilot_wait(pilot, lambda: [r.id for r in runs.rows] == [mine] and runs.query_one(DataTable).row_count == 1)
            assert "alice-not-you@box-2" not in shown_text(app)
            await pilot.press("u")  # every user's again
            await pilot_wait(pilot, lambda: {r.id for r in runs.rows} == {mine, theirs} and runs.query_one(DataTable).row_count == 2)

            runs.select_row(theirs)
            await pilot_wait(pilot, lambda: (row := runs.current_row()) is not None and row.id == theirs)
            await pilot.press("s")
            await pilot_wait(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot_wait(pilot, lambda: "alice-not-you@box-2's, not yours" in shown_text(app))
            await pilot.press("escape")  # no: it stays running
            await pilot_wait(pilot, lambda: isinstance(app.screen, RunsScreen))
            st = await app.runs().status(theirs, analyze=False)
            assert st.alive

            runs.select_row(mine)
            await pilot_wait(pilot, lambda: (row := runs.current_row()) is not None and row.id == mine)
            await pilot.press("s")
            await pilot_wait(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            assert "not yours" not in shown_text(app)  # your own run: the plain question
            await pilot.press("escape")
    finally:
        tui_folder.stop_all()
