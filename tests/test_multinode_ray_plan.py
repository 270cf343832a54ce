"""The Ray node processes servelab plans (engines/nodes/ray.py), and the node check run for real."""

from __future__ import annotations

import socket
import subprocess
import sys

from servelab.engines.adapters.exchange import NodeAddress, NodeTarget
from servelab.engines.helpers import helper_script
from servelab.engines.nodes.ray import RAY_CHECK_SCRIPT, RAY_UP_LINE, client_port, ray_node_process


def target(rank: int, address: str) -> NodeTarget:
    return NodeTarget(NodeAddress(rank, f"gpu-{rank}", address), "/env/bin/python", "/m")


def test_each_node_gets_its_own_temp_dir_and_the_head_its_own_client_port() -> None:
    head, worker = ray_node_process(target(0, "10.0.0.1"), "10.0.0.1", 7000), ray_node_process(target(1, "10.0.0.2"), "10.0.0.1", 7000)
    h, w = head.spec.argv, worker.spec.argv
    assert h[h.index("--ray-client-server-port") + 1] == "7001" == str(client_port(7000))  # never Ray's shared default 10001
    assert h[h.index("--temp-dir") + 1] != w[w.index("--temp-dir") + 1]
    assert all(len(a[a.index("--temp-dir") + 1]) < 40 for a in (h, w))  # Ray's socket paths must stay < 108 bytes
    assert "--address" not in h and w[w.index("--address") + 1] == "10.0.0.1:7000"
    assert head.check is not None and head.check[-3:] == ["10.0.0.1", "7000", "7001"]
    assert worker.check is not None and worker.check[-1] == "10.0.0.2"  # a worker binds no fixed port
    assert head.up_line == worker.up_line == RAY_UP_LINE
    assert head.spec.env["VLLM_HOST_IP"] == "10.0.0.1" and worker.spec.env["VLLM_HOST_IP"] == "10.0.0.2"


def test_the_check_names_a_taken_port_and_a_missing_ray_in_one_line() -> None:
    """Run for real with this venv's Python (which has no Ray): the import fails first; a port held
    here is named when the import is skipped the way an installed Ray passes it."""
    ray_check = helper_script(RAY_CHECK_SCRIPT).source.decode()  # what the node runs
    done = subprocess.run([sys.executable, "-c", ray_check, "127.0.0.1"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and done.stderr.strip() == f"ray is not importable by {sys.executable}: No module named 'ray'"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        code = ray_check.replace("    import ray\n", "    import json as ray\n    ray.__version__ = 'x'\n")
        done = subprocess.run([sys.executable, "-c", code, "127.0.0.1", str(port)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1, done
    assert done.stderr.strip().startswith(f"port {port} on 127.0.0.1 is taken (Address already in use): another Ray cluster"), done.stderr
