"""LogIngest: the worker process that classifies and analyses a spooled log, on real logs."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servelab.engines.logs.files import analyze_bytes
from tests.fixtures.tui import SHARED_LOGS
from servelab.tui.widgets.line_index import LineIndex
from servelab.engines.logs.ingest import SLICE_ITEMS, SeriesWindows, pack_analysis, unpack_analysis
from servelab.tui.widgets.log_ingest import IngestUpdate, LogIngest

NGRAM_LOG = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"
CRASH_LOG = SHARED_LOGS / "vllm-eagle3-whitelist-gemma3-32765.log"


async def until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def rows_text(index: LineIndex) -> list[str]:
    return [index.text(index.line_at_row(r)) for r in range(index.row_count)]


async def test_worker_classifies_and_analyses_like_the_inline_path(tmp_path: Path) -> None:
    updates: list[IngestUpdate] = []
    ingest = LogIngest(tmp_path / "spool.log", updates.append)
    try:
        data = CRASH_LOG.read_bytes()
        ingest.analyse("vllm")
        for i in range(0, len(data), 5000):
            ingest.append(data[i : i + 5000])
        ingest.mark_exited(1)
        ingest.finish()
        index = ingest.index
        assert index.line_count == data.count(b"\n")  # offsets are there at once
        await until(lambda: index.unclassified == 0 and ingest.analysed_bytes == len(data))
        await until(lambda: any(u.analysis is not None and u.analysis.exit_code == 1 for u in updates))
        inline = LineIndex(tmp_path / "inline.log")
        inline.append(data)
        assert rows_text(index) == rows_text(inline)
        assert index.first_error() == inline.first_error()
        last = [u.analysis for u in updates if u.analysis is not None][-1]
        expected = analyze_bytes(data, "vllm")
        assert last.state == expected.state == "crashed"
        assert last.root_cause == expected.root_cause
        assert sum(u.rows for u in updates) == index.row_count - (1 if index.size > index.tail_start else 0)
        assert all(u.error is None for u in updates)
    finally:
        ingest.close()
    await until(lambda: ingest._proc.poll() is not None)  # closing ends the worker


async def test_updates_are_coalesced_to_a_few_per_second(tmp_path: Path) -> None:
    updates: list[IngestUpdate] = []
    ingest = LogIngest(tmp_path / "spool.log", updates.append)
    try:
        data = NGRAM_LOG.read_bytes()
        for i in range(0, len(data), 200):  # hundreds of small chunks in a burst
            ingest.append(data[i : i + 200])
        await until(lambda: ingest.index.unclassified == 0)
        await until(lambda: not ingest._scheduled)  # every change delivered: no update is still to come
        assert len(data) // 200 > 100 and len(updates) < 20
    finally:
        ingest.close()


async def test_a_dead_worker_is_reported_once_and_lines_are_classified_here(tmp_path: Path) -> None:
    updates: list[IngestUpdate] = []
    ingest = LogIngest(tmp_path / "spool.log", updates.append)
    try:
        ingest.append(b"INFO one\n")
        await until(lambda: ingest.index.unclassified == 0)
        ingest._proc.kill()  # our own worker process
        await until(lambda: any(u.error for u in updates))
        ingest.append(b"ERROR boom happened\nINFO two\n")
        assert ingest.index.unclassified == 0 and ingest.index.first_error() == 1
        await until(lambda: not ingest._scheduled)  # every change delivered: a second error report would be in
        errors = [u.error for u in updates if u.error]
        assert len(errors) == 1 and "classifying lines here" in errors[0]
    finally:
        ingest.close()


def test_an_analysis_crosses_in_slices_and_arrives_whole() -> None:
    """A long throughput series goes as pickled slices (short GIL holds in the UI) and comes back equal."""
    stats = b"".join(
        b"(APIServer pid=41) INFO 11-29 10:25:%02d [loggers.py:335] Engine 000: Avg prompt throughput: %d.0 tokens/s, "
        b"Avg generation throughput: %d.4 tokens/s, Running: 4 reqs, Waiting: 0 reqs, KV cache usage: 3.1%%\n"
        % (i % 60, i % 97, 800 + i % 13) for i in range(3 * SLICE_ITEMS + 7)
    )
    analysis = analyze_bytes(NGRAM_LOG.read_bytes() + stats, "vllm")
    assert len(analysis.throughput_series) > 3 * SLICE_ITEMS
    light, parts = pack_analysis(analysis)
    assert light.throughput_series == [] and len(parts["throughput_series"]) == 4
    assert unpack_analysis(light, parts) == analysis


def test_a_slid_series_reuses_the_items_the_dashboard_unpickled_before() -> None:
    """Two snapshots of a window that slid by 5 points: the middle slices are the same bytes, so the
    second analysis holds the very objects of the first there (none made again), and is still equal."""
    stats = b"".join(
        b"(APIServer pid=41) INFO 11-29 10:25:%02d [loggers.py:335] Engine 000: Avg prompt throughput: %d.0 tokens/s, "
        b"Avg generation throughput: %d.4 tokens/s, Running: 4 reqs, Waiting: 0 reqs, KV cache usage: 3.1%%\n"
        % (i % 60, i % 97, 800 + i % 13) for i in range(4 * SLICE_ITEMS)
    )
    analysis = analyze_bytes(NGRAM_LOG.read_bytes() + stats, "vllm")
    series = analysis.throughput_series
    first = dataclasses.replace(analysis, throughput_series=series[:-10])
    second = dataclasses.replace(analysis, throughput_series=series[5:-5])
    windows = SeriesWindows()
    assert windows.starts(first) == {"throughput_series": 0}
    assert windows.starts(second) == {"throughput_series": 5}
    reuse: dict[bytes, list[Any]] = {}
    got_first = unpack_analysis(*pack_analysis(first, {"throughput_series": 0}), reuse)
    got_second = unpack_analysis(*pack_analysis(second, {"throughput_series": 5}), reuse)
    assert got_first == first and got_second == second
    # position 305 of the first is 300 of the second: in the slice of series positions 256-511 both times
    assert got_second.throughput_series[300] is got_first.throughput_series[305]
    # a list that does not continue the last one starts a new count (equal output, no reuse assumed)
    assert windows.starts(dataclasses.replace(analysis, throughput_series=series[::-1])) == {"throughput_series": 5 + len(second.throughput_series)}
