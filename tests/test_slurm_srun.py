"""A multi-node experiment's job script without a cluster: run by a real bash with fake ``SLURM_*``
variables and fake ``srun``/``scontrol`` (``fake-slurm/``: srun records its argv and starts one task
per node with that task's own ``SLURM_NODEID``/``SLURM_PROCID``/``SLURMD_NODENAME``; scontrol expands
the node list and gives each node's ``NodeAddr``). Each task must run its own rank's command, with
the head's address and its own where the adapter put them, every other value as it was written;
and ``servelab check`` accepts ``[multinode] nodes`` on a Slurm host only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.slurm.settings import SlurmSettings
from servelab.engines.slurm.script import HEAD_TOKEN, NODE_TOKEN, RankCommand, node_log, render
from servelab.engines.adapters.exchange import LaunchSpec

#: The engine's stand-in: prints its argv, a few variables and the task's own Slurm ids as JSON.
RECORDER = (
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'weird': os.environ.get('WEIRD'), 'own': os.environ.get('OWN'), "
    "'run': os.environ['SERVELAB_RUN_ID'], 'nodeid': os.environ['SLURM_NODEID'], 'procid': os.environ['SLURM_PROCID']}))"
)

FAKE_SRUN = r"""#!/bin/bash
# fake srun: records its argv, then runs the command once per node, each task with its own ids
printf '%s\0' "$@" >> "$FAKE_SRUN_LOG"
n=1
while [ $# -gt 0 ]; do
  case "$1" in
    --ntasks=*) n="${1#--ntasks=}"; shift ;;
    --*) shift ;;
    *) break ;;
  esac
done
read -r -a nodes <<< "$FAKE_NODES"
pids=()
for ((i = 0; i < n; i++)); do
  SLURM_NODEID=$i SLURM_PROCID=$i SLURMD_NODENAME="${nodes[$i]}" "$@" &
  pids+=($!)
done
code=0
for p in "${pids[@]}"; do wait "$p" || code=$?; done
exit $code
"""

FAKE_SCONTROL = r"""#!/bin/bash
# fake scontrol: 'show hostnames LIST' -> $FAKE_NODES; 'show node -o NAME' -> its NodeAddr from FAKE_ADDR_<NAME>
if [ "$1 $2" = "show hostnames" ]; then
  for n in $FAKE_NODES; do echo "$n"; done
elif [ "$1 $2 $3" = "show node -o" ]; then
  var="FAKE_ADDR_$4"
  echo "NodeName=$4 Arch=x86_64 NodeAddr=${!var} NodeHostName=box State=ALLOCATED"
fi
"""


def fake_slurm(tmp: Path) -> Path:
    """The folder with the fake ``srun`` and ``scontrol``, to put first on PATH."""
    folder = tmp / "fake-slurm"
    folder.mkdir(exist_ok=True)
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        path = folder / name
        path.write_text(text)
        path.chmod(0o755)
    return folder


def run_job(script: str, tmp: Path, addrs: list[str]) -> tuple[subprocess.CompletedProcess[bytes], list[list[str]]]:
    """The job script under bash as the batch step of a job on ``len(addrs)`` nodes (n1, n2, ...)."""
    nodes = [f"n{i + 1}" for i in range(len(addrs))]
    log = tmp / "srun.argv"
    log.unlink(missing_ok=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLURM")},
        "PATH": f"{fake_slurm(tmp)}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": f"n[1-{len(addrs)}]", "SLURM_JOB_ID": "42", "SLURM_NODEID": "0", "SLURM_PROCID": "0",
        "FAKE_NODES": " ".join(nodes), "FAKE_SRUN_LOG": str(log), **{f"FAKE_ADDR_{n}": a for n, a in zip(nodes, addrs)},
    }
    done = subprocess.run(["bash", "-c", script], capture_output=True, env=env, timeout=60)
    calls = [c.split("\0") for c in log.read_text().split("\0" + "--nodes")] if log.exists() else []
    return done, calls


text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(text, max_size=3), value=text, nodes=st.integers(2, 3), shared=st.booleans())
def test_each_task_runs_its_own_rank_with_the_addresses(tmp_path: Path, args: list[str], value: str, nodes: int, shared: bool) -> None:
    """Every task gets its own rank (from its own SLURM_NODEID, not one expansion in the batch
    script), the head's address (the allocation's first host) and its own where the tokens were,
    and the adapter's shared-address command exactly when it is at the head's address."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    for f in run_dir.glob("engine*.log"):
        f.unlink()
    addrs = ["10.0.0.1"] * nodes if shared else [f"10.0.0.{i + 1}" for i in range(nodes)]

    def spec(rank: int, variant: str) -> LaunchSpec:
        argv = [sys.executable, "-c", RECORDER, *args, "--node-rank", str(rank), f"--init={HEAD_TOKEN}:29500", variant]
        return LaunchSpec(argv, {"WEIRD": value, "OWN": f"ip={NODE_TOKEN}"})

    ranks = [RankCommand(r, spec(r, "own"), spec(r, "shared")) for r in range(nodes)]
    script = render(SlurmSettings(partition="lab"), run_id="r-1", run_dir=str(run_dir), argv=[], env={}, ranks=ranks)
    assert "#SBATCH --nodes=%d" % nodes in script
    done, calls = run_job(script, tmp_path, addrs)
    assert done.returncode == 0, done.stderr
    assert (run_dir / "exit_code").read_text() == "0\n"
    assert len(calls) == 1 and f"--ntasks={nodes}" in calls[0] and "--ntasks-per-node=1" in calls[0]  # one srun, one task per node
    for rank in range(nodes):
        got = json.loads((run_dir / node_log(rank)).read_text())
        variant = "shared" if shared or rank == 0 else "own"  # the head is at the head's address
        assert got["argv"] == [*args, "--node-rank", str(rank), "--init=10.0.0.1:29500", variant]
        assert (got["nodeid"], got["procid"], got["run"]) == (str(rank), str(rank), "r-1")
        assert got["weird"] == value and got["own"] == f"ip={addrs[rank]}"


