"""``servelab probe`` / ``compare`` on bad input: one clean line, never a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servelab.tui.cli import main


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    f = tmp_path / "experiments"
    f.mkdir()
    (f / "hosts.toml").write_text(f"[hosts.local]\npython = {json.dumps(sys.executable)}\nworkdir = {json.dumps(str(tmp_path / 'work'))}\n")
    (f / "tiny.toml").write_text('engine = "vllm"\nmodel = "/nonexistent"\nport = 18999\n')
    return f


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compare", "tiny-20260101-000000-abcd"], "no run tiny-20260101-000000-abcd on any host"),
        (["compare", "not a run id"], "not a run id"),
        (["probe", "tiny-20260101-000000-abcd"], "no run tiny-20260101-000000-abcd on any host"),
    ],
)
def test_unknown_runs_are_one_line(folder: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dir", str(folder), *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_unknown_format_is_refused(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--dir", str(folder), "compare", "x", "--format", "yaml"])
    assert info.value.code == 2
    assert "invalid choice: 'yaml'" in capsys.readouterr().err
