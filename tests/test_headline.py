"""A run's header and its shown state (engines/runs/history.py): one word from one look, so the header
never says a terminal state "alive", and a stop servelab asked for reads "stopped" with its signal
whatever the engine printed or exited with while dying (#22)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from servelab.engines.adapters.base import get_adapter
from servelab.engines.helpers.runctl import stop_signal_of
from servelab.engines.runs.history import display_state, headline, shown_state
from servelab.engines.logs.analyzer import LogAnalyzer
from servelab.engines.runs.records import RunRecord, RunStatus
from servelab.engines.runs.state import RunState

DATA = Path(__file__).parent / "data" / "logs"
#: A real SGLang 0.5.23 start, serve and stop (SIGTERM): its scheduler "crashed with exit code -15"
#: and "Sleeping 5 seconds before crash diagnostics" after the stop, then kill_process_tree (-9).
SGLANG_STOP = DATA / "sglang-cpu-good-serve.log"


def status(record_status: RunState, *, alive: bool, exit_code: int | None, stop_signal: str | None = None) -> RunStatus:
    rec = RunRecord(id="x-20261204-120000-abcd", experiment="x", engine="sglang", host="local", argv=[], env={}, port=1,
                    model="m", run_dir="/r", log_path="/r/engine.log", pid=4242, status=record_status, exit_code=exit_code,
                    stop_signal=stop_signal)
    return RunStatus(record=rec, alive=alive, exit_code=exit_code)


@pytest.mark.parametrize("record_status", list(RunState))
def test_no_header_says_a_terminal_state_alive(record_status: RunState) -> None:
    for log_state, alive, code, signal, blamed in itertools.product(RunState, (True, False), (None, 0, 1, -9), (None, "SIGTERM", "SIGKILL"), (False, True)):
        head = headline(status(record_status, alive=alive, exit_code=code, stop_signal=signal), log_state, blamed=blamed)
        assert not (head.state.is_terminal and "alive" in head.words), (record_status, log_state, alive, code, signal, head)
        if alive:
            assert "exit code" not in head.words and "stopped" not in head.words


def test_the_header_while_a_stop_is_under_way_and_after_it() -> None:
    # the log already says it shut down while its process still dies
    dying = headline(status(RunState.RUNNING, alive=True, exit_code=None), RunState.EXITED)
    assert (dying.state, dying.words) == (RunState.EXITED, "shutting down · pid 4242")
    # gone: the signal servelab sent, not the exit code the engine died with
    done = headline(status(RunState.STOPPED, alive=False, exit_code=-9, stop_signal="SIGTERM"), RunState.CRASHED)
    assert (done.state, done.words) == (RunState.STOPPED, "stopped · SIGTERM")
    killed = headline(status(RunState.STOPPED, alive=False, exit_code=-9, stop_signal="SIGKILL"), RunState.EXITED)
    assert (killed.state, killed.words) == (RunState.STOPPED, "stopped · SIGKILL")
    # an engine that failed before the stop (its log named the cause) stays crashed
    assert shown_state(RunState.STOPPED, -9, RunState.CRASHED, blamed=True) is RunState.CRASHED
    # not stopped by servelab: a non-zero exit is a crash, as before
    crash = headline(status(RunState.EXITED, alive=False, exit_code=1), RunState.READY)
    assert (crash.state, crash.words) == (RunState.CRASHED, "exited · exit code 1")


@pytest.mark.parametrize(("data", "signal"), [(b"SIGTERM 1733300000.5\n", "SIGTERM"), (b"SIGKILL 1.0\n", "SIGKILL"), (b"1733300000.500000\n", "SIGTERM"), (b"", "SIGTERM")])
def test_the_stop_file_names_its_signal(data: bytes, signal: str) -> None:
    """Files written before the signal was recorded (a bare time; Slurm's empty one) stand for SIGTERM."""
    assert stop_signal_of(data) == signal


def test_a_recorded_sglang_stop_reads_stopped_with_its_signal_through_the_analyzer() -> None:
    """SGLang's own shutdown noise after "SIGTERM received" is the stop's echo: no root cause, and the
    run (exit code -9 from its kill_process_tree) reads stopped · SIGTERM."""
    data = SGLANG_STOP.read_bytes()
    assert b"crashed with exit code -15" in data and b"Sleeping 5 seconds before crash diagnostics" in data
    an = LogAnalyzer(get_adapter("sglang").grammar)
    an.feed(data)
    an.finish()
    an.mark_exited(-9)
    analysis = an.snapshot()
    assert analysis.root_cause is None and analysis.state is not RunState.CRASHED and analysis.was_ready
    assert display_state(RunState.STOPPED, -9, analysis) is RunState.STOPPED
    head = headline(status(RunState.STOPPED, alive=False, exit_code=-9, stop_signal=stop_signal_of(b"SIGTERM 1.0\n")), analysis.state, blamed=analysis.root_cause is not None)
    assert (head.state, head.words) == (RunState.STOPPED, "stopped · SIGTERM")


def test_a_stop_of_a_silent_dying_engine_is_not_a_crash() -> None:
    """SIGTERM while loading: SGLang prints nothing about it and dies by its own SIGKILL (-9). The
    analyzer may call a silent -9 a crash; a stop servelab asked for still reads stopped."""
    an = LogAnalyzer(get_adapter("sglang").grammar)
    an.feed((DATA / "sglang-cpu-sigterm-while-loading.log").read_bytes())
    an.finish()
    an.mark_exited(-9)
    analysis = an.snapshot()
    assert analysis.root_cause is None
    assert display_state(RunState.STOPPED, -9, analysis) is RunState.STOPPED
    assert display_state(RunState.EXITED, -9, analysis) is RunState.CRASHED  # the same death, not asked for
