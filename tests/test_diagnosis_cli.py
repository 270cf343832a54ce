"""``servelab diagnose``: what it refuses, in one line, and where it keeps its result."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO
from tests.fixtures.runlab import wait_for
from tests.fixtures.tui import SHARED_LOGS, TuiFolder

NGRAM_SERVE = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"


def diagnose(folder: TuiFolder, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servelab.tui.cli", "--dir", str(folder.folder), "diagnose", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def test_a_run_that_does_not_speculate_is_refused_in_one_line(tui_folder: TuiFolder) -> None:
    run_id = tui_folder.replay("tiny-cpu-vllm-baseline", NGRAM_SERVE, hold_s=30)
    done = diagnose(tui_folder, run_id)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [f"servelab: run {run_id} does not speculate ([speculative] method = \"none\"): nothing to diagnose"]
    assert not (tui_folder.workdir / "runs" / run_id / "diagnosis.json").exists()


def test_an_ended_run_is_refused_in_one_line(tui_folder: TuiFolder) -> None:
    run_id = tui_folder.replay("tiny-cpu-vllm-ngram", NGRAM_SERVE)
    wait_for((tui_folder.workdir / "runs" / run_id / "exit_code").exists, 30)
    done = diagnose(tui_folder, run_id, "--json")
    assert done.returncode == 1 and done.stdout == ""
    assert "is not running" in done.stderr and "diagnose a live server" in done.stderr
    assert "Traceback" not in done.stderr
