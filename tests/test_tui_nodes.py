"""The dashboard shows a multi-node run as one run (Textual's pilot): a stage row per node or rank,
one merged log with node tags filtered by ``v``, one root cause naming the node, the group as one
row of the runs list; and a group launched, probed and stopped from the dashboard.

The first test replays the real recorded SGLang ``--nnodes 2`` logs as two real runs (runctl, one
folder per host); the second starts the StubEngine on ``local`` and on ``box`` over the real sshd.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from servelab.engines.nodes.run import GROUP_JSON, MultiNodeRecord, NodeRun, node_run_id
from servelab.engines.runrecords import new_run_id
from servelab.engines.runstate import RunState
from tests.fixtures.runlab import Lab
from tests.fixtures.sshd import SshServer
from tests.fixtures.stub_nodes import stub_group
from tests.fixtures.tui import TuiFolder, pilot_wait, screen_text
from servelab.tui.app import ServelabApp
from servelab.tui.screens.confirm import ConfirmScreen
from servelab.tui.screens.experiments import ExperimentsScreen
from servelab.tui.routes import run_screen_for
from servelab.tui.screens.nodes_run import NodesRunScreen
from servelab.tui.screens.preflight import PreflightScreen
from servelab.tui.screens.runs import RunsScreen
from servelab.tui.widgets.line_index import display_text
from servelab.tui.widgets.log_view import LogPanel

LOGS = Path(__file__).parent / "data" / "logs" / "multinode"


def log_lines(path: Path) -> list[str]:
    parts = path.read_bytes().decode("utf-8", "replace").split("\n")
    return [p.rstrip("\r") for p in (parts[:-1] if parts[-1] == "" else parts)]


def shown_lines(screen: NodesRunScreen) -> list[str]:
    index = screen.query_one(LogPanel).index
    return [index.text(i) for i in range(index.line_count)]


async def test_a_two_node_sglang_run_is_one_run_with_rank_rows_node_filter_and_the_first_failure(tui_folder: TuiFolder, tmp_path: Path) -> None:
    """The head (TP0, on local) is up and serving; the worker (TP1, on another host's folder) dies of
    its gloo link, exit code 1. Opened from the worker's own run id."""
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

    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(160, 48)) as pilot:
        await app.push_screen(run_screen_for(n1))
        screen = app.screen
        assert isinstance(screen, NodesRunScreen)
        await pilot_wait(pilot, lambda: "ROOT CAUSE node 1 (blackwell, worker) failed first: RuntimeError" in screen_text(app))
        await pilot_wait(pilot, lambda: len(shown_lines(screen)) == len(n0_lines) + len(n1_lines))
        text = screen_text(app)
        assert "n0 local TP0" in text and "n1 blackwell TP1" in text and " CRASHED " in text
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