def test_a_task_without_a_rank_of_the_plan_fails_the_job(tmp_path: Path) -> None:
    """An allocation larger than the plan: the extra task says so and the job fails (nothing guessed)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    one = LaunchSpec([sys.executable, "-c", RECORDER], {})
    script = render(SlurmSettings(partition="lab"), run_id="r-2", run_dir=str(run_dir), argv=[], env={}, ranks=[RankCommand(0, one, one)])
    script = script.replace("--ntasks=1 ", "--ntasks=2 ")
    done, _ = run_job(script, tmp_path, ["10.0.0.1", "10.0.0.2"])
    assert done.returncode == 97 and b"no command for node rank 1" in done.stderr
    assert (run_dir / "exit_code").read_text() == "97\n"


def lab(tmp: Path, python: Path, exp: str) -> Path:
    folder = tmp / "exps"
    folder.mkdir(exist_ok=True)
    (folder / "hosts.toml").write_text(
        f'[hosts.c]\nkind = "slurm"\npython = {json.dumps(str(python))}\nworkdir = {json.dumps(str(tmp / "shared"))}\n'
        '[hosts.c.slurm]\npartition = "lab"\n'
        f'[hosts.plain]\npython = {json.dumps(sys.executable)}\n'
    )
    (folder / "two.toml").write_text(exp)
    return folder


SGLANG_2N = (
    'engine = "sglang"\nhost = "c"\nmodel = "/m"\nport = 8000\n[parallel]\ntensor = 2\n'
    '[multinode]\nbackend = "native"\nport = 29511\nnodes = 2\n[env]\nSGLANG_CPU_OMP_THREADS_BIND = "0|1"\n'
)


@pytest.mark.parametrize("shared", [False, True])
def test_sglang_two_nodes_from_the_adapter(tmp_path: Path, shared: bool) -> None:
    """The SGLang adapter's own node plans through the script: rank k runs ``--node-rank k``, every
    rank dials the head at its NodeAddr, and a worker at the head's address takes --port + 1."""
    python = tmp_path / "fake-python"  # the engine's interpreter: records its argv
    python.write_text(f"#!{sys.executable}\n{RECORDER}\n")
    python.chmod(0o755)
    folder = lab(tmp_path, python, SGLANG_2N)
    done = subprocess.run([sys.executable, "-m", "servelab", "--dir", str(folder), "show", "two", "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    script = json.loads(done.stdout)["slurm_script"]
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1" in script and "#SBATCH --nodes=2" in script
    run_dir = Path(script.split("cd ", 1)[1].split(" ||", 1)[0])
    run_dir.mkdir(parents=True)
    addrs = ["192.168.5.1", "192.168.5.1" if shared else "192.168.5.2"]
    ran, _ = run_job(script, tmp_path, addrs)
    assert ran.returncode == 0, ran.stderr
    head, worker = (json.loads((run_dir / node_log(r)).read_text()) for r in (0, 1))
    for rank, got in enumerate((head, worker)):
        argv = got["argv"]
        assert argv[argv.index("--node-rank") + 1] == str(rank) == got["nodeid"]
        assert argv[argv.index("--dist-init-addr") + 1] == "192.168.5.1:29511"
        assert argv[:2] == ["-m", "sglang.launch_server"]
    def ports(argv: list[str]) -> list[str]:
        return [b for a, b in zip(argv, argv[1:]) if a == "--port"]

    assert ports(head["argv"]) == ["8000"]
    assert ports(worker["argv"])[-1] == ("8001" if shared else "8000")  # SGLang's last --port wins


@pytest.mark.parametrize(
    ("exp", "message"),
    [
        (SGLANG_2N, None),
        (SGLANG_2N.replace('host = "c"', 'host = "plain"'), "plain is not a Slurm host"),
        (SGLANG_2N.replace('"native"', '"ray"'), "only the native backend"),
        (SGLANG_2N.replace("tensor = 2", "tensor = 3"), "does not split evenly over 2 nodes"),
        (SGLANG_2N.replace('host = "c"', 'hosts = ["c", "plain"]').replace("nodes = 2\n", ""), "c is a Slurm host: Slurm picks its nodes"),
        (SGLANG_2N.replace('host = "c"', 'hosts = ["plain", "c"]'), "nodes is for one Slurm host"),
    ],
)
def test_check_multinode_on_slurm(tmp_path: Path, exp: str, message: str | None) -> None:
    folder = lab(tmp_path, Path(sys.executable), exp)
    problems = [str(p) for e in load_catalog(folder).entries for p in e.problems]
    if message is None:
        assert problems == []
    else:
        assert any(message in p for p in problems) and all("\n" not in p for p in problems), problems
    done = subprocess.run([sys.executable, "-m", "servelab", "--dir", str(folder), "check"], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr and done.returncode == (0 if message is None else 1), done.stdout + done.stderr
