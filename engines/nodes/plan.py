"""Multi-node experiments: one experiment over several hosts, through the engine's own mechanism.

An experiment with ``hosts = ["gpu-a", "gpu-b"]`` (the first is the head) and
``[multinode] backend = "ray" | "native"`` becomes one :class:`NodePlan` per host: the processes
that node runs, in the order the mechanism needs them. The adapters render the engine-specific
part (``EngineAdapter.node_plans``); this module holds the checks and helpers that span hosts
(start order, addresses, rendezvous ports), so no engine is special-cased here. The plan types
(:class:`NodePlan`, :class:`NodeTarget`, ...) live in ``engines/adapters/exchange.py``, which the adapters import too. ``[multinode]`` itself is
:class:`engines.catalog.experiment.MultiNode`.
"""

from __future__ import annotations

from servelab.engines.catalog.experiment import Experiment, split_host_port
from servelab.engines.adapters.exchange import Inexpressible, LaunchSpec, NodePlan, NodeTarget


def start_order(plans: list[NodePlan]) -> list[tuple[int, int]]:
    """``(rank, process index)`` in launch order: every helper daemon first (Ray's head before its
    workers), then the engine processes with the workers before the head, so the head's server
    finds its peers waiting."""
    helpers = [(p.node.rank, i) for p in plans for i, proc in enumerate(p.processes) if proc.role.startswith("ray")]
    engines_ = [(p.node.rank, i) for p in sorted(plans, key=lambda p: -p.node.rank) for i, proc in enumerate(p.processes) if not proc.role.startswith("ray")]
    return helpers + engines_


def ray_cli(python: str) -> str:
    """Ray's console script beside the host's interpreter (``/venv/bin/python`` -> ``/venv/bin/ray``)."""
    head, sep, _ = python.rpartition("/")
    return f"{head}{sep}ray" if sep else "ray"


def with_env(spec: LaunchSpec, extra: dict[str, str], argv_tail: list[str] | None = None) -> LaunchSpec:
    """``spec`` with more environment and flags (the node's own)."""
    return LaunchSpec([*spec.argv, *(argv_tail or [])], {**spec.env, **extra})


def rendezvous_of(exp: Experiment, targets: list[NodeTarget], rank: int) -> tuple[str, int]:
    """``(host, port)`` node ``rank`` dials to join: the head its own address and ``[multinode] port``,
    the other nodes ``[multinode] head_address`` when it is set (its port, else ``port``)."""
    mn = exp.multinode
    assert mn is not None
    if rank == 0 or mn.head_address is None:
        return targets[0].node.address, mn.port
    host, port = split_host_port(mn.head_address)
    return host, mn.port if port is None else port


def host_port(host: str, port: int) -> str:
    """``HOST:PORT``, an IPv6 address in brackets (what ``--dist-init-addr`` and Ray's ``--address`` parse)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def multinode_problems(exp: Experiment, backends: tuple[str, ...], node_flags: tuple[str, ...]) -> list[Inexpressible]:
    """A backend this engine lacks, or ``[engine_args]`` setting a flag servelab sets per node."""
    if exp.multinode is None:
        return []
    out: list[Inexpressible] = []
    if exp.multinode.backend not in backends:
        out.append(Inexpressible("multinode.backend", f"{exp.multinode.backend!r} is not a multi-node mechanism of this engine (it has: {', '.join(backends)})"))
    out.extend(
        Inexpressible(f"engine_args.{key}", "servelab sets this flag on each node of a multi-node experiment")
        for key in exp.engine_args
        if key in node_flags
    )
    if exp.multinode.head_address is not None and exp.multinode.backend != "native":
        out.append(Inexpressible("multinode.head_address", "is for the native backend: Ray workers join the Ray head at its hosts.toml address and ray_port"))
    return out
