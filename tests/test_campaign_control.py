"""The campaign supervisor on the host, driven through engines.campaign.control, with the StubEngine.

Real detached processes, real HTTP and real signals; only the engine is the StubEngine (it serves
/health, /v1/models and streamed chat). The real-engine campaign is in test_campaign_engine.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from servelab.engines.campaign import control
from servelab.engines.campaign.control import CampaignStatus
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.errors import ServelabError
from tests.fixtures.campaignlab import campaign_file, marked, stub_experiment, two_load_campaign
from tests.fixtures.runlab import Lab
from tests.fixtures.ports import free_port


async def _until(lab: Lab, ref: str, done: tuple[str, ...] = ("done", "stopped", "failed", "interrupted"), timeout: float = 120.0) -> CampaignStatus:
    t0 = time.monotonic()
    while True:
        st = await control.status(load_catalog(lab.folder), ref)
        if st.status in done:
            return st
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"campaign still {st.status} after {timeout}s: {st.to_json()}")
        await asyncio.sleep(0.2)


async def test_campaign_runs_every_point_on_the_host_and_cleans_up(lab: Lab) -> None:
    two_load_campaign(lab)
    st = await control.start(load_catalog(lab.folder), "sweep", skip_preflight=True)
    assert st.id.startswith("sweep-") and Path(st.dir) == lab.workdir / "campaigns" / st.id
    assert st.supervisor_alive
    final = await _until(lab, "sweep")
    assert final.status == "done", final.to_json()
    assert [p.status for p in final.points] == ["done"] * 4
    assert [ld.status for ld in final.loads] == ["done", "done"]
    # each load is an ordinary run folder: stopped by the campaign, its processes gone
    run_ids = {ld.run_id for ld in final.loads if ld.run_id}
    assert len(run_ids) == 2
    for rid in run_ids:
        rec = json.loads((lab.workdir / "runs" / rid / "run.json").read_text())
        assert rec["status"] == "stopped" and rec["campaign"] == final.id
    assert marked(run_ids) == []
    # each point's timed records, with /metrics around each repeat
    for p in final.points:
        data = json.loads((Path(final.dir) / str(p.result)).read_text())
        assert len(data["repeats"]) == 2
        rep = data["repeats"][0]
        assert rep["metrics_before"].startswith("# TYPE stub_requests")
        assert len(rep["records"]) > 0 and all(r["error"] is None and r["events"] for r in rep["records"])
    # the supervisor ended; by id or by file name, the same campaign
    assert not final.supervisor_alive
    assert (await control.status(load_catalog(lab.folder), final.id)).id == final.id


async def test_sigkilled_supervisor_resumes_and_skips_finished_points(lab: Lab) -> None:
    two_load_campaign(lab, tokens="0.01")  # 8 tokens x 10 ms per request: each point takes about a second
    st = await control.start(load_catalog(lab.folder), "sweep", skip_preflight=True)
    pid = json.loads((Path(st.dir) / "supervisor.pid").read_text())["pid"]
    t0 = time.monotonic()
    while True:  # kill it once the first point is done and the second runs
        state = json.loads((Path(st.dir) / "state.json").read_text())
        if [p["status"] for p in state["points"].values()][:2] == ["done", "running"]:
            break
        assert time.monotonic() - t0 < 60, state
        await asyncio.sleep(0.05)
    first_result = (Path(st.dir) / "points" / f"{list(state['points'])[0]}.json").read_bytes()
    os.kill(pid, signal.SIGKILL)
    mid = await _until(lab, st.id, done=("interrupted",), timeout=30)  # the kill seen, not a guessed delay
    assert mid.status == "interrupted" and not mid.supervisor_alive
    engine_run = mid.loads[0].run_id
    assert engine_run and marked({engine_run}), "the engine lives on without its supervisor"
    resumed = await control.resume(load_catalog(lab.folder), st.id)
    assert resumed.supervisor_alive
    with pytest.raises(ServelabError, match="still running"):
        await control.resume(load_catalog(lab.folder), st.id)
    final = await _until(lab, st.id)
    assert final.status == "done", final.to_json()
    assert [p.status for p in final.points] == ["done"] * 4
    # the finished point was not run again; the live run of the interrupted load was reused
    assert (Path(st.dir) / "points" / f"{final.points[0].name}.json").read_bytes() == first_result
    assert final.loads[0].run_id == engine_run
    assert marked({ld.run_id for ld in final.loads if ld.run_id}) == []
    with pytest.raises(ServelabError, match="is done"):
        await control.resume(load_catalog(lab.folder), st.id)


async def test_crashed_load_records_its_exit_and_the_queue_moves_on(lab: Lab) -> None:
    port = free_port()
    stub_experiment(lab, "stub-base", port, {})
    stub_experiment(lab, "stub-crash", port, {"STUB_LINES": "3", "STUB_EXIT": "7", "STUB_HTTP": "0"}, ngram=True)
    stub_experiment(lab, "stub-ngram", port, {}, ngram=True)
    campaign_file(lab, "crashy", ["stub-base", "stub-crash", "stub-ngram"], "stub-base", '"probe.concurrency" = [1]')
    await control.start(load_catalog(lab.folder), "crashy", skip_preflight=True)
    final = await _until(lab, "crashy")
    assert final.status == "done"
    by_base = {p.name.split(".")[1]: p for p in final.points}
    assert by_base["stub-crash"].status == "failed" and "exited with code 7" in str(by_base["stub-crash"].error)
    assert final.loads[1].status == "crashed" and final.loads[1].exit_code == 7
    assert by_base["stub-base"].status == "done" and by_base["stub-ngram"].status == "done"  # the rest still ran


async def test_points_of_a_failed_baseline_are_marked_not_run(lab: Lab) -> None:
    port = free_port()
    stub_experiment(lab, "stub-crash", port, {"STUB_LINES": "3", "STUB_EXIT": "7", "STUB_HTTP": "0"})
    stub_experiment(lab, "stub-ngram", port, {}, ngram=True)
    campaign_file(lab, "crashy", ["stub-crash", "stub-ngram"], "stub-crash", '"probe.concurrency" = [1]')
    await control.start(load_catalog(lab.folder), "crashy", skip_preflight=True)
    final = await _until(lab, "crashy")
    assert [p.status for p in final.points] == ["failed", "blocked"]
    assert "baseline point" in str(final.points[1].error)
    assert final.loads[1].run_id is None  # never launched: nothing to measure it against


async def test_engine_dying_mid_point_fails_the_rest_of_its_load(lab: Lab) -> None:
    port = free_port()
    stub_experiment(lab, "stub-dies", port, {"STUB_DIE_AFTER_REQUESTS": "2"})
    campaign_file(lab, "dies", ["stub-dies"], "stub-dies", '"probe.concurrency" = [1, 2]')
    await control.start(load_catalog(lab.folder), "dies", skip_preflight=True)
    final = await _until(lab, "dies")
    assert [p.status for p in final.points] == ["failed", "failed"]
    assert "crashed during point" in str(final.points[1].error)
    assert final.loads[0].status == "crashed"


async def test_preflight_failure_skips_every_point_of_the_load(lab: Lab) -> None:
    two_load_campaign(lab)
    lines: list[str] = []
    await control.start(load_catalog(lab.folder), "sweep", progress=lines.append)
    final = await _until(lab, "sweep")
    assert final.status == "done"
    assert [p.status for p in final.points] == ["skipped"] * 4
    assert all("preflight failed" in str(p.error) and "checks failed" in str(p.error) for p in final.points)
    assert [ld.status for ld in final.loads] == ["skipped", "skipped"]
    assert not (lab.workdir / "runs").exists() or not list((lab.workdir / "runs").iterdir())
    assert any("skipped" in line for line in lines)


async def test_second_campaign_on_the_same_gpus_waits_then_runs(lab: Lab) -> None:
    two_load_campaign(lab, tokens="0.005")
    campaign_file(lab, "again", ["stub-base"], "stub-base", '"probe.concurrency" = [1]')
    first = await control.start(load_catalog(lab.folder), "sweep", skip_preflight=True)
    second = await control.start(load_catalog(lab.folder), "again", skip_preflight=True)
    seen_waiting = False
    while True:
        st = await control.status(load_catalog(lab.folder), second.id)
        seen_waiting = seen_waiting or (st.status == "waiting" and st.waiting_for is not None and st.waiting_for["campaign"] == first.id)
        if st.status == "done":
            break
        await asyncio.sleep(0.1)
    assert seen_waiting, "the second campaign never waited for the first"
    a = await _until(lab, first.id)
    assert a.status == "done" and st.points[0].status == "done"
    starts = {ld.run_id: json.loads((lab.workdir / "runs" / str(ld.run_id) / "run.json").read_text()) for ld in a.loads + st.loads}
    assert all(r["status"] == "stopped" for r in starts.values())  # same port, never refused: they never overlapped


async def test_stop_ends_the_current_run_and_records_stopped(lab: Lab) -> None:
    two_load_campaign(lab, tokens="0.05")
    st = await control.start(load_catalog(lab.folder), "sweep", skip_preflight=True)
    while True:
        mid = await control.status(load_catalog(lab.folder), st.id)
        if any(p.status == "running" for p in mid.points):
            break
        await asyncio.sleep(0.05)
    stopped = await control.stop(load_catalog(lab.folder), st.id)
    assert stopped.status == "stopped" and not stopped.supervisor_alive
    assert "running" not in {p.status for p in stopped.points}
    assert marked({ld.run_id for ld in stopped.loads if ld.run_id}) == []
    again = await control.stop(load_catalog(lab.folder), st.id)  # nothing to stop: no error, same state
    assert again.status == "stopped"


async def test_unknown_campaign_is_one_clear_line(lab: Lab) -> None:
    with pytest.raises(ServelabError, match="no campaign 'nope'"):
        await control.status(load_catalog(lab.folder), "nope")
    two_load_campaign(lab)
    with pytest.raises(ServelabError, match="never started"):
        await control.status(load_catalog(lab.folder), "sweep")


async def test_resume_after_a_reboot_relaunches_the_load_whose_run_is_gone(lab: Lab) -> None:
    two_load_campaign(lab, tokens="0.01")
    st = await control.start(load_catalog(lab.folder), "sweep", skip_preflight=True)
    pid = json.loads((Path(st.dir) / "supervisor.pid").read_text())["pid"]
    t0 = time.monotonic()
    while not any(p["status"] == "running" for p in json.loads((Path(st.dir) / "state.json").read_text())["points"].values()):
        assert time.monotonic() - t0 < 60
        await asyncio.sleep(0.05)
    os.kill(pid, signal.SIGKILL)  # a reboot: the supervisor and the engine are both gone
    mid = await control.status(load_catalog(lab.folder), st.id)
    gone = mid.loads[0].run_id
    assert gone is not None
    await lab.runs().stop(gone, grace=2)
    assert marked({gone}) == []
    await control.resume(load_catalog(lab.folder), st.id)
    final = await _until(lab, st.id)
    assert final.status == "done" and [p.status for p in final.points] == ["done"] * 4
    assert final.loads[0].run_id not in (None, gone)  # launched again
    assert json.loads((lab.workdir / "runs" / gone / "run.json").read_text())["status"] == "stopped"  # the old run kept as it was
