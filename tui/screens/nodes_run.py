"""A multi-node run as one run: a stage row per node (per rank for SGLang), one merged log tagged
``[n<rank> host]`` that ``v`` filters by node, the one root cause across nodes, probe and stop.

It draws what ``engines.nodes.view`` computes: ``follow_chunks`` + :class:`NodesLog` for the rows
and lines, ``MultiNodeRuns.status`` every 2 s for liveness, the first failing node and the hint.
The merged log (and each node's, made the first time the filter shows it) is a :class:`LogIngest`
that classifies lines in its worker process; the analyses are the nodes' own, not the merged log's.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing, suppress
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Header, Static

from servelab.engines.errors import ServelabError
from servelab.engines.gpus.nodes import NodeGpus, node_gpus, nodes_panel
from servelab.engines.gpus.stream import watch_host
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.runs.history import probe_of
from servelab.engines.probe.summary import ProbeSummary
from servelab.engines.nodes.run import MultiNodeRecord, MultiNodeRuns, MultiNodeStatus, NodeLine, NodeRun
from servelab.engines.nodes.resolve import resolve_group_run
from servelab.engines.nodes.view import NodeChunk, NodesLog, NodesView, filter_label, follow_chunks, next_filter
from servelab.engines.runs.state import RunState
from servelab.tui.face import probe_of_app, request_probe, servelab_app
from servelab.tui.navigation import Confirm, OpenSingleRun, OpenWhy, go
from servelab.tui.widgets.gpu_rows import GpuRows
from servelab.tui.widgets.log_ingest import IngestUpdate, LogIngest
from servelab.tui.widgets.log_view import LogPanel
from servelab.tui.widgets.node_lanes import lanes_table
from servelab.tui.widgets.probe_panel import ProbePanel
from servelab.tui.widgets.root_cause import RootCausePanel
from servelab.tui.widgets.live_run_screen import LiveRunScreen
from servelab.tui.widgets.spool import spool_path
from servelab.tui.widgets.key_footer import KeyFooter

STATUS_SECONDS = 2.0
PROBE_SECONDS = 5.0


def _lane_states(view: NodesView | None) -> list[tuple[str, RunState]]:
    return [(lv.lane.label, lv.state) for lv in view.lanes] if view is not None else []


class NodesRunScreen(LiveRunScreen):
    """Every node of one multi-node run, live."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("v", "cycle_node", "Node filter", id="run.node-filter"),
        Binding("s", "stop", "Stop", id="run.stop"),
        Binding("P", "probe", "Probe", id="run.probe"),
        Binding("y", "why", "Why?", id="run.why"),
    ]

    def __init__(self, run_id: str, record: MultiNodeRecord | None = None) -> None:
        super().__init__(run_id)
        self.record = record
        self.nodes_log: NodesLog | None = None
        self.view: NodesView | None = None
        self.status: MultiNodeStatus | None = None
        #: The node whose lines the log shows (None: every node's).
        self.node_filter: int | None = None
        self.merged = LogIngest(self.fresh_spool(".nodes.log"), self._update)
        self._per_node: dict[int, LogIngest] = {}
        self.probe: ProbeSummary | None = None
        self.liveness = "connecting…"
        self.ended = False
        #: Each host's GPUs under its nodes' label (``engines.gpus.nodes``); None until the nodes' records are known.
        self.gpus: list[NodeGpus] | None = None
        self._shown = ("", "", "", "")
        #: Set when the log brings news the status must judge (a lane's state changed, a node's log
        #: ended): the status poll runs at once instead of at its next period.
        self._news = asyncio.Event()

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="nodes-title", classes="title-bar")
        yield Static("", id="node-lanes")
        yield Static("", id="nodes-cause")
        yield RootCausePanel(id="root-cause")
        yield GpuRows(id="gpus")
        yield ProbePanel(id="probe")
        yield LogPanel(self.merged.index, id="log")
        yield KeyFooter()

    @property
    def group_id(self) -> str:
        return self.record.id if self.record is not None else self.run_id

    def on_mount(self) -> None:
        self.title = "multi-node run"
        self.sub_title = self.run_id
        self._render_all()
        self.query_one("#log-view").focus()
        self._follow()
        self.set_interval(1.0, self._render_all)

    def on_unmount(self) -> None:
        self.merged.close()
        for ingest in self._per_node.values():
            ingest.close()
        if self.nodes_log is not None:
            self.nodes_log.close()

    def stop_offered(self) -> bool:
        return not self.ended

    # -- workers ---------------------------------------------------------------------------------
    @work(exclusive=True, group="follow", exit_on_error=False)
    async def _follow(self) -> None:
        while self.record is None:
            try:
                self.record = (await resolve_group_run(self.runs, self.run_id))[1]
            except (HostUnreachable, ServelabError, OSError) as exc:
                self.liveness = f"{exc}; retrying"
                self._render_all()
                await asyncio.sleep(3.0)
                continue
            if self.record is None:  # an ordinary run after all (an experiment named like a node)
                go(self, OpenSingleRun(self.run_id), replace=True)
                return
        record = self.record
        self.sub_title = f"{record.id} · {len({n.rank for n in record.nodes})} nodes"
        for n in record.nodes:  # this screen's copies of each node's lines start empty
            self._node_spool(n.rank).write_bytes(b"")
        self.nodes_log = NodesLog(record, self.runs.live)
        self.view = self.nodes_log.view()
        self._status()
        self._probe_watch()
        self._gpu_watch()
        try:
            async for item in follow_chunks(self.runs, record):
                if isinstance(item, NodeChunk):
                    self._lines(await self.nodes_log.feed(item))
                else:
                    self._lines(self.nodes_log.log_ended(item))
                    await self._node_ended(item)
                # the stage rows read the bytes just fed: drawn with the lines, never a status poll behind them
                before = self.view
                self.view = self.nodes_log.view(self.status)
                if not isinstance(item, NodeChunk) or _lane_states(before) != _lane_states(self.view):
                    self._news.set()  # the root cause and the group's state are the status's: ask it now
                self._render_all()
        except (HostUnreachable, ServelabError, OSError) as exc:
            self.liveness = f"log stream lost: {exc}"
            self._render_all()

    def _lines(self, lines: list[NodeLine]) -> None:
        if not lines:
            return
        rendered = [(ln.rank, (ln.render() + "\n").encode()) for ln in lines]  # each line drawn once, for both logs
        self.merged.append(b"".join(raw for _, raw in rendered))
        by_node: dict[int, list[bytes]] = {}
        for rank, raw in rendered:
            by_node.setdefault(rank, []).append(raw)
        for rank, raws in by_node.items():
            blob = b"".join(raws)
            with open(self._node_spool(rank), "ab") as f:  # kept for the node's view, made on first show
                f.write(blob)
            if rank in self._per_node:
                self._per_node[rank].append(blob)

    def _node_spool(self, rank: int) -> Path:
        return spool_path(self.group_id).with_suffix(f".n{rank}.all.log")

    async def _node_ended(self, node: NodeRun) -> None:
        status = self.status
        if self.nodes_log is None or status is None:
            return
        for ns in status.nodes:
            if ns.node.run_id == node.run_id and ns.status is not None and not ns.status.alive:
                await self.nodes_log.mark_exited(node, ns.status.exit_code)

    @work(exclusive=True, group="status", exit_on_error=False)
    async def _status(self) -> None:
        record = self.record
        assert record is not None and self.nodes_log is not None
        mruns = MultiNodeRuns(self.runs)
        while True:
            try:
                st = await mruns.status(record)
            except (HostUnreachable, ServelabError, OSError) as exc:
                self.liveness = f"status: {exc}; retrying"
            else:
                self.status = st
                for ns in st.nodes:
                    if ns.status is not None and not ns.status.alive:
                        await self.nodes_log.mark_exited(ns.node, ns.status.exit_code)
                alive = sum(1 for n in st.nodes if n.status is not None and n.status.alive)
                down = [n.node.host for n in st.nodes if n.unreachable]
                self.liveness = f"{alive}/{len(st.nodes)} node processes alive" + (f" · unreachable: {', '.join(down)}" if down else "")
                was_ended, self.ended = self.ended, st.ended
                if was_ended != self.ended:
                    self.refresh_bindings()
            self.view = self.nodes_log.view(self.status)
            self._render_all()
            if self.ended:
                return
            with suppress(TimeoutError):
                await asyncio.wait_for(self._news.wait(), STATUS_SECONDS)
            self._news.clear()

    @work(exclusive=True, group="gpus", exit_on_error=False)
    async def _gpu_watch(self) -> None:
        """Each host of the nodes from its own long-lived sampler (``engines.gpus.stream``), until its
        GPUs are judged after its nodes ended; a CPU host says "no GPU" once, on its node's line.
        Leaving the screen cancels this worker, which ends every sampler."""
        while self.status is None or self.record is None:
            await asyncio.sleep(0.2)
        records = {ns.node.run_id: ns.status.record for ns in self.status.nodes if ns.status is not None}
        parts = self.gpus = node_gpus(self.record.nodes, records)
        await asyncio.gather(*(self._gpu_host(part) for part in parts))

    async def _gpu_host(self, part: NodeGpus) -> None:
        try:
            host = self.runs.host(part.host)
        except (ServelabError, HostUnreachable, OSError) as exc:  # a host no longer in hosts.toml
            self.notify(str(exc), title=part.label, severity="warning", timeout=5)
            return
        async with aclosing(watch_host(host)) as samples:
            async for sample in samples:
                if isinstance(sample, str):
                    self.notify(sample, title=part.label, severity="warning", timeout=5)
                    continue
                if self.status is not None:
                    part.see({ns.node.run_id: ns.status.alive if ns.status else None for ns in self.status.nodes}, sample.t)
                part.gpus.feed(sample)
                self.query_one(GpuRows).show(nodes_panel(self.gpus or []))
                if part.gpus.done:
                    return

    @work(exclusive=True, group="probe", exit_on_error=False)
    async def _probe_watch(self) -> None:
        while self.probe is None and not self.ended:
            try:
                self.probe = await probe_of(self.runs, self.group_id)
            except (HostUnreachable, ServelabError, OSError):
                pass
            self._render_all()
            await asyncio.sleep(PROBE_SECONDS)

    def _update(self, update: IngestUpdate) -> None:
        if not self.is_attached:
            return
        shown = self._per_node.get(self.node_filter) if self.node_filter is not None else self.merged
        if shown is not None and self.query_one(LogPanel).index is shown.index:
            self.query_one(LogPanel).lines_added(update.rows)

    # -- rendering -------------------------------------------------------------------------------
    def _render_all(self) -> None:
        view = self.view
        rec = self.record
        state = view.state if view is not None else None
        title = Text.assemble(
            ((rec.experiment if rec else self.run_id), "bold"), "  ",
            ((f" {state.upper()} " if state else " … "), f"reverse {state.style}" if state else "reverse"),
            f"  {rec.engine} {rec.backend} on {', '.join(dict.fromkeys(n.host for n in rec.nodes))}" if rec else "",
            f" · {self.liveness} · log: {filter_label(rec, self.node_filter)}" if rec else f" · {self.liveness}",
            overflow="ellipsis", no_wrap=True,
        )
        lanes = repr([(lv.lane, lv.state, lv.stage) for lv in view.lanes]) if view is not None else ""
        cause = view.cause_line if view is not None else None
        hint = view.hint.render() if view is not None and view.hint is not None else None
        key = (title.plain, lanes, repr((cause, hint)), repr(self.probe is not None))
        if key == self._shown:
            self._render_probe()
            return
        old, self._shown = self._shown, key
        self.query_one("#nodes-title", Static).update(title)
        if view is not None and key[1] != old[1]:
            self.query_one("#node-lanes", Static).update(lanes_table(view.lanes))
        if key[2] != old[2]:
            box = self.query_one("#nodes-cause", Static)
            parts: list[Any] = []
            if cause:
                parts.append((f"ROOT CAUSE {cause}", "bold red"))
            if hint:
                parts += ["\n" if parts else "", (f"HINT {hint}", "bold yellow")]
            box.update(Text.assemble(*parts))
            rc = view.root_cause.root_cause if view is not None and view.root_cause is not None else None
            self.query_one(RootCausePanel).show(rc, None)
        self._render_probe()

    def _render_probe(self) -> None:
        self.probe, progress = probe_of_app(self, self.group_id, self.probe)
        self.query_one(ProbePanel).show(self.probe, progress)

    # -- actions ---------------------------------------------------------------------------------
    def action_cycle_node(self) -> None:
        """The log shows all nodes, then node 0 only, node 1 only, … then all again."""
        if self.record is None:
            return
        self.node_filter = next_filter(self.record, self.node_filter)
        panel = self.query_one(LogPanel)
        label = filter_label(self.record, self.node_filter)
        if self.node_filter is None:
            panel.set_index(self.merged.index)
        else:
            ingest = self._per_node.get(self.node_filter)
            if ingest is None:
                ingest = self._per_node[self.node_filter] = LogIngest(self.fresh_spool(f".n{self.node_filter}.log", self.group_id), self._update)
                path = self._node_spool(self.node_filter)
                if path.exists():
                    ingest.append(path.read_bytes())
            panel.set_index(ingest.index, note=label)
        self._render_all()
        self.notify(f"log: {label}", timeout=2)

    def action_stop(self) -> None:
        if servelab_app(self).readonly or self.record is None:
            return
        record = self.record
        detail = "\n".join(f"n{n.rank} {n.host} {n.role}: {n.run_id}" for n in record.nodes)

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop()

        go(self, Confirm(f"Stop every node of {record.id}?", f"{detail}\nSIGTERM to each process group, SIGKILL after 10 s."), answered)

    @work(exclusive=True, group="stop", exit_on_error=False)
    async def _stop(self) -> None:
        assert self.record is not None
        self.notify(f"stopping {self.record.id} on every node…", timeout=3)
        try:
            report = await MultiNodeRuns(self.runs).stop(self.record)
        except (ServelabError, HostUnreachable, OSError) as exc:
            self.notify(str(exc), title="stop failed", severity="error", timeout=8)
            return
        if report.problems:
            self.notify("; ".join(report.problems), title="stop: some nodes", severity="error", timeout=10)
        self.notify(f"{self.record.id}: {len(report.stopped)} of {len(self.record.nodes)} node processes stopped in {report.seconds:.1f} s", timeout=5)

    def action_probe(self) -> None:
        if request_probe(self, self.group_id):
            self._render_probe()

    def action_why(self) -> None:
        head = self.record.head.run_id if self.record is not None else self.run_id
        go(self, OpenWhy([head]))
