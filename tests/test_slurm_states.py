"""engines/slurm without a cluster: the one state mapping over every Slurm state and reason, the
``scontrol -o`` reader, the job script (run by a real bash: every value reaches the engine as it
was written), and hosts.toml's Slurm checks as ``servelab check`` lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.runs.history import display_state
from servelab.engines.slurm.settings import SlurmSettings
from servelab.engines.logs.files import analyze_file
from servelab.engines.runs.state import RunState
from servelab.engines.slurm.script import render
from servelab.engines.slurm.states import reason_words, view
from servelab.engines.slurm.scontrol import JobState, SlurmJob, parse_pairs
from tests.conftest import REPO

#: A real crash's analysis (what a log that ended in a traceback says).
CRASHED = analyze_file(REPO / "tests" / "data" / "logs" / "vllm-cpu-kv-cache-too-small.log", "vllm")
assert CRASHED.state is RunState.CRASHED

#: A line ``scontrol show job -o`` printed on this machine's Slurm 22.05 (tests/fixtures/slurm.py).
LINE = (
    "JobId=7 JobName=servelab-x UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) "
    "QOS=(null) JobState=PENDING Reason=ReqNodeNotAvail,_UnavailableNodes:n[1-2] Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=00:10:00 TimeMin=N/A SubmitTime=2026-12-03T11:12:43 "
    "EligibleTime=2026-12-03T11:12:43 StartTime=2026-12-03T12:12:45 EndTime=Unknown Partition=lab NodeList=(null) "
    "BatchHost=(null) NumNodes=1 WorkDir=/shared/runs/a b StdOut=/shared/runs/a b/slurm-7.out Power="
)


def job(state: str, reason: str = "None", exit_code: str = "0:0", time_limit: str = "00:10:00") -> SlurmJob:
    return SlurmJob.from_scontrol(
        f"JobId=7 JobName=servelab-x JobState={state} Reason={reason} ExitCode={exit_code} TimeLimit={time_limit} "
        "SubmitTime=2026-12-03T11:00:00 StartTime=2026-12-03T11:05:00 Partition=lab NodeList=n1 BatchHost=n1"
    )


def test_scontrol_line_read_with_spaces_in_values() -> None:
    j = SlurmJob.from_scontrol(LINE)
    assert (j.job_id, j.state, j.partition, j.node_list, j.batch_host) == ("7", JobState.PENDING, "lab", "", "")
    assert j.reason == "ReqNodeNotAvail,_UnavailableNodes:n[1-2]" and j.end_time is None
    assert parse_pairs(LINE)["WorkDir"] == "/shared/runs/a b"
    assert view(j).words == "queued: drained" and view(j).started_at is None  # a pending StartTime is a guess


@pytest.mark.parametrize("state", list(JobState))
@pytest.mark.parametrize("stop_requested", [False, True])
def test_every_state_maps_to_own_words_and_a_consistent_state(state: JobState, stop_requested: bool) -> None:
    v = view(job(state.value, exit_code="1:0" if state is JobState.FAILED else "0:0"), stop_requested=stop_requested)
    assert v.words and v.state is not RunState.LOST  # every Slurm state is known
    assert v.alive == (v.state is RunState.RUNNING)
    assert v.is_queued == (state in {JobState.PENDING, JobState.REQUEUED, JobState.REQUEUE_HOLD, JobState.REQUEUE_FED, JobState.RESV_DEL_HOLD, JobState.CONFIGURING})
    assert (v.started_at is None) == v.is_queued  # the ETA's origin is the job's start, never its submit
    # a crash is the log's to say; what Slurm ended is said as Slurm ended it, whatever the log shows
    crashed = CRASHED
    shown = display_state(v.state, v.exit_code, crashed)
    if v.state.is_scheduler_end or v.is_queued:
        assert shown is v.state
    if state is JobState.CANCELLED:
        assert v.state is (RunState.STOPPED if stop_requested else RunState.CANCELLED)


def test_scheduler_ends_in_their_own_words() -> None:
    words = {s: view(job(s)).words for s in ("TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "CANCELLED")}
    assert words["TIMEOUT"] == "time limit reached (00:10:00)"
    assert "out of memory" in words["OUT_OF_MEMORY"] and "node" in words["NODE_FAIL"] and "preempted" in words["PREEMPTED"]
    assert len(set(words.values())) == len(words)
    states = {s: view(job(s)).state for s in words}
    assert states == {"TIMEOUT": RunState.TIMED_OUT, "OUT_OF_MEMORY": RunState.OUT_OF_MEMORY, "NODE_FAIL": RunState.NODE_FAILED,
                      "PREEMPTED": RunState.PREEMPTED, "CANCELLED": RunState.CANCELLED}
    assert all(s.is_terminal and s.is_scheduler_end for s in states.values())
    assert view(job("FAILED", exit_code="3:0")).words == "ended with exit code 3"
    assert display_state(RunState.EXITED, 3, None) is RunState.CRASHED


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("Resources", "Resources"),
        ("Priority", "Priority (behind higher-priority jobs)"),
        ("ReqNodeNotAvail,_UnavailableNodes:n[1-2]", "drained"),
        ("Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions", "drained"),
        ("Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions", "drained"),  # as scontrol -o gives it
        ("PartitionTimeLimit", "time limit above the partition's"),
        ("QOSMaxJobsPerUserLimit", "QOS limit (QOSMaxJobsPerUserLimit)"),
        ("AssocGrpGRES", "account limit (AssocGrpGRES)"),
        ("JobHeldUser", "held by its user"),
        ("SomethingNew", "SomethingNew"),
    ],
)
def test_pending_reasons(reason: str, words: str) -> None:
    assert reason_words(reason) == words
    assert view(job("PENDING", reason.replace(" ", "_")), queue_position=2).words == f"queued: {words} (position 2)"


text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(text, max_size=4), value=text)
def test_job_script_passes_every_value_as_written(tmp_path: Path, args: list[str], value: str) -> None:
    """Run by bash, the script gives the engine exactly the argv and env it was written with."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    prog = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ['WEIRD'], os.environ['SERVELAB_RUN_ID']]))"
    script = render(SlurmSettings(partition="lab"), run_id="r-1", run_dir=str(run_dir), argv=[sys.executable, "-c", prog, *args], env={"WEIRD": value})
    (run_dir / "engine.log").unlink(missing_ok=True)
    done = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads((run_dir / "engine.log").read_text()) == [args, value, "r-1"]
    assert (run_dir / "exit_code").read_text() == "0\n"


