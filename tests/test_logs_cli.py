"""`servelab analyze LOG [--engine] [--json]`: the post-mortem command, in process and as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED_LOGS
from servelab.tui.cli import main

DATA = Path(__file__).resolve().parent / "data" / "logs"
REPO = Path(__file__).resolve().parent.parent


def test_json_post_mortem_of_a_recorded_crash(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(DATA / "vllm-cpu-memory-too-high.log"), "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["engine"] == "vllm" and js["state"] == "crashed" and js["was_ready"] is False
    assert js["root_cause"]["exception"] == "ValueError" and js["root_cause"]["process"] == "Worker"
    assert js["root_cause"]["line"] == 61
    assert "VLLM_CPU_KVCACHE_SPACE" in js["hint"]
    kv = next(s for s in js["stages"] if s["name"] == "kv_cache")
    assert kv["status"] == "failed"
    assert js["spec_decode"] is None


def test_human_post_mortem(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log")]) == 0
    out = capsys.readouterr().out
    assert "state exited (was ready)" in out
    assert "weights      done" in out and "1/1" in out
    assert "root cause: none" in out
    assert "acceptance 67.4%, mean acceptance length 3.23" in out


def test_engine_is_guessed_or_given(capsys: pytest.CaptureFixture[str]) -> None:
    log = str(SHARED_LOGS / "sglang-eagle3-sigquit-scheduler-exception-5448.log")
    assert main(["analyze", log, "--json"]) == 0
    guessed = json.loads(capsys.readouterr().out)
    assert guessed["engine"] == "sglang" and guessed["root_cause"]["process"] == "TP3"
    assert main(["analyze", log, "--json", "--engine", "vllm"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"] == "vllm"


@pytest.mark.parametrize("target", ["/nonexistent/engine.log", "DIR"])
def test_bad_path_is_one_line(target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path) if target == "DIR" else target
    assert main(["analyze", path]) == 1
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith("servelab: ")


def test_unknown_engine_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(DATA / "vllm-cpu-bad-flag.log"), "--engine", "tgi"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err and "Traceback" not in err


def test_binary_garbage_is_analyzed_end_to_end(tmp_path: Path) -> None:
    """The real command in a child process, on bytes that are no log at all."""
    junk = tmp_path / "junk.log"
    junk.write_bytes(bytes(range(256)) * 64 + b"\xff\xfe\r\r\n\x1b[31m")
    proc = subprocess.run([sys.executable, "-m", "servelab", "analyze", str(junk), "--json"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] in ("starting", "crashed")
