"""The drafter checks inside preflight and launch, and the preflight cache, on the real engine.

A faulty EAGLE-3 drafter for the tiny target (vLLM's default aux ids on 2 layers, the crash of
machine-facts.md) fails the "drafter path" line with its finding before any load, refuses the
launch, and passes once the experiment allows the code. A repeat with the same inputs answers
from the cache and says so; a changed drafter file is checked again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.errors import ServelabError
from servelab.engines.preflight.checks import run_preflight
from servelab.engines.runs.manager import Runs
from tests.conftest import ENGINE_PYTHON, TINY_MODEL, need_engine
from tests.fixtures.drafter_files import tiny_eagle3_config, write_drafter
from servelab.tui.cli import main
from tests.fixtures.ports import free_port

EXP = """\
engine = "vllm"
model = "{model}"
port = {port}

[speculative]
method = "eagle3"
draft_model = "{draft}"
num_tokens = 2
{allow}
[engine_args]
dtype = "float32"
gpu-memory-utilization = 0.05
max-model-len = 512
"""


def folder(tmp_path: Path, python: str, drafter: Path, allow: str = "") -> Path:
    out = tmp_path / "experiments"
    out.mkdir(exist_ok=True)
    (out / "hosts.toml").write_text(f'[hosts.local]\npython = "{python}"\nworkdir = "{tmp_path / "work"}"\n')
    (out / "e3.toml").write_text(EXP.format(model=TINY_MODEL, port=free_port(), draft=drafter, allow=allow))
    return out


def default_ids_drafter(tmp_path: Path) -> Path:
    target = json.loads((TINY_MODEL / "config.json").read_text())
    return write_drafter(tmp_path / "tiny-e3-default-ids", tiny_eagle3_config(target, eagle_config={"use_aux_hidden_state": True}))


@pytest.mark.engine
async def test_a_faulty_drafter_fails_preflight_refuses_launch_and_an_allow_lets_it_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_engine()
    monkeypatch.setenv("SERVELAB_CACHE", str(tmp_path / "cache"))
    drafter = default_ids_drafter(tmp_path)
    catalog = load_catalog(folder(tmp_path, str(ENGINE_PYTHON), drafter))
    report = await run_preflight(catalog, "e3")
    line = report.get("drafter path")
    assert line is not None and not line.ok and line.detail.startswith("aux-layers-out-of-range")
    assert [f.code for f in line.findings if f.severity == "error"] == ["aux-layers-out-of-range"]
    assert report.drafter is not None and "2×128" in report.drafter.findings[0].message
    with pytest.raises(ServelabError, match="aux-layers-out-of-range"):
        await Runs(catalog).launch("e3")
    assert not (tmp_path / "work" / "runs").exists() or not list((tmp_path / "work" / "runs").iterdir())

    allowed = load_catalog(folder(tmp_path, str(ENGINE_PYTHON), drafter, allow='allow = ["aux-layers-out-of-range"]'))
    again = await run_preflight(allowed, "e3")
    line = again.get("drafter path")
    assert line is not None and line.ok and "allowed by the experiment: aux-layers-out-of-range" in line.detail
    assert any(f.code == "aux-layers-out-of-range" for f in line.findings)  # still shown


@pytest.mark.engine
async def test_a_repeat_answers_from_the_cache_and_a_changed_drafter_file_is_checked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_engine()
    monkeypatch.setenv("SERVELAB_CACHE", str(tmp_path / "cache"))
    target = json.loads((TINY_MODEL / "config.json").read_text())
    drafter = write_drafter(tmp_path / "tiny-e3", tiny_eagle3_config(target))
    catalog = load_catalog(folder(tmp_path, str(ENGINE_PYTHON), drafter))
    cold = await run_preflight(catalog, "e3")
    args = cold.get("engine arguments")
    assert args is not None and not args.cached, cold.summary()
    warm = await run_preflight(catalog, "e3")
    args2, versions = warm.get("engine arguments"), warm.get("engine versions")
    assert args2 is not None and versions is not None
    assert args2.cached and "cached" in args2.detail and args2.ok == args.ok
    assert versions.cached and warm.seconds < cold.seconds
    if args.ok:  # only passing answers are kept; a changed drafter config is a new key
        cfg = json.loads((drafter / "config.json").read_text())
        (drafter / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 1e-5}))
        third = await run_preflight(catalog, "e3")
        assert not third.get("engine arguments").cached  # type: ignore[union-attr]


def test_the_cli_prints_findings_as_json_and_fails_on_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    need_engine()
    drafter = default_ids_drafter(tmp_path)
    exp = folder(tmp_path, str(ENGINE_PYTHON), drafter)
    code = main(["--dir", str(exp), "drafter", str(drafter), "--target", str(TINY_MODEL), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and set(doc) == {"findings"}
    first = doc["findings"][0]
    assert set(first) == {"code", "severity", "message", "evidence", "fix"} and first["code"] == "aux-layers-out-of-range"
    code = main(["--dir", str(exp), "drafter", str(drafter), "--target", str(TINY_MODEL), "--method", "draft_model"])
    out = capsys.readouterr().out
    assert code == 1 and "method-architecture-mismatch" in out and "evidence:" in out and "fix:" in out


def test_the_cli_says_one_line_for_a_folder_without_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    need_engine()
    exp = folder(tmp_path, str(ENGINE_PYTHON), tmp_path)
    code = main(["--dir", str(exp), "drafter", str(tmp_path / "nothing"), "--target", str(TINY_MODEL)])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err == f"servelab: {tmp_path / 'nothing'} has no config.json"


def test_an_unknown_code_in_allow_is_a_definition_error(tmp_path: Path) -> None:
    exp = folder(tmp_path, str(ENGINE_PYTHON), tmp_path, allow='allow = ["aux-layers-off"]')
    problems = load_catalog(exp).problems()
    assert len(problems) == 1 and "aux-layers-off" in str(problems[0]) and "e3.toml" in str(problems[0])
