"""A multi-node run where the dashboard lists and starts runs: one row for the group in the runs
list (not one per node), and one launch that picks the right starter (``Runs.launch`` for one
host, :class:`~engines.nodes.run.MultiNodeRuns` for several) with a question naming the nodes.

The dashboard shows these as they are; which experiment is multi-node, what the confirm says and
how node records group are decided here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from servelab.engines.catalog.folder import Catalog
from servelab.engines.nodes.run import MultiNodeRuns, NodeCheck
from servelab.engines.nodes.resolve import group_id_of, node_of
from servelab.engines.preflight.checks import Check
from servelab.engines.runs.records import KnownRun
from servelab.engines.runs.records import RunsAPI
from servelab.engines.runs.state import RunState


@dataclass
class RunsRow:
    """One row of the runs list: an ordinary run, or a multi-node run with its node runs."""

    #: The id to open, stop or probe: the run's id, or the group's.
    id: str
    #: The run's record, or the group's head (node 0's first process).
    head: KnownRun
    nodes: list[KnownRun] = field(default_factory=list)

    @property
    def status(self) -> RunState:
        """The group's: running while every node runs, else the first node's that does not."""
        if not self.nodes:
            return self.head.record.status
        off = [k.record.status for k in self.nodes if k.record.status is not RunState.RUNNING]
        return off[0] if off and self.head.record.status is RunState.RUNNING else self.head.record.status

    @property
    def hosts(self) -> str:
        """``local`` for a run; ``local + box (2 nodes)`` for a group."""
        if not self.nodes:
            return self.head.record.host
        hosts = list(dict.fromkeys(k.record.host for k in self.nodes))
        ranks = {n[0] for k in self.nodes if (n := node_of(k.record.id)) is not None}
        return f"{' + '.join(hosts)} ({len(ranks)} nodes)"


def _head_first(k: KnownRun) -> tuple[int, bool, str]:
    node = node_of(k.record.id)
    return (node[0], node[1] is not None, k.record.id) if node is not None else (1 << 30, True, k.record.id)


def runs_rows(known: list[KnownRun]) -> list[RunsRow]:
    """The runs list with each multi-node run as one row (its node runs under it, node 0's first
    process as its head), at the place of its first node in ``known``."""
    rows: list[RunsRow] = []
    groups: dict[str, RunsRow] = {}
    for k in known:
        gid = group_id_of(k.record.id)
        if gid is None:
            rows.append(RunsRow(k.record.id, k))
            continue
        row = groups.get(gid)
        if row is None:
            row = groups[gid] = RunsRow(gid, k)
            rows.append(row)
        row.nodes.append(k)
    for row in groups.values():
        row.nodes.sort(key=_head_first)
        row.head = row.nodes[0]
    return rows


def launch_question(catalog: Catalog, name: str) -> tuple[str, str] | None:
    """What to confirm before starting a multi-node experiment (every node it starts), or None
    for a one-host experiment (its launch asks nothing more than its preflight)."""
    exp = catalog.get(name)
    plans = catalog.node_plans(exp) if exp.experiment.spans_hosts else []  # one scheduler job is one run
    if not plans:
        return None
    lines = [f"n{p.node.rank} {p.node.host} ({p.node.address}): {', '.join(proc.role for proc in p.processes)}" for p in plans]
    mn = exp.experiment.multinode
    backend = mn.backend if mn is not None else "?"
    return (
        f"Launch {name} on {len(plans)} nodes ({exp.experiment.engine}, {backend})?",
        "\n".join([*lines, "Each node is preflighted first; one that fails starts nothing."]),
    )


def node_check(c: NodeCheck) -> Check:
    """A node's preflight as a line of the preflight screen."""
    return Check(f"node {c.rank} ({c.host})", c.ok, c.detail, 0.0)


async def launch_experiment(runs: RunsAPI, name: str, progress: Callable[[Check], None] | None = None, *, skip_preflight: bool = False) -> str:
    """Start ``name`` the way it runs: one host through ``Runs.launch``, several through
    ``MultiNodeRuns.launch`` (each node preflighted first); the id to open (a run's or a group's)."""
    exp = runs.catalog.get(name)
    if not exp.experiment.spans_hosts:  # one host, or one scheduler job over its nodes
        record = await runs.launch(name, progress=progress, skip_preflight=skip_preflight)
        return record.id

    def on_node(c: NodeCheck) -> None:
        if progress is not None:
            progress(node_check(c))

    group = await MultiNodeRuns(runs).launch(name, progress=on_node, skip_preflight=skip_preflight)
    return group.id
