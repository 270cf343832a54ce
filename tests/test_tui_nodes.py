"""The dashboard shows a multi-node run as one run (Textual's pilot): a stage row per node or rank,
one merged log with node tags filtered by ``v``, one root cause naming the node, the group as one
row of the runs list; and a group launched, probed and stopped from the dashboard.

The first test replays the real recorded SGLang ``--nnodes 2`` logs as two real runs (runctl, one
folder per host); the second starts the StubEngine on ``local`` and on ``box`` over the real sshd.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servelab.engines.nodes.run import GROUP_JSON, MultiNodeRecord, NodeRun, node_run_id
from servelab.engines.runs.records import new_run_id
from servelab.engines.runs.state import RunState
from servelab.tui.widgets.gpu_rows import GpuRows
from tests.fixtures.gpus import RECORDED_PID, fake_smi
from tests.fixtures.runlab import Lab, wait_for
from tests.fixtures.sshd import SshServer
from tests.fixtures.stub_nodes import stub_group
from tests.fixtures.tui import TuiFolder, pilot_wait, screen_text
from servelab.tui.app import ServelabApp
from servelab.tui.screens.confirm import ConfirmScreen
from servelab.tui.screens.experiments import ExperimentsScreen
from servelab.tui.routes import run_screen_for
from servelab.tui.screens import nodes_run
from servelab.tui.screens.nodes_run import NodesRunScreen
from servelab.tui.screens.preflight import PreflightScreen
from servelab.tui.screens.runs import RunsScreen
from servelab.tui.widgets.line_index import display_text
from servelab.tui.widgets.log_view import LogPanel

LOGS = Path(__file__).parent / "data" / "logs" / "multinode"
__all__ = ["fake_smi"]


def log_lines(path: Path) -> list[str]:
    parts = path.read_bytes().decode("utf-8", "replace").split("\n")
    return [p.rstrip("\r") for p in (parts[:-1] if parts[-1] == "" else parts)]


def shown_lines(screen: NodesRunScreen) -> list[str]:
    index = screen.query_one(LogPanel).index
    return [index.text(i) for i in range(index.line_count)]


async def test_a_two_node_sglang_run_is_one_run_with_rank_rows_node_filter_and_the_first_failure(
    tui_folder: TuiFolder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head (TP0, on local) is up and serving; the worker (TP1, on another host's folder) dies of
    its gloo link, exit code 1. Opened from the worker's own run id, once the worker has ended.

    The status poll runs once here (its period is an hour): the stage rows must follow the log as it
    is read, not the poll, which comes before the first byte. A CI run under load once showed the root
    cause and every line with rows still reading "n0 local" for a poll's time."""
    monkeypatch.setattr(nodes_run, "STATUS_SECONDS", 3600.0)
    group = new_run_id("tiny-sglang-2n")
    n0, n1 = node_run_id(group, 0, 0, "server"), node_run_id(group, 1, 0, "worker")
    head_log = tmp_path / "n0-until-ready.log"  # the head's real log up to its ready line: it is still serving
    lines = (LOGS / "sglang-cpu-2n-tp2-serve-n0.log").read_bytes().split(b"\n")
    ready = next(i for i, ln in enumerate(lines) if b"The server is fired up" in ln)
    head_log.write_bytes(b"\n".join(lines[: ready + 1]) + b"\n")
    worker_log = LOGS / "sglang-cpu-2n-tp2-serve-n1.log"
    tui_folder.replay("tiny-sglang-2n", head_log, hold_s=300, run_id=n0)
    tui_folder.replay("tiny-sglang-2n", worker_log, exit_code=1, run_id=n1, host="blackwell")
    record = MultiNodeRecord(group, "tiny-sglang-2n", "sglang", "native", [NodeRun(0, "local", "server", n0, True), NodeRun(1, "blackwell", "worker", n1, False)])
    (tui_folder.workdir / "runs" / n0 / GROUP_JSON).write_text(json.dumps(record.to_json()))
    n0_lines, n1_lines = log_lines(head_log), log_lines(worker_log)
    worker_exit = tui_folder.workdir.parent / "work-blackwell" / "runs" / n1 / "exit_code"
    wait_for(worker_exit.exists, 60)  # the one poll must find the worker ended
    assert worker_exit.read_text().strip() == "1"

    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(160, 48)) as pilot:
        await app.push_screen(run_screen_for(n1))
        screen = app.screen
        assert isinstance(screen, NodesRunScreen)
        await pilot_wait(pilot, lambda: "ROOT CAUSE node 1 (blackwell, worker) failed first: RuntimeError" in screen_text(app))
        await pilot_wait(pilot, lambda: len(shown_lines(screen)) == len(n0_lines) + len(n1_lines))
        # the stage rows read the very bytes the lines came from, not the last status poll (every 2 s)
        assert screen.view is not None and [lv.lane.label for lv in screen.view.lanes] == ["n0 local TP0", "n1 blackwell TP1"]
        await pilot_wait(pilot, lambda: all(s in screen_text(app) for s in ("n0 local TP0", "n1 blackwell TP1", " CRASHED ")))
        assert screen.view is not None and screen.view.state is RunState.CRASHED
        head_lane, worker_lane = screen.view.lanes
        assert head_lane.stage is not None and head_lane.stage.name == "ready"
        assert worker_lane.stage is not None and worker_lane.analysis is not None
        assert worker_lane.analysis.stage("kv_cache").status == "done"  # TP1's own stages, not rank 0's
        merged = shown_lines(screen)
        assert [ln for ln in merged if ln.startswith("[n1 blackwell] ")] == [display_text(f"[n1 blackwell] {ln}".encode()) for ln in n1_lines]

        for label, want in (("n0 local only", n0_lines), ("n1 blackwell only", n1_lines)):
            await pilot.press("v")
            await pilot_wait(pilot, lambda label=label, want=want: f"log: {label}" in screen_text(app) and len(shown_lines(screen)) == len(want))
            tag = label.removesuffix(" only")
            assert shown_lines(screen) == [display_text(f"[{tag}] {ln}".encode()) for ln in want]
        await pilot.press("v")
        await pilot_wait(pilot, lambda: "log: all nodes" in screen_text(app) and len(shown_lines(screen)) == len(merged))

        await pilot.press("question_mark")
        await pilot_wait(pilot, lambda: "run.node-filter" in screen_text(app) and "Node filter" in screen_text(app))
        await pilot.press("escape")
        await pilot_wait(pilot, lambda: isinstance(app.screen, NodesRunScreen))

        await pilot.press("R")  # the runs list: the group as one row, not its node runs
        await pilot_wait(pilot, lambda: isinstance(app.screen, RunsScreen) and group in screen_text(app))
        await pilot_wait(pilot, lambda: "local + blackwell (2 nodes)" in screen_text(app))
        assert n1 not in screen_text(app) and n0 not in screen_text(app)
        runs_screen = app.screen
        assert isinstance(runs_screen, RunsScreen)
        assert [r.id for r in runs_screen.rows if r.nodes] == [group]
        await pilot.press("enter")
        await pilot_wait(pilot, lambda: isinstance(app.screen, NodesRunScreen) and app.screen.record is not None and app.screen.record.id == group)


