"""A multi-node run seen as one run: a stage row per node (per rank where lines carry rank tags),
one merged log with node tags and a node filter, one root cause across nodes.

The engines' own grammar does the reading. A node's log goes to the node's one live analysis
(``Runs.live``, shared with ``servelab status`` and the dashboard's watcher, so no log is analysed
twice). Where the grammar names a rank tag (SGLang's ``TP0`` … ``TP15``; TP8-15 live on node 1 of
two 8-GPU nodes), each rank seen in a node's log gets its own :class:`~engines.logs.live.LiveAnalysis`
over the same bytes, whose header parser swaps that rank with rank 0: the analyzer reads stage
progress from rank 0 only (``is_primary_process``), so the swapped rank's lines are the ones it reads.

Nothing here draws: the dashboard's run screen shows :class:`NodesView` and the lines of
:meth:`NodesLog.feed` as they are.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field, replace

from servelab.engines.adapters.base import get_adapter
from servelab.engines.logs.analyzer import LogAnalyzer
from servelab.engines.logs.grammar import Header, LogGrammar
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.logs.live import CHUNK, LiveAnalyses, LiveAnalysis, current_stage
from servelab.engines.logs.analysis import Analysis, Stage
from servelab.engines.nodes.hints import RendezvousHint
from servelab.engines.nodes.run import MultiNodeRecord, MultiNodeStatus, NodeFailure, NodeLine, NodeRun, failure_line, follow_node, merge_nodes
from servelab.engines.nodes.resolve import group_id_of, node_of, resolve_group_run
from servelab.engines.runs.records import RunsAPI
from servelab.engines.runs.state import RunState, StageState

__all__ = [
    "Lane",
    "LaneView",
    "NodeChunk",
    "NodesLog",
    "NodesView",
    "filter_label",
    "follow_chunks",
    "group_id_of",
    "group_state",
    "head_run_id",
    "identity_nodes",
    "next_filter",
    "node_of",
    "current_view",
    "lanes_json",
    "rank_analyzer",
    "resolve_group",
]

#: Bytes of each node's log kept to start a rank's analysis when its tag first shows up (ranks
#: announce themselves while loading; a rank first seen past this is read from that chunk on).
RANK_PREFIX_BYTES = 8 << 20

async def resolve_group(runs: RunsAPI, run_id: str) -> MultiNodeRecord | None:
    """The multi-node run ``run_id`` names (its group id, or any node's own run id); None for an
    ordinary run. :func:`~engines.nodes.resolve.resolve_group_run`'s group, for callers that need no more."""
    return (await resolve_group_run(runs, run_id))[1]


async def head_run_id(runs: RunsAPI, run_id: str) -> tuple[str, MultiNodeRecord | None]:
    """The run whose server answers for ``run_id`` and its group: :func:`~engines.nodes.resolve.resolve_run`'s
    ``(run_id, group)``. A caller that goes on to act on the run should keep the ``ResolvedRun`` instead."""
    resolved, group = await resolve_group_run(runs, run_id)
    return resolved.run_id, group


def identity_nodes(group: MultiNodeRecord) -> list[dict[str, object]]:
    """The probe identity's ``nodes``: host, rank, role and run id of every node process."""
    return group.summary().identity()


# -- per-rank analysis ----------------------------------------------------------------------------
def _swap_rank(parse: Callable[[str], Header], tag: str, rank: int) -> Callable[[str], Header]:
    """``parse``, with rank ``rank`` and rank 0 trading places in the process name."""
    rx = re.compile(rf"\b{re.escape(tag)}(\d+)\b")
    mine, zero = str(rank), "0"

    def swap(m: re.Match[str]) -> str:
        n = m.group(1)
        return f"{tag}{zero}" if n == mine else f"{tag}{mine}" if n == zero else m.group(0)

    def parse_swapped(text: str) -> Header:
        hdr = parse(text)
        if tag in hdr.process:
            return hdr._replace(process=rx.sub(swap, hdr.process))
        return hdr

    return parse_swapped


def rank_analyzer(engine: str, rank: int) -> LogAnalyzer:
    """The engine's analyzer reading rank ``rank``'s stage lines (as it reads rank 0's)."""
    grammar: LogGrammar = get_adapter(engine).grammar
    if rank == 0 or not grammar.rank_tag:
        return LogAnalyzer(grammar)
    return LogAnalyzer(replace(grammar, parse=_swap_rank(grammar.parse, grammar.rank_tag, rank)), rank_zero_only=True)


def _rank_make(engine: str, *, rank: int) -> LogAnalyzer:
    return rank_analyzer(engine, rank)


def _rank_finder(grammar: LogGrammar) -> re.Pattern[bytes] | None:
    """Finds a line header's rank tag in raw bytes: ``[... TP8]`` (also ``[... DP0 TP8 EP8]``)."""
    if not grammar.rank_tag:
        return None
    return re.compile(rb"\b" + re.escape(grammar.rank_tag.encode()) + rb"(\d+)(?: [A-Z]{2}\d+)*\]")


# -- the view ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lane:
    """What one stage row reads: a node, or one rank of a node."""

    node: NodeRun
    #: The rank tag this row reads (SGLang's TP rank), None: the node as a whole.
    rank: int | None = None

    @property
    def label(self) -> str:
        base = f"n{self.node.rank} {self.node.host}"
        return base if self.rank is None else f"{base} TP{self.rank}"


@dataclass
class LaneView:
    """One stage row as it is now: its analysis (None before its first byte) and current stage."""

    lane: Lane
    analysis: Analysis | None
    #: The group serves (its head printed ready). A worker never prints the head's ready line, so
    #: its own log stops at its last stage: once the group serves, a worker still alive serves too.
    group_ready: bool = False

    @property
    def _serves_with_group(self) -> bool:
        own = self.analysis.state if self.analysis is not None else RunState.WAITING
        return self.group_ready and not self.lane.node.serves and not own.is_terminal

    @property
    def state(self) -> RunState:
        if self._serves_with_group:
            return RunState.READY
        return self.analysis.state if self.analysis is not None else RunState.WAITING

    @property
    def stage(self) -> Stage | None:
        stage = current_stage(self.analysis) if self.analysis is not None else None
        if stage is not None and self._serves_with_group and stage.status is StageState.RUNNING:
            return replace(stage, status=StageState.DONE)  # its part of the start-up is over: the group serves
        return stage

    @property
    def stages(self) -> list[Stage]:
        return list(self.analysis.stages) if self.analysis is not None else []


def group_state(status: MultiNodeStatus | None, lanes: list[LaneView]) -> RunState:
    """The one state of a multi-node run: crashed once a node failed, ready once the head serves,
    stopped/exited once every node ended, else the head's own (loading, starting)."""
    if status is not None:
        if status.root_cause is not None:
            return RunState.CRASHED
        if status.ready:
            return RunState.READY
        if status.ended:
            ended = [n.status.record.status for n in status.nodes if n.node.serves and n.status is not None]
            return ended[0] if ended else RunState.EXITED
    serving = [lv.state for lv in lanes if lv.lane.node.serves]
    return serving[0] if serving else RunState.WAITING


@dataclass
class NodesView:
    """What the run screen shows for a multi-node run."""

    record: MultiNodeRecord
    lanes: list[LaneView]
    state: RunState
    #: The first node that failed (its own words, naming the node), not the head's wrapper.
    root_cause: NodeFailure | None = None
    hint: RendezvousHint | None = None
    #: Per node rank: the node's process is alive (None: not known yet or its host is down).
    alive: dict[int, bool | None] = field(default_factory=dict)

    @property
    def cause_line(self) -> str | None:
        """The pinned root cause in one line, naming the node."""
        return failure_line(self.root_cause) if self.root_cause is not None else None


def next_filter(record: MultiNodeRecord, current: int | None) -> int | None:
    """The node filter after ``current``: all (None) -> n0 -> n1 … -> all."""
    ranks = sorted({n.rank for n in record.nodes})
    if current is None:
        return ranks[0] if ranks else None
    later = [r for r in ranks if r > current]
    return later[0] if later else None


def filter_label(record: MultiNodeRecord, current: int | None) -> str:
    """What the log shows under the filter: ``all nodes`` or ``n1 box only``."""
    if current is None:
        return "all nodes"
    host = next((n.host for n in record.nodes if n.rank == current), "?")
    return f"n{current} {host} only"


@dataclass(frozen=True)
class NodeChunk:
    """Bytes ``[offset, offset + len(data))`` of one node process's log; ``restart``: its log was
    truncated or replaced, and what follows is read from its first byte."""

    node: NodeRun
    offset: int
    data: bytes
    restart: bool = False


async def follow_chunks(runs: RunsAPI, record: MultiNodeRecord) -> AsyncGenerator[NodeChunk | NodeRun, None]:
    """Every node process's log as it grows (``NodeChunk``), and a node's ``NodeRun`` once its log
    has ended, until every node has ended. Each node is followed by :meth:`Runs.follow` (which
    keeps asking a host whose link drops and goes on from its offset), twice as
    :meth:`MultiNodeRuns.follow` does: the second pass takes what its children wrote while dying."""

    async def pump(n: NodeRun, put: Callable[[NodeChunk | NodeRun], Awaitable[None]]) -> None:
        async for end, chunk in follow_node(runs, n):
            if end == 0 and not chunk:
                await put(NodeChunk(n, 0, b"", restart=True))
                continue
            await put(NodeChunk(n, end - len(chunk), chunk))
        await put(n)

    async with aclosing(merge_nodes(record.nodes, pump, "node logs")) as merged:
        async for item in merged:
            yield item


class _NodeLog:
    """One node process's log: its unfinished last line, its lanes' analyses, its kept prefix."""

    def __init__(self, node: NodeRun, shared: LiveAnalysis, finder: re.Pattern[bytes] | None) -> None:
        self.node = node
        self.shared = shared
        self.finder = finder
        self.rest = b""
        self.prefix = bytearray()
        self.ranks: dict[int, LiveAnalysis] = {}
        self.ended = False

    def lanes(self) -> list[tuple[Lane, LiveAnalysis]]:
        if not self.ranks:
            return [(Lane(self.node), self.shared)]
        return [(Lane(self.node, r), self.shared if r == 0 else self.ranks[r]) for r in sorted(self.ranks)]


class NodesLog:
    """Feeds each node's log to its lanes' analyses and cuts it into whole lines tagged with the node.

    The node's own analysis is the one ``analyses`` (``Runs.live``) holds for its run id (this object counts as a
    stream feeding it, so a poll meanwhile reads nothing); a rank's analysis is private to it.
    """

    def __init__(self, record: MultiNodeRecord, analyses: LiveAnalyses) -> None:
        self.record = record
        finder = _rank_finder(get_adapter(record.engine).grammar)
        self._nodes: dict[str, _NodeLog] = {}
        for n in record.nodes:
            live = analyses.get(n.run_id, record.engine)
            live.streams += 1
            self._nodes[n.run_id] = _NodeLog(n, live, finder)
        self._closed = False

    def close(self) -> None:
        """Stop feeding the shared analyses (a poll then reads the logs itself again)."""
        if not self._closed:
            self._closed = True
            for nl in self._nodes.values():
                nl.shared.streams -= 1

    async def feed(self, chunk: NodeChunk) -> list[NodeLine]:
        """Analyse a node's new bytes with each of its lanes; the whole lines they complete."""
        nl = self._nodes[chunk.node.run_id]
        if chunk.restart:
            nl.rest, nl.prefix, nl.ended = b"", bytearray(), False
            await nl.shared.restart()
            nl.ranks.clear()
            return []
        data = chunk.data
        if nl.finder is not None:
            for r in sorted({int(m.group(1)) for m in nl.finder.finditer(data)}):
                if r != 0 and r not in nl.ranks:
                    live = LiveAnalysis(self.record.engine, make=functools.partial(_rank_make, rank=r))
                    if len(nl.prefix) == chunk.offset:  # the log so far is kept: the rank's row reads it all
                        if nl.prefix:
                            await live.feed_at(0, bytes(nl.prefix))
                    else:  # first seen past the kept prefix: its row reads from this chunk on
                        live.offset = chunk.offset
                    nl.ranks[r] = live
                elif r == 0 and r not in nl.ranks:
                    nl.ranks[0] = nl.shared
        if len(nl.prefix) < RANK_PREFIX_BYTES and chunk.offset == len(nl.prefix):
            nl.prefix += data[: RANK_PREFIX_BYTES - len(nl.prefix)]
        await nl.shared.feed_at(chunk.offset, data)
        for r, live in nl.ranks.items():
            if live is not nl.shared:
                await live.feed_at(chunk.offset, data)
        text = nl.rest + data
        *whole, nl.rest = text.split(b"\n")
        n = nl.node
        return [NodeLine(n.rank, n.host, n.role, ln.decode("utf-8", "replace").rstrip("\r")) for ln in whole]

    def log_ended(self, node: NodeRun) -> list[NodeLine]:
        """The node's log ended: its unfinished last line, as a line."""
        nl = self._nodes[node.run_id]
        rest, nl.rest, nl.ended = nl.rest, b"", True
        return [NodeLine(node.rank, node.host, node.role, rest.decode("utf-8", "replace"))] if rest else []

    async def mark_exited(self, node: NodeRun, exit_code: int | None) -> None:
        """The node's process is gone and its log was read to its end: its rank lanes finish (a
        silent death reads as a crash); its own analysis is finished by the next poll."""
        nl = self._nodes[node.run_id]
        if not nl.ended:
            return
        for live in nl.ranks.values():
            if live is not nl.shared:
                await live.end(exit_code)

    def view(self, status: MultiNodeStatus | None = None) -> NodesView:
        """Every lane's analysis now, with the cross-node root cause and hint from ``status``."""
        lanes = [LaneView(lane, live.analysis) for nl in self._nodes.values() for lane, live in nl.lanes()]
        alive: dict[int, bool | None] = {}
        if status is not None:
            for ns in status.nodes:
                if ns.node.serves or ns.node.rank not in alive:
                    alive[ns.node.rank] = ns.status.alive if ns.status is not None else None
        state = group_state(status, lanes)
        if state is RunState.READY:
            lanes = [replace(lv, group_ready=True) for lv in lanes]
        return NodesView(
            self.record, lanes, state,
            status.root_cause if status is not None else None,
            status.hint if status is not None else None, alive,
        )


async def current_view(runs: RunsAPI, status: MultiNodeStatus, limit: int = 256 << 20) -> NodesView:
    """The view of ``status``'s run now, from each node's log as it is on its host (``servelab
    nodes``): the nodes' own analyses are the ones ``status`` just brought up to date (shared, not
    read again); a rank's row reads the node's log from its first byte (up to ``limit`` bytes)."""
    nodes_log = NodesLog(status.record, runs.live)
    try:
        for ns in status.nodes:
            if ns.status is None:
                continue  # its host did not answer: its row stays empty
            rec = ns.status.record
            host = runs.host(rec.host)
            offset = 0
            while offset < limit:
                try:
                    data = await host.read_bytes(rec.log_path, offset, CHUNK)
                except (FileNotFoundError, HostUnreachable):
                    break
                if not data:
                    break
                await nodes_log.feed(NodeChunk(ns.node, offset, data))
                offset += len(data)
            nodes_log.log_ended(ns.node)
            if not ns.status.alive:
                await nodes_log.mark_exited(ns.node, ns.status.exit_code)
        return nodes_log.view(status)
    finally:
        nodes_log.close()


def lanes_json(view: NodesView) -> list[dict[str, object]]:
    """``servelab nodes --json``'s ``rows``: each stage row's label, node, rank, state and current stage."""
    out: list[dict[str, object]] = []
    for lv in view.lanes:
        st = lv.stage
        out.append({
            "label": lv.lane.label, "node": lv.lane.node.rank, "host": lv.lane.node.host, "rank": lv.lane.rank,
            "state": lv.state, "stage": st.name if st is not None else None, "stage_status": st.status if st is not None else None,
        })
    return out
