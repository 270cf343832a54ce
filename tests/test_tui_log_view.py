"""LogView / LogPanel keys on a real shared log: search, n/N, filter, follow and pause, wrap, fold."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from textual.app import App, ComposeResult
from textual.pilot import Pilot

from tests.fixtures.tui import SHARED_LOGS
from servelab.tui.widgets.line_index import LineIndex
from servelab.tui.widgets.log_view import LogPanel, LogView, compile_search

NGRAM_LOG = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"


class LogApp(App[None]):
    def __init__(self, index: LineIndex) -> None:
        super().__init__()
        self.index = index

    def compose(self) -> ComposeResult:
        yield LogPanel(self.index)

    def on_mount(self) -> None:
        self.query_one(LogView).focus()


@asynccontextmanager
async def ngram_log_app(tmp_path: Path) -> AsyncIterator[tuple[LogApp, Pilot[None], LineIndex, LogPanel]]:
    """A 100x20 LogApp showing the n-gram log, its first frame drawn: (app, pilot, index, panel)."""
    index = LineIndex(tmp_path / "spool.log")
    app = LogApp(index)
    async with app.run_test(size=(100, 20)) as pilot:
        panel = app.query_one(LogPanel)
        panel.lines_added(index.append(NGRAM_LOG.read_bytes()))
        await pilot.pause()
        yield app, pilot, index, panel


def visible(app: LogApp) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def status(app: LogApp) -> str:
    return str(app.query_one("#log-status").content)


async def test_follow_pause_marker_and_resume(tmp_path: Path) -> None:
    async with ngram_log_app(tmp_path) as (app, pilot, index, panel):
        view = panel.view
        assert view.follow and view.scroll_offset.y == view.max_scroll_y > 0
        await pilot.press("k")  # any move up pauses
        await pilot.pause()
        assert not view.follow
        panel.lines_added(index.append(b"INFO one\nINFO two\nINFO three\n"))
        await pilot.pause()
        assert "+3 new lines" in status(app)
        assert "INFO three" not in visible(app)
        await pilot.press("f")
        await pilot.pause()
        assert view.follow and "new lines" not in status(app)
        assert "INFO three" in visible(app)


async def test_search_highlights_jumps_and_filter_hides(tmp_path: Path) -> None:
    async with ngram_log_app(tmp_path) as (app, pilot, index, panel):
        await pilot.press("slash", *"speculative", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        view = panel.view
        matches = list(index.matches)
        assert len(matches) >= 2 and panel.match_count == len(matches)
        first = view.cursor_line
        assert first in matches
        await pilot.press("n")
        await pilot.pause()
        assert view.cursor_line == matches[(matches.index(first) + 1) % len(matches)]
        await pilot.press("N")
        await pilot.pause()
        assert view.cursor_line == first
        assert "speculative" in visible(app).lower()
        await pilot.press("F")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert index.row_count == len(matches)
        assert all("speculative" in index.text(index.line_at_row(r)).lower() for r in range(index.row_count))
        assert "Resolved architecture" not in visible(app)
        await pilot.press("F")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert index.row_count > len(matches)


async def test_wrap_and_fold_and_first_error(tmp_path: Path) -> None:
    index = LineIndex(tmp_path / "spool.log")
    app = LogApp(index)
    async with app.run_test(size=(60, 20)) as pilot:
        panel = app.query_one(LogPanel)
        long_line = "INFO " + "x" * 150 + " END"
        panel.lines_added(index.append(f"{long_line}\nERROR boom happened\n".encode() + NGRAM_LOG.read_bytes()))
        await pilot.pause()
        rows_folded = index.row_count
        await pilot.press("z")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert index.row_count > rows_folded and "noise shown" in status(app)
        await pilot.press("e")
        await pilot.pause()
        assert panel.view.cursor_line == 1
        assert "ERROR boom happened" in visible(app)
        await pilot.press("g", "w")
        await pilot.pause()
        assert panel.view.wrap
        assert "END" in visible(app)  # the 160-char line wraps into the 60-column view


def test_compile_search_accepts_text_that_is_not_a_regex() -> None:
    pattern = compile_search("shards: [")
    assert pattern is not None and pattern.search("Loading shards: [00:01]")
    assert compile_search("") is None


async def test_following_survives_rows_folded_away_under_it(tmp_path: Path) -> None:
    """A deferred index shows lines unfolded first; their kinds then fold noise and the log
    shrinks under a following view: it must stay at the end, still following."""
    from servelab.engines.logs.classify import LineClassifier

    index = LineIndex(tmp_path / "spool.log", deferred=True)
    app = LogApp(index)
    async with app.run_test(size=(100, 20)) as pilot:
        panel = app.query_one(LogPanel)
        data = NGRAM_LOG.read_bytes()
        panel.lines_added(index.append(data))
        await pilot.pause()
        view = panel.view
        unfolded = index.row_count
        assert view.follow and view.scroll_offset.y == view.max_scroll_y > 0
        panel.lines_added(index.apply(LineClassifier().classify(data[: index.tail_start])))
        await pilot.pause()
        await pilot.pause()
        assert index.row_count < unfolded
        assert view.follow and view.scroll_offset.y == view.max_scroll_y
        assert "following" in status(app)


async def test_plain_lines_draw_as_rich_draws_them(tmp_path: Path) -> None:
    """The direct one-segment strip of a plain line is exactly what rich renders for it."""
    index = LineIndex(tmp_path / "spool.log")
    samples = [
        b"(APIServer pid=41) INFO 11-29 10:25:35 [loggers.py:335] Avg generation throughput: 812.4 tokens/s",
        b"",
        b"tab\tseparated\tcolumns",
        "wide \u6a21\u578b\u52a0\u8f7d and \u00e9\u00e8 accents".encode(),
        b"a bell \x07 and a backspace \x08 in it",
        b"a \x01 control rich keeps, zero cells wide",
        b"\x1b[32mgreen\x1b[0m then plain",
        b"bar  40%|####      | 2/5 [00:01<00:02]\rbar 100%|##########| 5/5 [00:03<00:00]",
        b"ERROR 11-29 10:25:36 [core.py:1] boom",
    ]
    index.append(b"\n".join(samples) + b"\n" + NGRAM_LOG.read_bytes())
    app = LogApp(index)
    async with app.run_test(size=(100, 20)) as pilot:
        await pilot.pause()
        view = app.query_one(LogView)
        lines = range(index.line_count)
        assert any(view._line_strip(i).cell_length > 90 for i in lines)  # the long lines are in
        for line in lines:
            assert view._line_strip(line) == view._rich_strip(line), index.text(line)
            assert view._line_strip(line).cell_length == view._rich_strip(line).cell_length


async def test_swapping_the_end_for_the_whole_log_keeps_the_readers_place_and_search(tmp_path: Path) -> None:
    """A paused reader of a long log's end stays on the same line, cursor and search when the whole log arrives."""
    data = NGRAM_LOG.read_bytes() * 3
    origin = data.index(b"\n", len(data) * 2 // 3) + 1
    tail = LineIndex(tmp_path / "tail.log")
    tail.append(data[origin:])
    whole = LineIndex(tmp_path / "whole.log")
    whole.append(data)
    app = LogApp(tail)
    async with app.run_test(size=(100, 20)) as pilot:
        panel = app.query_one(LogPanel)
        await pilot.pause()
        await pilot.press("slash", *"speculative", "enter")  # a search in the end alone: jumps to its first match
        await app.workers.wait_for_complete()
        await pilot.pause()
        view = panel.view
        assert not view.follow and view.cursor_line is not None
        cursor_text = tail.text(view.cursor_line)
        top_text = tail.text(tail.line_at_row(int(view.scroll_offset.y)))
        panel.swap_index(whole, lambda line: whole.line_at_offset(origin + tail.start_of(line)))
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert panel.index is whole and view.index is whole and not view.follow
        assert view.cursor_line is not None and view.cursor_line > tail.line_count
        assert whole.text(view.cursor_line) == cursor_text
        assert whole.text(whole.line_at_row(int(view.scroll_offset.y))) == top_text
        assert whole.search is not None and whole.search.pattern == "speculative"
        assert panel.match_count == len(whole.matches) > len(tail.matches)
        assert f"{whole.line_count} lines" in status(app)
