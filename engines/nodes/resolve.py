"""Which run a run id names, asked once: an ordinary run, a multi-node run's group id, or one of
its node processes' run ids; and the run whose server answers for it (the head's node for a group).

Every caller that takes a run id from a person (``servelab probe``, the dashboard's probe key,
``servelab compare`` / ``nodes``) resolves it once (``Runs.resolve``, which asks this module) and
hands the :class:`~engines.runs.records.ResolvedRun` down; the :class:`~engines.runs.records.Located`
head it holds lets each ``Runs`` method act on the run without asking the hosts where it is again.
The resolved run holds the group as a :class:`~engines.runs.records.GroupSummary`, so the areas below
nodes/ (probe, diagnosis) read it without importing nodes/; :func:`resolve_group_run` also gives
the group's whole record, for nodes/ and the dashboard's nodes screen.
"""

from __future__ import annotations

import re

from servelab.engines.nodes.run import GROUP_JSON, MultiNodeRecord, group_from_json, node_run_id
from servelab.engines.runs.records import Located, NoSuchRun, ResolvedRun, RunKind, RunsAPI

__all__ = ["group_id_of", "node_of", "resolve_group_run", "resolve_run"]

#: ``<experiment>.n<rank>[.<role>]-<stamp>-<hex>``: a node's run id (``engines.nodes.run.node_run_id``).
_NODE_ID = re.compile(r"^(?P<exp>.+)\.n(?P<rank>\d+)(?:\.(?P<role>[A-Za-z0-9_-]+))?(?P<tail>-\d{8}-\d{6}-[0-9a-f]{4})$")


def group_id_of(run_id: str) -> str | None:
    """The group id a node's run id belongs to (``exp.n1-<stamp>`` -> ``exp-<stamp>``), else None."""
    m = _NODE_ID.match(run_id)
    return f"{m['exp']}{m['tail']}" if m else None


def node_of(run_id: str) -> tuple[int, str | None] | None:
    """``(rank, role)`` of a node's run id (role None for the node's first process), else None."""
    m = _NODE_ID.match(run_id)
    return (int(m["rank"]), m["role"]) if m else None


async def resolve_group_run(runs: RunsAPI, run_id: str) -> tuple[ResolvedRun, MultiNodeRecord | None]:
    """Resolve ``run_id`` once: a group id or any node's run id -> the head, with the group; an
    ordinary run -> itself; with the group's record (None for an ordinary run). An id no host holds raises :class:`~engines.runs.manager.NoSuchRun`; a run whose
    host cannot be reached, :class:`~engines.runs.manager.RunUnreachable` (as :meth:`Runs.find` does).

    An id not shaped like a node's is looked up as an ordinary run first, so an ordinary run costs
    one look-up; a node-shaped id whose group does not list it (an experiment named ``x.n1``) is
    an ordinary run too.
    """
    gid = group_id_of(run_id)
    if gid is not None:
        group, first = await _group(runs, gid)
        if group is not None and any(n.run_id == run_id for n in group.nodes):
            return ResolvedRun(run_id, await _head(runs, group, first), group.summary(), RunKind.NODE), group
        here = first if first is not None and first.id == run_id else await runs.locate(run_id)
        return ResolvedRun(run_id, here, None, RunKind.ORDINARY), None
    try:
        return ResolvedRun(run_id, await runs.locate(run_id), None, RunKind.ORDINARY), None
    except NoSuchRun:
        group, first = await _group(runs, run_id)
        if group is None:
            raise
        return ResolvedRun(run_id, await _head(runs, group, first), group.summary(), RunKind.GROUP), group


async def resolve_run(runs: RunsAPI, run_id: str) -> ResolvedRun:
    """:func:`resolve_group_run`'s resolved run alone (what ``Runs.resolve`` answers)."""
    return (await resolve_group_run(runs, run_id))[0]


async def _group(runs: RunsAPI, gid: str) -> tuple[MultiNodeRecord | None, Located | None]:
    """The group ``gid`` (None when there is none) and its first node's run, located (None when no host holds it)."""
    try:
        first = await runs.locate(node_run_id(gid, 0, 0, ""))
    except NoSuchRun:
        return None, None
    raw = await first.read(GROUP_JSON)
    return (group_from_json(gid, raw) if raw is not None else None), first


async def _head(runs: RunsAPI, group: MultiNodeRecord, first: Located | None) -> Located:
    head = group.head.run_id
    return first if first is not None and first.id == head else await runs.locate(head)