def test_sbatch_lines_from_settings() -> None:
    s = SlurmSettings(partition="gpu", account="lab", qos="high", gpus_per_node=8, time_limit="1-00:00:00", sbatch=["--exclusive"])
    lines = [ln for ln in render(s, run_id="r", run_dir="/shared/r", argv=["python"], env={}).splitlines() if ln.startswith("#SBATCH")]
    assert lines[1:4] == ["#SBATCH --partition=gpu", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1"]
    assert {"#SBATCH --account=lab", "#SBATCH --qos=high", "#SBATCH --gpus-per-node=8", "#SBATCH --time=1-00:00:00", "#SBATCH --exclusive"} <= set(lines)
    with pytest.raises(ValueError):
        render(s, run_id="r", run_dir="/shared/a b", argv=["python"], env={})


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('kind = "slurm"\n', 'kind = "slurm" needs a [hosts.NAME.slurm] table'),
        ('[hosts.c.slurm]\npartition = "p"\n', 'needs kind = "slurm"'),
        ('kind = "slurm"\n[hosts.c.slurm]\npartition = "p"\ntime_limit = "an hour"\n', "is not a Slurm time"),
        ('kind = "slurm"\n[hosts.c.slurm]\npartition = "p"\nsbatch = ["#SBATCH --exclusive"]\n', "is not one option"),
        ('kind = "slurm"\n[hosts.c.slurm]\npartition = "p q"\n', "partition"),
        ('kind = "slurm"\n[hosts.c.slurm]\npartition = "p"\nnodes = 2\n', "nodes"),
    ],
)
def test_check_reports_slurm_settings_in_one_line(tmp_path: Path, table: str, message: str) -> None:
    (tmp_path / "hosts.toml").write_text("[hosts.c]\n" + table)
    problems = load_catalog(tmp_path).folder_problems
    assert problems and message in str(problems[0]) and "\n" not in str(problems[0])
    done = subprocess.run([sys.executable, "-m", "servelab", "--dir", str(tmp_path), "check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr and message in done.stdout


def test_a_slurm_host_among_hosts_and_campaigns_on_slurm_are_refused_in_one_line(tmp_path: Path) -> None:
    """Refused by servelab check: a one-host campaign's supervisor would start engines on the login
    node itself (a fleet campaign, ``hosts = ["c"]``, submits each load as a job instead), and a run per host would bypass Slurm's choice of nodes (a multi-node
    experiment on Slurm is ``host = "c"`` with ``[multinode] nodes``: tests/test_slurm_srun.py)."""
    (tmp_path / "hosts.toml").write_text('[hosts.c]\nkind = "slurm"\nworkdir = "/shared"\n[hosts.c.slurm]\npartition = "p"\n')
    (tmp_path / "one.toml").write_text('engine = "vllm"\nhost = "c"\nmodel = "m"\nport = 8000\n')
    (tmp_path / "two.toml").write_text(
        'engine = "sglang"\nhosts = ["c", "local"]\nmodel = "m"\nport = 8000\n[parallel]\ntensor = 2\n[multinode]\nbackend = "native"\n'
    )
    (tmp_path / "campaigns").mkdir()
    (tmp_path / "campaigns" / "sweep.toml").write_text('name = "sweep"\nbase = ["one"]\n[axes]\n"probe.max_tokens" = [16, 32]\n')
    done = subprocess.run([sys.executable, "-m", "servelab", "--dir", str(tmp_path), "check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert 'c is a Slurm host: Slurm picks its nodes (write host = "c" and [multinode] nodes = N)' in done.stdout
    assert 'one runs on Slurm host c: a campaign runs there as a fleet (hosts = ["c"]: each load a batch job)' in done.stdout, done.stdout
