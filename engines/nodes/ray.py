"""The Ray cluster of a ``[multinode] backend = "ray"`` run: one ``ray start --block`` per node.

Each node's Ray daemon is an ordinary servelab node process (started detached by the host's
runctl, in its own session), so its pid, pgid and exit code are recorded and a stop reaches
exactly the processes it started: ``ray stop`` is never run, because it kills every Ray on the
host, including clusters servelab did not start. What keeps this cluster apart from another on
the same host:

- its own ports: the GCS port (``[multinode] ray_port``) and the Ray client server's (the next
  one; Ray's default 10001 would clash with any other head), both checked free on the head
  before anything starts;
- its own temp dir per node (sockets, session logs), short because Ray's Unix socket paths
  must stay under 108 bytes;
- ``VLLM_HOST_IP`` and ``--node-ip-address`` set to the node's own address.

The head's server connects with ``RAY_ADDRESS`` and ``--distributed-executor-backend ray``.
"""

from __future__ import annotations

from servelab.engines.adapters.exchange import LaunchSpec, NodeProcess, NodeTarget
from servelab.engines.nodes.plan import ray_cli

#: What ``ray start`` prints once the node's daemons run (ray/scripts/scripts.py).
RAY_UP_LINE = "Ray runtime started."
#: Seconds a ``ray start`` may take to print it before the launch gives up (~5 s on a quiet host).
RAY_UP_TIMEOUT_S = 120.0

#: The node's check before anything starts (engines/helpers/raycheck.py, run as a host script with
#: ``ADDRESS PORT...``): Ray importable by the engine's interpreter, the head's ports free.
RAY_CHECK_SCRIPT = "raycheck.py"


def ray_temp_dir(ray_port: int, rank: int) -> str:
    """The node's own Ray temp dir, named by the cluster's port (unique per live cluster on a host)."""
    return f"/tmp/servelab-ray-{ray_port}-n{rank}"


def client_port(ray_port: int) -> int:
    """The head's Ray client server port: the one after the GCS port (Ray's default is 10001)."""
    return ray_port + 1 if ray_port < 65535 else ray_port - 1


def ray_env(address: str) -> dict[str, str]:
    """What every process of a Ray node gets: plain, unbuffered output and its own address."""
    return {"PYTHONUNBUFFERED": "1", "NO_COLOR": "1", "VLLM_HOST_IP": address}


def ray_node_process(t: NodeTarget, head: str, ray_port: int) -> NodeProcess:
    """Node ``t``'s Ray daemon: the head (rank 0) with its GCS and client ports, or a worker joining it."""
    rank, addr = t.node.rank, t.node.address
    argv = [ray_cli(t.python), "start", "--block", "--node-ip-address", addr]
    if rank == 0:
        argv += ["--head", "--port", str(ray_port), "--ray-client-server-port", str(client_port(ray_port)), "--include-dashboard", "false"]
        ports = [str(ray_port), str(client_port(ray_port))]
    else:
        argv += ["--address", f"{head}:{ray_port}"]
        ports = []
    argv += ["--temp-dir", ray_temp_dir(ray_port, rank), "--disable-usage-stats"]
    return NodeProcess(
        "ray-head" if rank == 0 else "ray-worker",
        LaunchSpec(argv, ray_env(addr)),
        check=[t.python, addr, *ports],
        check_script=RAY_CHECK_SCRIPT,
        check_label="ray check",
        port=ray_port if rank == 0 else 0,  # a worker's daemon binds only ports Ray picks: none to hold for it
        up_line=RAY_UP_LINE,
        up_timeout_s=RAY_UP_TIMEOUT_S,
    )


def is_ray_daemon(role: str) -> bool:
    """A node's Ray daemon (started before, and stopped after, the engine processes)."""
    return role.startswith("ray")
