"""The list screens' columns at any width (issue #36): whole columns go by priority before any cell
is cut, priority 0 (state, load, acceptance, speedup) never goes, a cut keeps a name's start and end,
and the table fits whenever its floors allow."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from rich.text import Text

from servelab.tui.widgets.list_screen import PADDING, Col, fit_columns, middle_cut

COLS = st.lists(
    st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(3, 12)), st.integers(1, 40)),
    min_size=1, max_size=10,
)


@given(COLS, st.integers(10, 200))
def test_columns_go_by_priority_and_what_stays_fits_when_it_can(spec: list[tuple[int, int | None, int]], available: int) -> None:
    cols = [Col(f"c{i}", f"c{i}", priority=p, shrink=s) for i, (p, s, _) in enumerate(spec)]
    natural = [w for _, _, w in spec]
    shown, widths = fit_columns(cols, natural, available)
    assert shown == sorted(shown) and set(shown) == set(widths)
    assert all(i in shown for i, c in enumerate(cols) if c.priority == 0)  # the state and figures never go
    dropped = [i for i in range(len(cols)) if i not in shown]
    # nothing dropped while a column of a higher priority number stays
    assert all(cols[k].priority <= cols[d].priority for d in dropped for k in shown if cols[k].priority > 0)
    assert all(widths[i] == natural[i] or (cols[i].shrink is not None and cols[i].shrink <= widths[i] < natural[i]) for i in shown)
    total = sum(widths[i] + PADDING for i in shown)
    floor = sum(min(natural[i], cols[i].shrink if cols[i].shrink is not None else natural[i]) + PADDING for i in shown)
    if floor <= available:
        assert total <= available
    if dropped:  # the last column to go went only because the whole cells did not fit without it
        last = min(dropped, key=lambda i: (cols[i].priority, i))
        assert sum(natural[i] + PADDING for i in [*shown, last]) > available
    if sum(natural[i] + PADDING for i in range(len(cols))) <= available:
        assert shown == list(range(len(cols))) and all(widths[i] == natural[i] for i in shown)


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=0, max_size=60), st.integers(3, 40))
def test_a_middle_cut_keeps_the_start_and_the_end(name: str, width: int) -> None:
    out = middle_cut(Text(name, style="bold"), width).plain
    if len(name) <= width:
        assert out == name
    else:
        head, _, tail = out.partition("…")
        assert len(out) == width and name.startswith(head) and name.endswith(tail) and len(head) >= len(tail) - 1


def test_the_experiments_list_at_80_columns_keeps_its_state_and_figures_and_whole_names() -> None:
    from servelab.tui.screens.experiments import COLUMNS

    cells = {"sel": 1, "name": 24, "engine": 6, "host": 12, "spec": 10, "patches": 3, "state": 7, "load": 4, "accept": 12, "speedup": 11, "by": 13}
    shown, widths = fit_columns(COLUMNS, [cells[c.key] for c in COLUMNS], 80 - 2)
    keys = [COLUMNS[i].key for i in shown]
    assert keys == ["sel", "name", "state", "load", "accept", "speedup"]
    assert widths[shown[1]] == 24