async def test_a_multi_node_run_shows_each_nodes_gpus_and_a_cpu_node_says_no_gpu_once(
    tui_folder: TuiFolder, fake_smi: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two recorded SGLang nodes replayed as real runs: the head's host (local) has the H200 of the
    recording (FakeNvidiaSmi), its run's process holding 10 GiB; the worker's host (blackwell) is a
    CPU host (its nvidia-smi finds no driver). Each node's label heads its rows; the CPU node is one
    "no GPU" line, its host asked once."""
    group = new_run_id("tiny-sglang-2n")
    n0, n1 = node_run_id(group, 0, 0, "server"), node_run_id(group, 1, 0, "worker")
    tui_folder.replay("tiny-sglang-2n", LOGS / "sglang-cpu-2n-tp2-serve-n0.log", hold_s=300, run_id=n0)
    tui_folder.replay("tiny-sglang-2n", LOGS / "sglang-cpu-2n-tp2-serve-n1.log", hold_s=300, run_id=n1, host="blackwell")
    record = MultiNodeRecord(group, "tiny-sglang-2n", "sglang", "native", [NodeRun(0, "local", "server", n0, True), NodeRun(1, "blackwell", "worker", n1, False)])
    (tui_folder.workdir / "runs" / n0 / GROUP_JSON).write_text(json.dumps(record.to_json()))
    no_driver = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    cpu_python = tmp_path / "cpu-python"  # blackwell's python: its nvidia-smi finds no driver
    cpu_python.write_text(f"#!/bin/sh\nFAKE_SMI_FAIL={shlex.quote(no_driver)} exec {shlex.quote(sys.executable)} \"$@\"\n")
    cpu_python.chmod(0o755)
    hosts = tui_folder.folder / "hosts.toml"
    head, _, tail = hosts.read_text().partition("[hosts.blackwell]")
    hosts.write_text(head + "[hosts.blackwell]" + tail.replace(json.dumps(sys.executable), json.dumps(str(cpu_python)), 1))
    head_pid = json.loads((tui_folder.workdir / "runs" / n0 / "run.json").read_text())["pid"]
    fake_smi("held-gpus.csv", "held-apps.csv", {RECORDED_PID: head_pid})
    monkeypatch.setenv("FAKE_SMI_CALLS", str(tmp_path / "smi-calls"))

    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(160, 48)) as pilot:
        await app.push_screen(run_screen_for(group, group=True))
        screen = app.screen
        assert isinstance(screen, NodesRunScreen)
        rows = screen.query_one(GpuRows)
        await pilot_wait(pilot, lambda: screen.gpus is not None and len(screen.gpus) == 2 and screen.gpus[0].gpus.fed >= 3, timeout=40)
        await pilot_wait(pilot, lambda: "no GPU" in rows._shown)
        lines = rows._shown.splitlines()
        assert lines[0] == "n0 local (server)"
        assert lines[1].startswith("  GPU 0 NVIDIA H200 [") and "10861/143771 MiB" in lines[1]
        assert lines[2] == f"    pid {head_pid} python3 10852 MiB (this run)"
        assert [ln for ln in lines if "no GPU" in ln] == [f"n1 blackwell (worker): no GPU ({no_driver})"]
        worker = screen.gpus[1].gpus
        assert worker.done and worker.fed == 1  # asked once, not sampled again
        assert "no GPU" in screen_text(app) and "(this run)" in screen_text(app)
        loop = next(int(ln.split()[0]) for ln in (tmp_path / "smi-calls").read_text().splitlines() if "-lms" in ln)
        app.pop_screen()  # ends the head host's sampler (a stream left open at exit leaves its transport to the collector)
        await pilot_wait(pilot, lambda: not Path(f"/proc/{loop}").exists(), timeout=10)

@pytest.mark.ssh
async def test_a_stub_group_launched_probed_and_stopped_from_the_dashboard(ssh_config: SshServer, lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``l`` asks first, naming every node, and goes through MultiNodeRuns (its preflight refuses the
    stub on every node, in its own words); ``X`` starts it without preflight; ``P`` probes the
    head's server through the group id; ``s`` stops every node."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SERVELAB_STATE_DIR", str(tmp_path / "state"))
    stub_group(lab, "stub-2n", probe='[probe]\nprompts = "builtin:mixed"\nmax_tokens = 4\nrepeats = 1\nwarmup = 0\n')
    app = ServelabApp(lab.folder)
    app.watch_runs = False
    async with app.run_test(size=(160, 48)) as pilot:
        experiments = app.screen
        assert isinstance(experiments, ExperimentsScreen)
        await pilot_wait(pilot, lambda: "stub-2n" in screen_text(app))
        experiments.select_row(str(lab.folder / "stub-2n.toml"))
        await pilot.pause()
        await pilot.press("l")
        await pilot_wait(pilot, lambda: isinstance(app.screen, ConfirmScreen) and "Launch stub-2n on 2 nodes (vllm, native)?" in screen_text(app))
        text = screen_text(app)
        assert "n0 local (127.0.0.1): server" in text and "n1 box (" in text and "): headless" in text, text
        await pilot.press("y")
        await pilot_wait(pilot, lambda: isinstance(app.screen, PreflightScreen) and "launch refused" in app.screen.outcome)
        assert isinstance(app.screen, PreflightScreen)
        assert "node 0 (local) failed preflight, nothing started" in app.screen.outcome
        await pilot_wait(pilot, lambda: "node 1 (box)" in screen_text(app))
        assert not (lab.workdir / "runs").exists() or not any((lab.workdir / "runs").iterdir())
        await pilot.press("escape")
        await pilot_wait(pilot, lambda: isinstance(app.screen, ExperimentsScreen))

        await pilot.press("X")
        await pilot_wait(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await pilot_wait(pilot, lambda: isinstance(app.screen, NodesRunScreen) and app.screen.record is not None, timeout=60)
        screen = app.screen
        assert isinstance(screen, NodesRunScreen) and screen.record is not None
        group = screen.record.id
        await pilot_wait(pilot, lambda: "n0 local" in screen_text(app) and "n1 box" in screen_text(app) and "2/2 node processes alive" in screen_text(app))
        await pilot_wait(pilot, lambda: any(ln.startswith("[n1 box] STUB argv") and "--headless" in ln for ln in shown_lines(screen)))

        await pilot.press("P")
        await pilot_wait(pilot, lambda: group in app.probe_results or group in app.probe_errors, timeout=90)
        assert group not in app.probe_errors, app.probe_errors
        assert [n["host"] for n in app.probe_results[group]["identity"]["nodes"]] == ["local", "box"]
        await pilot_wait(pilot, lambda: "output tok/s" in screen_text(app) or "tok/s" in screen_text(app))

        await pilot.press("s")
        await pilot_wait(pilot, lambda: isinstance(app.screen, ConfirmScreen) and f"Stop every node of {group}?" in screen_text(app))
        await pilot.press("y")
        await pilot_wait(pilot, lambda: isinstance(app.screen, NodesRunScreen) and screen.ended, timeout=60)
        assert screen.status is not None
        assert {n.status.record.status for n in screen.status.nodes if n.status is not None} == {RunState.STOPPED}
    await asyncio.sleep(0)
