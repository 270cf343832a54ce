"""A real SGLang 0.5.23 server on CPU, launched through servelab (tests/fixtures/sglang_server.py, one per session).

In order: readiness and stage bars from the real log, locally and over the real sshd; the probe
(no speculation, so no acceptance fields, and the probe says so); the cross-engine comparison with
the tiny vLLM baseline and its verdict; the remote server's KV cache, cut too small, called not
comparable until its aligned twin serves; no FakeSglKernel stand-in ever called; then stop, over SSH
and locally, with nothing of either run left (scheduler, detokenizer and re-parented children included).
"""

from __future__ import annotations

import asyncio
import os
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.verdict.compare import compare_runs, render
from servelab.engines.runs.history import display_state, headline
from servelab.engines.hosts.registry import close_all
from servelab.engines.runs.records import RunStatus
from servelab.engines.runs.state import RunState
from servelab.engines.probe.artifacts import PROBE_JSON, load_probe, probe_run
from tests.conftest import REPO, SGLANG_PYTHON
from tests.fixtures.ports import free_port
from tests.fixtures.sglang_server import REMOTE_KV_TOKENS, Launched, SglangLab, run_processes, session_members, watch_until_ready

pytestmark = [pytest.mark.engine, pytest.mark.ssh]


def _stage(launched: Launched, name: str) -> str:
    return next(s.status for s in launched.ready.stages if s.name == name)


@pytest.mark.parametrize("where", ["local", "remote"])
def test_launched_detached_it_reaches_ready_with_its_stages_from_the_real_log(sglang_lab: SglangLab, where: str) -> None:
    launched: Launched = getattr(sglang_lab, where)
    snap = launched.ready
    assert snap.state == "ready" and snap.root_cause is None
    for stage in ("process", "weights", "kv_cache", "warmup"):
        assert _stage(launched, stage) == "done", [(s.name, s.status) for s in snap.stages]
    weights = next(s for s in snap.stages if s.name == "weights")
    assert weights.progress is not None and (weights.progress.done, weights.progress.total) == (1, 1)  # "Multi-thread loading shards" bar
    kv = next(s for s in snap.stages if s.name == "kv_cache")
    assert str(REMOTE_KV_TOKENS if where == "remote" else 2048) in kv.detail  # KV cache sized by --max-total-tokens, not from system memory
    print(f"\n{where}: ready {launched.seconds_to_ready:.1f} s after launch")


def test_status_over_ssh_sees_the_remote_server_alive(sglang_lab: SglangLab) -> None:
    async def status() -> tuple[bool, str]:
        runs = sglang_lab.runs(remote=True)
        try:
            st = await runs.status(sglang_lab.remote.run_id)
            return st.alive, str(st.analysis.state if st.analysis else None)
        finally:
            await close_all()

    assert asyncio.run(status()) == (True, "ready")


def test_probe_without_speculation_has_no_acceptance_and_says_so(sglang_lab: SglangLab) -> None:
    run_id = sglang_lab.local.run_id
    cli = subprocess.run(
        [sys.executable, "-m", "servelab.tui.cli", "--dir", str(sglang_lab.folder), "probe", run_id],
        capture_output=True, text=True, cwd=REPO, timeout=600, env={**__import__("os").environ, "SERVELAB_SSH_CONFIG": str(sglang_lab.ssh_config)},
    )
    assert cli.returncode == 0, cli.stderr
    assert "acceptance             not measured: tiny-cpu-sglang-baseline does not speculate" in cli.stdout, cli.stdout
    summary = asyncio.run(_load(sglang_lab, run_id))
    assert summary is not None
    assert summary["identity"]["engine"] == "sglang" and summary["completed"] == summary["num_prompts"]  # per repeat, every prompt answered
    assert summary["output_throughput"] > 0 and summary["median_ttft_ms"] > 0 and summary["median_tpot_ms"] > 0
    assert not any(k.startswith("spec_decode_") for k in summary) and "acceptance_source" not in summary
    # the settings come from the running server, over what its log said, and agree with the experiment's
    ident = summary["identity"]
    assert ident["settings_source"] == "the server's /server_info over its log", ident
    assert {k: ident["resolved_settings"][k] for k in ("kv_cache_tokens", "max_batch", "max_len")} == {
        "kv_cache_tokens": "2048", "max_batch": "4", "max_len": "1024"}, ident["resolved_settings"]
    assert (sglang_lab.workdir / "runs" / run_id / PROBE_JSON).is_file()


