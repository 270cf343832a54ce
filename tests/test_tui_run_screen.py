"""The run screen and the run watcher, on real runs replaying the shared engine logs."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from tests.fixtures.tui import SHARED_LOGS
from tests.fixtures.tui import TuiFolder
from tests.fixtures.tui import open_run_screen, screen_text, settle, wait_for, watched_run_screen
from servelab.tui.app import ServelabApp
from servelab.engines.runs import watch
from servelab.tui.screens.run import with_history
from servelab.tui.widgets.run_view_model import StageRow
from servelab.tui.widgets.log_view import LogPanel

WHITELIST_CRASH = SHARED_LOGS / "vllm-eagle3-whitelist-gemma3-32765.log"
NGRAM_SERVE = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"


@pytest.fixture
def fast_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "LIST_SECONDS", 0.3)


async def test_crash_pins_root_cause_and_hint_and_rings(tui_folder: TuiFolder, fast_watch: None) -> None:
    async with watched_run_screen(tui_folder, "kimi-k25-vllm-eagle3", WHITELIST_CRASH, (100, 30), rate=50, exit_code=1, hold_s=5.0) as (app, pilot, screen, bells):
        await wait_for(pilot, lambda: screen.view.state == "crashed" and "exit code 1" in screen.liveness)
        # the state, then the frame that shows it (the header may read CRASHED by the exit code a frame
        # before the root cause panel is laid out: engines.runs.history.headline)
        await wait_for(pilot, lambda: "CRASHED" in screen_text(app) and "ROOT CAUSE" in screen_text(app))
        text = screen_text(app)
        assert "ROOT CAUSE" in text and "ValueError" in text
        assert "HINT" in text and "whitelist" in text.lower()
        assert "exit code 1" in text
        # The log shows the traceback lines too, and `e` jumps to the first error.
        await pilot.press("e")
        await pilot.pause()
        view = screen.query_one(LogPanel).view
        assert view.cursor_line == screen.index.first_error()
        await wait_for(pilot, lambda: bool(bells))
        assert any("crashed" in n.title for n in app._notifications)


async def test_ready_run_shows_stage_bars_and_announces_ready(tui_folder: TuiFolder, fast_watch: None) -> None:
    async with watched_run_screen(tui_folder, "tiny-cpu-vllm-ngram", NGRAM_SERVE, (100, 40), rate=400, exit_code=0, hold_s=6.0) as (app, pilot, screen, bells):
        await wait_for(pilot, lambda: screen.index.line_count >= NGRAM_SERVE.read_bytes().count(b"\n"))
        # the header says whether the process lives: alive while it serves, shutting down once its log
        # shows the recorded stop (the replay holds the process for hold_s), then its exit code
        lives = ("alive", "shutting down", "exit code")
        await wait_for(pilot, lambda: any(w in screen.liveness for w in lives))
        # the analysis, then the frames that draw it: wait for one frame that shows all asserted below
        frames: list[str] = []

        def drawn() -> bool:
            frames.append(screen_text(app))
            text = frames[-1]
            return all(w in text for w in ("weights", "KV cache", "ready", "✓")) and any(w in text for w in lives)

        await wait_for(pilot, drawn)
        text = frames[-1]
        for label in ("weights", "KV cache", "ready"):
            assert label in text
        assert "✓" in text  # done stages are marked
        assert any(w in text for w in lives)
        await wait_for(pilot, lambda: bool(bells))
        assert any(n.title == "run ready" for n in app._notifications)


async def test_readonly_run_screen_hides_stop_and_probe(tui_folder: TuiFolder) -> None:
    run_id = tui_folder.replay("tiny-cpu-vllm-baseline", NGRAM_SERVE, rate=0, exit_code=0, hold_s=5.0)
    app = ServelabApp(tui_folder.folder, readonly=True)
    app.watch_runs = False
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = await open_run_screen(app, pilot, run_id)
        await wait_for(pilot, lambda: "alive" in screen.liveness or "exit" in screen.liveness)
        await wait_for(pilot, lambda: "Search" in screen_text(app).splitlines()[-1])  # the footer drawn for this screen
        footer = screen_text(app).splitlines()[-1]
        assert "Stop" not in footer and "Probe" not in footer
        assert "Search" in footer


def test_history_gives_a_running_stage_an_eta_and_leaves_others_alone() -> None:
    running = StageRow("weights", "weights", status="running")
    eta = with_history(running, 600.0, running_for_s=120.0)
    assert eta.eta_s == 480.0 and "earlier loads took 10m00s" in eta.detail
    assert with_history(StageRow("weights", "weights", status="done"), 600.0) == StageRow("weights", "weights", status="done")
    own = StageRow("weights", "weights", status="running", eta_s=30.0)
    assert with_history(own, 600.0).eta_s == 30.0  # the engine's own tqdm ETA wins


def test_old_spool_copies_are_pruned(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import time

    from servelab.tui.widgets.spool import prune_spool

    old, new = tmp_path / "old-run.log", tmp_path / "new-run.log"
    old.write_bytes(b"x")
    new.write_bytes(b"y")
    past = time.time() - 30 * 86400
    os.utime(old, (past, past))
    prune_spool(tmp_path)
    assert not old.exists() and new.exists()


async def test_a_truncated_log_starts_the_view_and_analysis_afresh(tui_folder: TuiFolder) -> None:
    from servelab.engines.runs.records import LOG_NAME

    run_id = tui_folder.replay("tiny-cpu-vllm-baseline", NGRAM_SERVE, rate=0, exit_code=0, hold_s=30.0)
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = await open_run_screen(app, pilot, run_id)
        total = NGRAM_SERVE.read_bytes().count(b"\n")
        await wait_for(pilot, lambda: screen.index.line_count >= total and screen.index.unclassified == 0)
        first_worker = screen.ingest.worker_pid
        log = tui_folder.workdir / "runs" / run_id / LOG_NAME
        log.write_bytes(b"INFO rotated: a new log\nINFO second line\n")  # shorter: truncated in place
        await wait_for(pilot, lambda: screen.index.line_count == 2)
        assert screen.index.text(0) == "INFO rotated: a new log"
        assert screen.ingest.worker_pid != first_worker
        await settle(pilot, lambda: "2 lines" in screen_text(app))  # the count, then the frame that shows it
        assert "2 lines" in screen_text(app)


async def test_a_long_log_shows_its_end_before_it_is_indexed_then_the_whole_log(tui_folder: TuiFolder, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Opening a long run: its last lines are on screen while the log is still being read from byte 0;
    then the view swaps to the whole log (following its end), which agrees with a scan of the file."""
    from servelab.engines.runs.records import LOG_NAME, TAIL_BYTES
    from servelab.tui.widgets.line_index import LineIndex

    from servelab.engines.logs.analyzer import LogAnalyzer
    from servelab.engines.logs.files import guess_engine
    from servelab.engines.adapters.base import get_adapter

    body = NGRAM_SERVE.read_bytes()
    an = LogAnalyzer(get_adapter(guess_engine(body)).grammar)
    an.feed(body)
    if an.stop_line is not None:  # repeat the serving part only: after a stop line the engine's echo folds (#22)
        body = b"".join(body.splitlines(keepends=True)[: an.stop_line - 1])
    data = body * (16 * TAIL_BYTES // len(body)) + b"INFO the very last line of a long log\n"
    source = tmp_path / "long.log"
    source.write_bytes(data)
    total = data.count(b"\n")
    run_id = tui_folder.replay("tiny-cpu-vllm-baseline", source, rate=0, exit_code=0, hold_s=30.0)
    log = tui_folder.workdir / "runs" / run_id / LOG_NAME
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: log.exists() and log.stat().st_size == len(data))
        screen = await open_run_screen(app, pilot, run_id)
        panel = screen.query_one(LogPanel)

        def last_line_shown() -> bool:
            index = panel.view.index
            return index.row_count > 0 and index.text(index.line_at_row(index.row_count - 1)) == "INFO the very last line of a long log"

        while not last_line_shown():
            await asyncio.sleep(0.002)
        indexed_then = screen.index.line_count
        assert indexed_then < total, "the end was drawn only once the whole log was indexed"
        assert panel.view.index is screen.tail and screen.tail is not None
        assert data[screen._tail_origin - 1 : screen._tail_origin] == b"\n"  # the tail starts on a line
        assert "the log's end" in screen_text(app)
        # The whole log, once read: shown in place of the end, still following it, as a full scan has it.
        await wait_for(pilot, lambda: screen.tail is None and screen.index.line_count == total and screen.index.unclassified == 0)
        await settle(pilot, lambda: panel.view.index is screen.index and panel.view.follow and last_line_shown())  # the swap laid out
        assert panel.view.index is screen.index and panel.view.follow and last_line_shown()
        scan = LineIndex(tmp_path / "scan.spool")
        scan.append(data)
        index = screen.index
        assert index.row_count == scan.row_count and index.first_error() == scan.first_error()
        for row in (0, 1, scan.row_count // 3, scan.row_count // 2, scan.row_count - 2, scan.row_count - 1):
            assert index.text(index.line_at_row(row)) == scan.text(scan.line_at_row(row))
        assert "the log's end" not in screen_text(app) and f"{total} lines" in screen_text(app)
        assert not list((tmp_path / "cache").rglob("*.tail.log"))  # the end's own spool is gone



class _Cycle:
    """Garbage only the collector frees (it refers to itself)."""

    def __init__(self) -> None:
        self.me = self


async def test_cycles_that_died_while_the_heap_was_frozen_are_freed_when_the_run_screen_closes(tui_folder: TuiFolder) -> None:
    """The run screen freezes the heap once its log shows (full collections skip what is alive);
    frozen cycles are never collected, so closing the screen thaws and collects: a cycle alive at
    the freeze and dropped while the screen was open (a removed widget, say) is freed then."""
    run_id = tui_folder.replay("tiny-cpu-vllm-baseline", NGRAM_SERVE, rate=0, exit_code=0, hold_s=5.0)
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        frozen_before = gc.get_freeze_count()
        held = [_Cycle()]
        gone = weakref.ref(held[0])
        screen = await open_run_screen(app, pilot, run_id)
        await wait_for(pilot, lambda: screen.index.line_count > 0 and gc.get_freeze_count() > frozen_before)
        held.clear()
        gc.collect()
        assert gone() is not None  # frozen: the collector does not see it
        await app.action_back()
        await wait_for(pilot, lambda: gone() is None)
