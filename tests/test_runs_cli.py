"""``servelab launch/runs/status/logs/stop/cleanup`` as an operator types them (real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from servelab.tui.cli import main
from tests.fixtures.runlab import Lab, is_running, wait_for
from tests.fixtures.sshd import SshServer


def servelab(lab: Lab, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servelab.tui.cli", "--dir", str(lab.folder), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def test_launch_status_logs_stop(lab: Lab) -> None:
    lab.experiment("cli", env={"STUB_CHILDREN": "1", "STUB_INTERVAL": "0.05"})
    out = servelab(lab, "launch", "cli", "--json", "--skip-preflight")
    assert out.returncode == 0, out.stderr
    launched = json.loads(out.stdout)
    run_id = launched["run"]
    assert launched["pid"] and Path(launched["log_path"]).is_file()

    listed = json.loads(servelab(lab, "runs", "--json").stdout)
    assert [r["run"] for r in listed["runs"]] == [run_id] and listed["runs"][0]["status"] == "running"

    status = json.loads(servelab(lab, "status", run_id, "--json").stdout)
    assert {k: status[k] for k in ("pid", "alive", "exit_code", "host", "log_path")} == {
        "pid": launched["pid"], "alive": True, "exit_code": None, "host": "local", "log_path": launched["log_path"],
    }
    assert "state" in status  # the log analyzer's fields

    wait_for(lambda: b"line 00000002" in Path(launched["log_path"]).read_bytes())
    logs = servelab(lab, "logs", run_id)
    assert logs.returncode == 0 and logs.stdout.startswith("STUB argv ") and "line 00000002" in logs.stdout

    stopped = servelab(lab, "stop", run_id, "--grace", "2")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert not is_running(launched["pid"])
    after = json.loads(servelab(lab, "status", run_id, "--json").stdout)
    assert (after["alive"], after["status"], after["exit_code"]) == (False, "stopped", 143)

    # the experiment's name stands for its latest run, and says so; a name that is neither is one line
    by_name = servelab(lab, "status", "cli", "--json")
    assert by_name.returncode == 0 and json.loads(by_name.stdout)["run"] == run_id
    assert by_name.stderr.strip() == f"servelab: cli is an experiment: its latest run is {run_id}"
    logs = servelab(lab, "logs", "cli")
    assert logs.returncode == 0 and "line 00000002" in logs.stdout
    neither = servelab(lab, "status", "nope")
    assert neither.returncode == 1 and neither.stderr.count("\n") == 1 and "not a run id" in neither.stderr


def test_launch_follow_prints_the_whole_log_and_errors_filter(lab: Lab) -> None:
    lab.experiment("loud", env={"STUB_LINES": "20", "STUB_EXIT": "1"}, engine_args={"note": "RuntimeError: boom"})
    out = servelab(lab, "launch", "loud", "--follow", "--skip-preflight")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    run_id = lines[0]
    assert [x for x in lines if x.startswith("line ")] == [f"line {i:08d}" for i in range(20)] and lines[-1] == "STUB done"
    errors = servelab(lab, "logs", run_id, "--errors")
    assert errors.returncode == 0
    assert errors.stdout.splitlines() == [lines[1]]  # only the argv line carries an error text


def test_cleanup_shows_then_needs_confirmation(lab: Lab) -> None:
    lab.experiment("orphans", env={"STUB_LINES": "2", "STUB_CHILDREN": "1"})
    run_id = json.loads(servelab(lab, "launch", "orphans", "--json", "--skip-preflight").stdout)["run"]
    assert servelab(lab, "logs", run_id, "--follow").returncode == 0
    plan = servelab(lab, "cleanup")
    assert plan.returncode == 1
    assert "will remove:" in plan.stdout and run_id in plan.stdout
    assert plan.stderr.strip() == "servelab: not removing anything without confirmation: run again with --yes"
    done = servelab(lab, "cleanup", "--yes")
    assert done.returncode == 0 and "removed 1 item(s)" in done.stdout
    assert servelab(lab, "cleanup").stdout.strip() == "nothing to clean up"


@pytest.mark.parametrize(
    "args, message",
    [
        (["status", "nope"], "servelab: not a run id: 'nope'"),
        (["stop", "cli-20200101-000000-abcd"], "servelab: no run cli-20200101-000000-abcd on any host"),
        (["launch", "missing"], "servelab: no experiment named 'missing'"),
        (["runs", "--host", "mars"], "servelab: no host named 'mars'"),
    ],
)
def test_bad_input_is_one_line(lab: Lab, args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dir", str(lab.folder), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


@pytest.mark.ssh
def test_launch_on_another_host_over_ssh(ssh_config: SshServer, lab: Lab) -> None:
    env = {"SERVELAB_SSH_CONFIG": str(ssh_config.ssh_config)}
    lab.experiment("remote", env={"STUB_LINES": "5"})
    out = servelab(lab, "launch", "remote", "--host", "box", "--json", "--skip-preflight", env=env)
    assert out.returncode == 0, out.stderr
    launched = json.loads(out.stdout)
    assert launched["host"] == "box" and launched["run_dir"].startswith(str(lab.remote_workdir))
    logs = servelab(lab, "logs", launched["run"], "--follow", env=env)
    assert "line 00000004" in logs.stdout
    listed = json.loads(servelab(lab, "runs", "--json", env=env).stdout)
    assert [(r["run"], r["host"], r["status"]) for r in listed["runs"]] == [(launched["run"], "box", "exited")]


def test_runs_never_breaks_a_run_id_piped_or_on_a_narrow_terminal(lab: Lab) -> None:
    name = "a-rather-long-experiment-name-for-the-table"
    lab.experiment(name, env={"STUB_LINES": "1"})
    run_id = json.loads(servelab(lab, "launch", name, "--json", "--skip-preflight").stdout)["run"]
    piped = servelab(lab, "runs", env={"COLUMNS": "80"})  # a pipe: whole rows whatever the width
    assert piped.returncode == 0, piped.stderr
    header, row = piped.stdout.splitlines()
    assert header.split() == ["RUN", "HOST", "STATUS", "ENGINE", "PID", "ENDED", "PORT", "STARTED", "BY"]
    assert row.split()[0] == run_id and len(row) > 80
    assert [line for line in piped.stdout.splitlines() if run_id in line] == [row]  # grep finds the whole row

    from servelab.tui.commands.runs import runs_table

    cells = [[run_id, "local", "running", "loading", "12345", "-", "8000", "2026-12-01T07:30:00+00:00", "alice@box"]]
    narrow = runs_table(cells, terminal=True, width=80)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert any(run_id in line for line in narrow.splitlines())  # the id stays on one line; other columns fold
    assert json.loads(servelab(lab, "runs", "--json").stdout)["runs"][0]["run"] == run_id