async def _load(lab: SglangLab, run_id: str, remote: bool = False) -> dict[str, Any] | None:
    runs = lab.runs(remote)
    try:
        return await load_probe(runs, run_id)
    finally:
        await close_all()


def test_compared_with_the_tiny_vllm_baseline_it_gets_a_cross_engine_verdict(sglang_lab: SglangLab) -> None:
    async def compare() -> str:
        runs = sglang_lab.runs()
        try:
            if await load_probe(runs, sglang_lab.local.run_id) is None:
                await probe_run(runs, sglang_lab.local.run_id)
            await probe_run(runs, sglang_lab.vllm.run_id)
            return render(await compare_runs(runs, [sglang_lab.vllm.run_id, sglang_lab.local.run_id]), "table")
        finally:
            await close_all()

    table = asyncio.run(compare())
    assert "no verdict across engines" not in table, table  # same model, prompts, max_tokens, concurrency
    assert "engines: best configuration is " in table and " is WARRANTED" in table or " is NOT warranted" in table, table
    assert "sglang" in table and "vllm" in table
    print("\n" + table)


async def test_the_dashboard_puts_the_two_engines_side_by_side(sglang_lab: SglangLab, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new user's view: the compare screen on both runs just probed, with the cross-engine verdict."""
    from tests.fixtures.tui import pilot_wait, shown_text
    from servelab.tui.app import ServelabApp
    from servelab.tui.screens.compare import CompareScreen

    monkeypatch.setenv("SERVELAB_SSH_CONFIG", str(sglang_lab.ssh_config))
    app = ServelabApp(sglang_lab.folder, readonly=True)  # watching only: it starts, stops and probes nothing
    app.watch_runs = False
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        await app.push_screen(CompareScreen(run_ids=[sglang_lab.vllm.run_id, sglang_lab.local.run_id]))
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        await pilot_wait(pilot, lambda: screen.comparison is not None, timeout=120)
        await pilot.pause()
        text = shown_text(app)
    assert sglang_lab.vllm.run_id[:20] in text and sglang_lab.local.run_id[:20] in text, text
    assert "sglang" in text and "vllm" in text
    assert "no verdict across engines" not in text
    assert "WARRANTED" in text or "NOT warranted" in text, text


def test_no_fake_sgl_kernel_stand_in_was_ever_called(sglang_lab: SglangLab) -> None:
    """FakeSglKernel's stand-ins write a line to the server log when called; none may be in either log."""
    marker = subprocess.run(
        [str(SGLANG_PYTHON), "-c", "import sgl_kernel\ntry:\n    sgl_kernel.assign_req_to_token_pool_cpu()\nexcept sgl_kernel.FakeSglKernelCalled:\n    pass"],
        capture_output=True, text=True, timeout=60,
    )
    assert marker.stderr.strip() == "FakeSglKernel: sgl_kernel.assign_req_to_token_pool_cpu was called"  # what a call leaves
    for launched in (sglang_lab.local, sglang_lab.remote):
        log = sglang_lab.log(launched).read_text(errors="replace")
        assert "Prefill batch" in log or launched is sglang_lab.remote  # the local one really served
        assert "FakeSglKernel:" not in log


def test_a_kv_cache_too_small_is_not_comparable_until_its_aligned_twin_serves(sglang_lab: SglangLab) -> None:
    """#35 on real servers: the remote SGLang server's KV cache is cut below one request of the longest
    length, so compare against the vLLM baseline is "not comparable", naming the setting and each
    side's tokens (read from the running server's /server_info). ``--align`` writes the twin; launched
    (on a free port, as beside a running original) and probed, compared again: the finding is gone."""
    vllm, small = sglang_lab.vllm.run_id, sglang_lab.remote.run_id
    box = sglang_lab.runs(remote=True)  # its catalog holds the remote definition; the vLLM run is on host local

    async def probed(*run_ids: str) -> None:
        try:
            for run_id in run_ids:
                if await load_probe(box, run_id) is None:
                    await probe_run(box, run_id)
        finally:
            await close_all()

    asyncio.run(probed(vllm, small))
    env = {**os.environ, "SERVELAB_SSH_CONFIG": str(sglang_lab.ssh_config)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "servelab.tui.cli", "--dir", str(sglang_lab.remote_folder), *args],
                              capture_output=True, text=True, cwd=REPO, env=env, stdin=subprocess.DEVNULL, timeout=300)

    before = cli("compare", vllm, small, "--align")
    assert before.returncode == 0, before.stderr
    flat = " ".join(before.stdout.split())  # the verdict's sentence wraps at the terminal's width
    found = re.search(rf"not comparable: KV cache \(tokens\) differs \((\d+) vs {REMOTE_KV_TOKENS}: the tokens the KV cache holds", flat)
    assert found is not None, before.stdout
    unfair = found.group(0)
    assert "WARRANTED" not in before.stdout and "NOT warranted" not in before.stdout  # no speedup verdict on it
    twin_path = sglang_lab.remote_folder / "tiny-cpu-sglang-baseline-aligned.toml"
    assert f"wrote {twin_path}" in before.stderr, before.stderr
    vllm_kv = found.group(1)
    text = twin_path.read_text()
    assert f"max-total-tokens = {vllm_kv}" in text, text
    twin_path.write_text(re.sub(r"(?m)^port = \d+", f"port = {free_port()}", text))  # the original still serves on its port

    box = sglang_lab.runs(remote=True)  # the folder read again: the twin is in it now

    async def launch() -> str:
        try:
            rec = await box.launch("tiny-cpu-sglang-baseline-aligned")
            await asyncio.wait_for(watch_until_ready(box, rec.id, "sglang"), 600)
            await probe_run(box, rec.id)
            return rec.id
        finally:
            await close_all()

    async def stop(run_id: str) -> None:
        try:
            await box.stop(run_id, grace=20)
        finally:
            await close_all()

    twin = asyncio.run(launch())
    try:
        after = cli("compare", vllm, twin)
        assert after.returncode == 0, after.stderr
        flat = " ".join(after.stdout.split())
        assert "not comparable" not in flat and "no verdict across engines" not in flat, after.stdout
        assert " is WARRANTED" in flat or " is NOT warranted" in flat, after.stdout
        assert "the server's /server_info" in flat  # where the twin's settings came from
        summary = asyncio.run(_load(sglang_lab, twin, remote=True))
        assert summary is not None
        got = float(summary["identity"]["resolved_settings"]["kv_cache_tokens"])  # what the twin's server says it holds
        assert abs(got / float(vllm_kv) - 1) <= 0.10, (got, vllm_kv)
        print(f"\n{unfair}\ntwin's KV cache: {got:.0f} tokens (vLLM's {vllm_kv})")
    finally:
        asyncio.run(stop(twin))


