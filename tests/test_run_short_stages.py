"""The run screen's stages on a short terminal (80x24): at least four rows while the run has them,
never hiding the latest done stage, what runs or failed, or what comes after (issue #36)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from servelab.engines.runs.state import StageState
from servelab.tui.screens.run import SHORT_ROWS, short_stages
from servelab.tui.widgets.run_view_model import StageRow

STATES = st.lists(st.sampled_from(list(StageState)), min_size=0, max_size=12)


def rows(states: list[StageState]) -> list[StageRow]:
    return [StageRow(id=f"s{i}", label=f"stage {i}", status=s) for i, s in enumerate(states)]


@given(STATES)
def test_short_stages_keep_four_rows_and_everything_that_matters(states: list[StageState]) -> None:
    stages = rows(states)
    shown = short_stages(stages)
    ids = [s.id for s in shown]
    assert ids == [s.id for s in stages if s.id in ids]  # in order, no row twice
    assert len(shown) >= min(SHORT_ROWS, len(stages))
    done = [i for i, s in enumerate(stages) if s.status is StageState.DONE]
    last = done[-1] if done else 0
    for i, s in enumerate(stages):
        if i >= last or s.status in (StageState.RUNNING, StageState.FAILED):
            assert s.id in ids, (i, states)
    # the rows added are the done ones just before the latest, nearest first
    extra = [i for i, s in enumerate(stages) if s.id in ids and i < last and s.status not in (StageState.RUNNING, StageState.FAILED)]
    assert extra == sorted(extra) and (not extra or extra[-1] == last - 1 or stages[last - 1].status in (StageState.RUNNING, StageState.FAILED))


def test_an_exited_run_of_eight_stages_shows_its_last_four() -> None:
    stages = rows([StageState.DONE] * 8)
    assert [s.id for s in short_stages(stages)] == ["s4", "s5", "s6", "s7"]
