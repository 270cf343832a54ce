"""A multi-node run's GPUs: each host of its nodes sampled on its own (one :class:`RunGpus` a host,
its processes and every other node's counting as this run's), drawn under the node's label. A host
without a GPU says "no GPU" once, on its node's one line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from servelab.engines.gpus.watch import GpuPanel, PanelLine, RunGpus
from servelab.engines.runs.records import NodeRun, RunRecord


def node_label(nodes: Iterable[NodeRun]) -> str:
    """``n0 local (server)``: the node processes one host runs, by rank, host and role."""
    ns = sorted(nodes, key=lambda n: (n.rank, n.role))
    ranks = "+".join(dict.fromkeys(f"n{n.rank}" for n in ns))
    roles = ", ".join(dict.fromkeys(n.role for n in ns))
    return f"{ranks} {ns[0].host} ({roles})"


@dataclass
class NodeGpus:
    """One host of a multi-node run: its node processes and their GPUs."""

    host: str
    label: str
    gpus: RunGpus
    #: The node processes' run ids on this host.
    run_ids: tuple[str, ...] = ()

    def see(self, alive: dict[str, bool | None], t: float) -> None:
        """The nodes' liveness by run id (None: unknown): once every node process of this host has
        ended, its GPUs are watched coming back (from ``t``)."""
        if self.run_ids and all(alive.get(r) is False for r in self.run_ids):
            self.gpus.ended(t)


def node_gpus(nodes: Iterable[NodeRun], records: dict[str, RunRecord]) -> list[NodeGpus]:
    """One :class:`NodeGpus` per host of ``nodes``, in rank order (``records``: each node process's
    run record by run id; a host none of whose records is known yet is left out)."""
    by_host: dict[str, list[NodeRun]] = {}
    for n in sorted(nodes, key=lambda n: n.rank):
        by_host.setdefault(n.host, []).append(n)
    out = []
    everyone = tuple(records.values())
    for host, ns in by_host.items():
        own = [records[n.run_id] for n in ns if n.run_id in records]
        if own:
            gpus = RunGpus(own[0], group=tuple(r for r in everyone if r is not own[0]))
            out.append(NodeGpus(host, node_label(ns), gpus, tuple(n.run_id for n in ns)))
    return out


def nodes_panel(parts: Iterable[NodeGpus]) -> GpuPanel:
    """Each host's label and its GPU rows (indented); a CPU host is its label's one line."""
    lines: list[PanelLine] = []
    for part in parts:
        g = part.gpus
        if g.no_gpu is not None:
            lines.append(PanelLine(f"{part.label}: no GPU ({g.no_gpu})", note=True))
            continue
        lines.append(PanelLine(part.label))
        lines += [PanelLine(f"  {ln.text}", ln.holder, ln.note) for ln in g.panel().lines]
    return GpuPanel(tuple(lines))