def test_stop_ends_the_whole_group_over_ssh_and_locally_with_nothing_left(sglang_lab: SglangLab, monkeypatch: pytest.MonkeyPatch) -> None:
    local, remote = sglang_lab.local.run_id, sglang_lab.remote.run_id
    monkeypatch.setenv("SERVELAB_SSH_CONFIG", str(sglang_lab.ssh_config))  # the dashboard and the CLI list host box too

    async def session() -> int:
        runs = sglang_lab.runs()
        try:
            st = await runs.status(local)
            assert st.alive and st.record.pgid is not None
            return st.record.pgid  # runctl's own session: its id is the run's group id
        finally:
            await close_all()

    sid = asyncio.run(session())
    before = session_members(sid)
    assert {"sglang::scheduler", "sglang::detokenizer"} <= set(before.values()), before  # SGLang's children, by their own names

    stopped: dict[str, tuple[RunStatus, RunStatus]] = {}

    async def stop() -> list[bool]:
        try:
            out = []
            for run_id, remote_run in ((remote, True), (local, False), (sglang_lab.vllm.run_id, False)):
                runs = sglang_lab.runs(remote=remote_run)
                if run_id == local:  # stopped from the dashboard, as an operator does
                    await stop_from_the_dashboard(sglang_lab, local)
                    sglang_lab.stopped.add(run_id)
                    st = await runs.status(run_id)
                else:
                    st = await runs.stop(run_id, grace=20)
                    sglang_lab.stopped.add(run_id)
                stopped[run_id] = (st, await runs.status(run_id))  # and as every view reads it after
                out.append(st.alive)
            return out
        finally:
            await close_all()

    from servelab.engines.helpers.runctl import SHM_OWNED, shm_in_use

    shm_before = set(os.listdir("/dev/shm"))
    assert asyncio.run(stop()) == [False, False, False]
    # #36: nothing of the runs' own left in /dev/shm: no file the three runs were seen holding
    # (shm-owned.json) that no live process holds. Run alone, also no semaphore made since the stop
    # began; beside another pytest-xdist worker, whose engines make and leave their own at the same
    # time, a new file is the runs' only when they were seen holding it.
    owned: set[str] = set()
    for launched in (sglang_lab.local, sglang_lab.remote, sglang_lab.vllm):
        record = sglang_lab.log(launched).parent / SHM_OWNED
        owned |= set(json.loads(record.read_text())) if record.exists() else set()
    made = {f"/dev/shm/{n}" for n in set(os.listdir("/dev/shm")) - shm_before if n.startswith("sem.mp-")}
    suspects = owned if os.environ.get("PYTEST_XDIST_WORKER") else owned | made
    left = {p for p in suspects if os.path.exists(p)} - shm_in_use()
    assert not left, (left, sorted(owned))
    # SGLang's own shutdown path (its adapter's stop plan: leader first) ends it before any SIGKILL
    for run_id in (local, remote):
        assert stopped[run_id][0].record.stop_signal == "SIGTERM", (run_id, stopped[run_id][0].record.stop_signal)
    # #22: a stop reads as a stop, whatever SGLang prints while dying ("scheduler_0 ... crashed with
    # exit code -15", "Sleeping 5 seconds before crash diagnostics") or exits with (its own SIGKILL, -9)
    for run_id, (st, after) in stopped.items():
        analysis = after.analysis
        assert analysis is not None and analysis.root_cause is None, (run_id, analysis)
        head = headline(after, analysis.state, blamed=False)
        print(f"\n{run_id}: exit code {st.exit_code}, header {head.state} · {head.words}, removed {st.cleaned}")
        assert st.status is RunState.STOPPED and st.record.stop_signal in ("SIGTERM", "SIGKILL")
        assert display_state(after.status, after.exit_code, analysis) is RunState.STOPPED
        assert (head.state, head.words) == (RunState.STOPPED, f"stopped · {st.record.stop_signal}")
    owned_file = sglang_lab.log(sglang_lab.local).parent / "shm-owned.json"
    owned = json.loads(owned_file.read_text()) if owned_file.exists() else []
    print(f"local SGLang run held {len(owned)} /dev/shm file(s): {owned}")
    assert not [p for p in owned if Path(p).exists()]  # its own /dev/shm files went with the stop
    # #36: the run stopped from the dashboard reads the same in `runs` and `status` as on its screen
    said = f"stopped · {stopped[local][0].record.stop_signal}"
    listed = _cli(sglang_lab, "runs")
    assert any(local in line and said in line for line in listed.splitlines()), listed
    assert said in _cli(sglang_lab, "status", local)
    assert json.loads(_cli(sglang_lab, "status", local, "--json"))["ended"] == said
    assert run_processes({local, remote, sglang_lab.vllm.run_id}) == []  # none left with the run's marker
    assert session_members(sid) == {}  # nor any in the run's session: scheduler and detokenizer too, re-parented or not
    assert [pid for pid in before if _alive(pid)] == []  # each one seen before the stop is gone


