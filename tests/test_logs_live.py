"""The one live analysis (engines/logs/live.py): offsets, overlap, truncation, exit, one per run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.hosts.local import LocalHost
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.logs.files import analyze_bytes
from servelab.engines.logs.live import LiveAnalyses, LiveAnalysis, current_stage
from servelab.engines.runs.manager import Runs
from servelab.engines.runs.state import RunState
from tests.fixtures.runlab import wait_for
from tests.fixtures.tui import TuiFolder
from servelab.tui.cli import main

LOGS = Path(__file__).resolve().parent / "data" / "logs"
KV_TOO_SMALL = LOGS / "vllm-cpu-kv-cache-too-small.log"
GOOD = LOGS / "vllm-cpu-good-ngram-serve.log"


async def test_overlapping_and_repeated_chunks_are_analysed_once() -> None:
    data = GOOD.read_bytes()
    live = LiveAnalysis("vllm")
    third = len(data) // 3
    assert await live.feed_at(0, data[: 2 * third]) is not None
    assert await live.feed_at(0, data[:third]) is None  # a second reader's older bytes: nothing new
    assert await live.feed_at(len(data), b"x") is None  # a gap: never fed out of order
    await live.feed_at(third, data[third:])  # overlaps what was fed: only the tail counts
    assert live.offset == len(data)
    ended = await live.end(0)
    whole = analyze_bytes(data, "vllm")
    assert ended.lines == whole.lines and ended.state is whole.state
    assert [(s.name, s.status) for s in ended.stages] == [(s.name, s.status) for s in whole.stages]


async def test_catch_up_reads_new_bytes_restarts_on_truncation_and_ends_as_a_crash(tmp_path: Path) -> None:
    host = LocalHost(HostConfig(name="local"))
    log = tmp_path / "engine.log"
    data = KV_TOO_SMALL.read_bytes()
    log.write_bytes(data[:4000])
    live = LiveAnalysis("vllm")
    first = await live.catch_up(host, str(log), alive=True, exit_code=None)
    assert live.offset == 4000 and first.state is not RunState.CRASHED
    log.write_bytes(data)
    done = await live.catch_up(host, str(log), alive=False, exit_code=1)
    assert live.offset == len(data) and live.final
    assert done.state is RunState.CRASHED and done.root_cause is not None
    stage = current_stage(done)
    assert stage is not None and (stage.name, stage.status) == ("kv_cache", "failed")
    assert await live.catch_up(host, str(log), alive=False, exit_code=1) is done  # ended: not read again
    log.write_bytes(b"line a\nline b\n")
    shrunk = await live.catch_up(host, str(log), alive=False, exit_code=0)
    assert shrunk.lines == 2 and live.offset == 14


async def test_a_stream_feeding_the_analysis_keeps_polls_from_reading_the_log(tmp_path: Path) -> None:
    host = LocalHost(HostConfig(name="local"))
    log = tmp_path / "engine.log"
    log.write_bytes(GOOD.read_bytes())
    live = LiveAnalysis("vllm")
    live.streams = 1  # the run screen follows this log and feeds it
    polled = await live.catch_up(host, str(log), alive=True, exit_code=None)
    assert live.offset == 0 and polled.lines == 0


def test_one_live_analysis_per_run() -> None:
    reg = LiveAnalyses()
    a = reg.get("r-20260101-000000-abcd", "vllm")
    assert reg.get("r-20260101-000000-abcd", "vllm") is a and "r-20260101-000000-abcd" in reg
    assert reg.get("s-20260101-000000-abcd", "vllm") is not a
    reg.drop("r-20260101-000000-abcd")
    assert reg.get("r-20260101-000000-abcd", "vllm") is not a


async def test_status_of_an_ended_run_is_one_shared_analysis(tui_folder: TuiFolder) -> None:
    run_id = tui_folder.replay("tiny-cpu-vllm-baseline", KV_TOO_SMALL, exit_code=1)
    runs = Runs(load_catalog(tui_folder.folder))
    deadline = time.monotonic() + 30
    while (st := await runs.status(run_id)).alive and time.monotonic() < deadline:
        time.sleep(0.1)
    assert st.analysis is not None and st.analysis.state is RunState.CRASHED
    assert (await runs.status(run_id)).analysis is st.analysis  # the same analysis, not read again


def test_status_prints_the_stage_the_run_is_in(tui_folder: TuiFolder, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = tui_folder.replay("tiny-cpu-vllm-baseline", KV_TOO_SMALL, exit_code=1)
    exit_code = tui_folder.workdir / "runs" / run_id / "exit_code"
    wait_for(exit_code.exists, 30)
    assert main(["--dir", str(tui_folder.folder), "status", run_id]) == 0
    out = capsys.readouterr().out
    assert "state     crashed" in out
    assert "stage     kv_cache (failed" in out


async def test_an_analysis_published_by_a_worker_is_shared_then_adopted_at_the_end(tmp_path: Path) -> None:
    host = LocalHost(HostConfig(name="local"))
    log = tmp_path / "engine.log"
    data = KV_TOO_SMALL.read_bytes()
    log.write_bytes(data)
    worker = analyze_bytes(data, "vllm")  # what the run screen's ingest worker computed
    live = LiveAnalysis("vllm")
    live.streams = 1
    live.publish(worker, len(data))
    assert await live.feed_at(0, data) is None  # the worker owns the analysis while it streams
    assert await live.catch_up(host, str(log), alive=True, exit_code=None) is worker
    live.streams = 0
    assert await live.catch_up(host, str(log), alive=False, exit_code=1) is worker and live.final
    other = LiveAnalysis("vllm")
    other.publish(analyze_bytes(data[:4000], "vllm"), 4000)  # the screen closed half-way: read it again here
    again = await other.catch_up(host, str(log), alive=False, exit_code=1)
    assert again.state is RunState.CRASHED and other.offset == len(data)