async def stop_from_the_dashboard(sglang_lab: SglangLab, run_id: str) -> None:
    """The runs screen: the run selected, ``s``, ``y``; done when its row reads the stop in the one wording."""
    from servelab.tui.app import ServelabApp
    from servelab.tui.screens.confirm import ConfirmScreen
    from servelab.tui.screens.runs import RunsScreen
    from tests.fixtures.tui import pilot_wait, shown_text

    app = ServelabApp(sglang_lab.folder)
    app.watch_runs = False  # this dashboard stops; it watches nothing else
    async with app.run_test(size=(160, 40)) as pilot:
        await app.push_screen(RunsScreen())
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        await pilot_wait(pilot, lambda: any(r.id == run_id for r in screen.rows), timeout=60)
        screen.select_row(run_id)
        await pilot_wait(pilot, lambda: (row := screen.current_row()) is not None and row.id == run_id)
        await pilot.press("s")
        await pilot_wait(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await pilot_wait(pilot, lambda: any(line.startswith(run_id[:12]) or run_id in line for line in shown_text(app).splitlines()
                                            if "stopped · SIGTERM" in line or "stopped · SIGKILL" in line), timeout=120)


def _cli(sglang_lab: SglangLab, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "servelab.tui.cli", "--dir", str(sglang_lab.folder), *args], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ), stdin=subprocess.DEVNULL, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
