"""A multi-node run: one run id, one run folder per node process, launched, watched and stopped together.

Each node process is an ordinary run on its own host (``<experiment>.n<rank>-<stamp>-<hex>``, see
:func:`node_run_id`), started by that host's runctl, so it has
its own log, pid, pgid and exit code, and servelab only ever signals what runctl started. The
group itself is ``nodes.json`` beside the head's first run. What differs between engines (the
commands, each node's quick check, the log lines) comes from the adapter's
:meth:`~engines.adapters.base.EngineAdapter.node_plans` and grammar; this module only orders and joins.

- **Preflight on every node first**: servelab's preflight for each node's host, plus each
  process's own ``check`` command (the engine's words when it fails). One failing node stops the
  launch before anything starts.
- **Start order**: :func:`engines.nodes.plan.start_order` (helper daemons, then workers, then the head).
- **Root cause across nodes**: the node that failed first, by the time of its failure, not the
  head's wrapper that reports a peer's death.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from servelab.engines.adapters.base import get_adapter
from servelab.engines.errors import ServelabError
from servelab.engines.catalog.experiment import SourcedExperiment
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.helpers import run_script
from servelab.engines.hosts.scripts import ScriptUploadError
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.logs.analysis import RootCause
from servelab.engines.nodes.plan import start_order
from servelab.engines.adapters.exchange import NodePlan, NodeProcess
from servelab.engines.nodes.ray import is_ray_daemon
from servelab.engines.nodes.hints import RendezvousHint, rendezvous_hint, stamp_of
from servelab.engines.runs.records import GroupSummary, Located, RunRecord, RunStatus, RunsAPI, new_run_id
from servelab.engines.runs.records import NodeRun as NodeRun  # nodes.json's node: one of the run values
from servelab.engines.runs.state import RunState

GROUP_JSON = "nodes.json"
#: Seconds to wait after a node's run ended before its log's last read.
LATE_LINES_SETTLE_S = 1.5


@dataclass(frozen=True)
class MultiNodeRecord:
    """What ``nodes.json`` holds: the group's run id, its experiment, and every node process."""

    id: str
    experiment: str
    engine: str
    backend: str
    nodes: list[NodeRun]
    started_at: str = ""
    #: ``[multinode] rendezvous_s``: seconds a join may take before it is called a hang (None: the engine's).
    rendezvous_s: float | None = None
    #: A rehearsal (``engines/rehearsal``): every node's start-up with dummy weights, stopped once it answered.
    rehearsal: bool = False

    @property
    def head(self) -> NodeRun:
        return next(n for n in self.nodes if n.serves)

    def summary(self) -> GroupSummary:
        """The group as the areas below nodes/ hold it (a resolved run's ``group``)."""
        return GroupSummary(self.id, tuple(self.nodes))

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> MultiNodeRecord:
        nodes = data.get("nodes")
        if not isinstance(nodes, list):
            raise ServelabError("nodes.json has no node list")
        return cls(
            id=str(data["id"]), experiment=str(data["experiment"]), engine=str(data["engine"]),
            backend=str(data["backend"]), nodes=[NodeRun(**n) for n in nodes], started_at=str(data.get("started_at", "")),
            rendezvous_s=float(r) if isinstance(r := data.get("rendezvous_s"), (int, float)) else None,
            rehearsal=data.get("rehearsal") is True,
        )


@dataclass(frozen=True)
class NodeCheck:
    """Preflight of one node: ok, or the first failing line (servelab's check or the engine's words)."""

    rank: int
    host: str
    ok: bool
    detail: str
    #: The patch set as preflight applied it on this node (root, patch and file sha256s), for the node's run record.
    patches: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeFailure:
    """The cross-node root cause: which node failed first, when, and in the engine's words."""

    rank: int
    host: str
    role: str
    run_id: str
    #: The node's own root cause from its log (None when it left no traceback, e.g. SIGKILL).
    root_cause: RootCause | None
    summary: str
    #: Epoch seconds of the failure (its log line's time, else its exit), the ordering key.
    at: float | None


@dataclass
class NodeState:
    """One node process as it is now."""

    node: NodeRun
    status: RunStatus | None
    #: Why the node could not be asked (its host is unreachable), else None.
    unreachable: str | None = None

    @property
    def state(self) -> RunState | None:
        return self.status.analysis.state if self.status and self.status.analysis else None


@dataclass
class MultiNodeStatus:
    """Every node's status, the one root cause across nodes and the rendezvous hint."""

    record: MultiNodeRecord
    nodes: list[NodeState]
    root_cause: NodeFailure | None
    hint: RendezvousHint | None

    @property
    def ready(self) -> bool:
        head = next(n for n in self.nodes if n.node.serves)
        return bool(head.status and head.status.analysis and head.status.analysis.was_ready and head.status.alive)

    @property
    def ended(self) -> bool:
        """Every node's process is gone and its record says how it ended: a process that has just
        gone reads ``running`` until its supervisor writes the exit, and is not over until then."""
        return all(n.status is not None and not n.status.alive and n.status.status.is_terminal for n in self.nodes)


@dataclass(frozen=True)
class NodeLine:
    """One line of the merged log, tagged with its node."""

    rank: int
    host: str
    role: str
    text: str

    @property
    def tag(self) -> str:
        return f"[n{self.rank} {self.host}]"

    def render(self) -> str:
        return f"{self.tag} {self.text}"


@dataclass
class StopReport:
    """What :meth:`MultiNodeRuns.stop` did on each node, and how long the whole stop took."""

    stopped: list[RunStatus] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


#: ``-YYYYmmdd-HHMMSS-hhhh``: the tail of every run id (``engines.runs.manager.new_run_id``).
_ID_TAIL = 21


def group_from_json(group: str, raw: bytes) -> MultiNodeRecord:
    """The group's record from its ``nodes.json``; an unreadable one is a one-line error."""
    try:
        return MultiNodeRecord.from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise ServelabError(f"{group}: unreadable {GROUP_JSON}: {exc}") from None


def node_run_id(group: str, rank: int, index: int, role: str) -> str:
    """``<experiment>.n<rank>-<stamp>-<hex>`` (``.n<rank>.<role>`` for a node's later processes): an
    ordinary run id, so every run tool reads a node's run, and the group's id is plain to see."""
    exp, tail = group[:-_ID_TAIL], group[-_ID_TAIL:]
    return f"{exp}.n{rank}{tail}" if index == 0 else f"{exp}.n{rank}.{role}{tail}"


T = TypeVar("T")


async def follow_node(runs: RunsAPI, n: NodeRun) -> AsyncGenerator[tuple[int, bytes], None]:
    """One node process's log as :meth:`Runs.follow` gives it (end offset, bytes), which keeps asking a
    host whose link drops and goes on from its offset. Twice: the second pass, after a settle, takes
    what the engine's children wrote while they died (after the run's exit code was written)."""
    offset = 0
    for settle in (0.0, LATE_LINES_SETTLE_S):
        await asyncio.sleep(settle)
        async for offset, chunk in runs.follow(n.run_id, offset):
            yield offset, chunk


async def merge_nodes(nodes: list[NodeRun], pump: Callable[[NodeRun, Callable[[T], Awaitable[None]]], Awaitable[None]], what: str) -> AsyncGenerator[T, None]:
    """What one ``pump`` per node puts, in the order it comes, until every pump has ended.

    A pump that fails ends the merge with one line naming ``what`` was followed."""
    queue: asyncio.Queue[T | None] = asyncio.Queue()

    async def run(n: NodeRun) -> None:
        try:
            await pump(n, queue.put)
        finally:
            await queue.put(None)

    tasks = [asyncio.create_task(run(n)) for n in nodes]
    left = len(tasks)
    try:
        while left:
            item = await queue.get()
            if item is None:
                left -= 1
                continue
            yield item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for t in tasks:
            if not t.cancelled() and t.exception() is not None:
                raise ServelabError(f"following {what} failed: {t.exception()}")


class MultiNodeRuns:
    """Launch, status, merged log and stop of multi-node runs, on top of :class:`engines.runs.manager.Runs`."""

    def __init__(self, runs: RunsAPI) -> None:
        self.runs = runs
        self.catalog = runs.catalog

    # -- launch -----------------------------------------------------------------------------------
    def plans(self, exp: SourcedExperiment, *, rehearsal: bool = False) -> list[NodePlan]:
        """Each node's processes; for a rehearsal every engine process's spec goes through the
        adapter's ``rehearsal_spec`` (dummy weights). A helper daemon (Ray's ``ray start``) loads no
        weights and runs as in the launch: the engine processes it hosts take the head's load config."""
        plans = self.catalog.node_plans(exp)
        if not plans:
            raise ServelabError(f"{exp.name}: not a multi-node experiment (it names one host)")
        if not rehearsal:
            return plans
        adapter, e = get_adapter(exp.experiment.engine), exp.experiment
        return [
            replace(p, processes=[proc if is_ray_daemon(proc.role) else replace(proc, spec=adapter.rehearsal_spec(e, proc.spec)) for proc in p.processes])
            for p in plans
        ]

    async def preflight(self, exp: SourcedExperiment, progress: Callable[[NodeCheck], None] | None = None) -> list[NodeCheck]:
        """Each node process's own check (seconds) on every node at once, then servelab's preflight
        on every node's host at once. A node failing its check skips the slow round: the launch
        cannot go ahead anyway, and the check's words are the answer. The patch set is checked on
        every node first and applied on each only once all passed, so a node whose patch does not
        apply leaves every node's package as it was."""
        from servelab.engines.catalog.patches import PatchReport, apply_patches, load_patch_set
        from servelab.engines.preflight.checks import run_preflight

        plans = self.plans(exp)

        async def own(plan: NodePlan) -> NodeCheck:
            cfg = self.catalog.host(plan.node.host)
            for proc in plan.processes:
                why = await self._process_check(cfg, proc)
                if why is not None:
                    return NodeCheck(plan.node.rank, plan.node.host, False, f"{proc.role}: {why}")
            return NodeCheck(plan.node.rank, plan.node.host, True, "ok")

        checked: dict[int, PatchReport] = {}  # rank -> its patch set's check (patches are applied only once every node passed)

        async def full(plan: NodePlan) -> NodeCheck:
            cfg = self.catalog.host(plan.node.host)
            try:
                report = await run_preflight(self.catalog, exp, cfg, apply=False)
            except (ServelabError, HostUnreachable) as exc:
                return NodeCheck(plan.node.rank, plan.node.host, False, str(exc))
            if not report.ok:
                return NodeCheck(plan.node.rank, plan.node.host, False, report.summary())
            if report.patches is not None:
                checked[plan.node.rank] = report.patches
            return NodeCheck(plan.node.rank, plan.node.host, True, "ok")

        async def apply(plan: NodePlan, check: NodeCheck) -> NodeCheck:
            """The node's patch set, applied where preflight checked it (all or nothing on the node)."""
            rep = checked.get(plan.node.rank)
            if rep is None:
                return check
            cfg = self.catalog.host(plan.node.host)
            try:
                done = await apply_patches(self.runs.host(cfg.name), load_patch_set(exp), rep.root, python=cfg.python, imports=False)
            except (ServelabError, HostUnreachable) as exc:
                return replace(check, ok=False, detail=f"patch set: {exc}")
            if not done.ok:
                return replace(check, ok=False, detail=f"patch set: apply failed, nothing changed on this node: {done.error}")
            return replace(check, patches=dict(done.record()))

        checks = list(await asyncio.gather(*(own(p) for p in plans)))
        if all(c.ok for c in checks):
            checks = list(await asyncio.gather(*(full(p) for p in plans)))
        if all(c.ok for c in checks):
            checks = list(await asyncio.gather(*(apply(p, c) for p, c in zip(plans, checks))))
        for c in checks:
            if progress is not None:
                progress(c)
        return checks

    async def _process_check(self, cfg: HostConfig, proc: NodeProcess) -> str | None:
        """Run the process's own check on its host with its environment; the failure's last line."""
        if proc.check is None:
            return None
        h = self.runs.host(cfg.name)
        try:
            if proc.check_script is not None:
                done = await run_script(h, proc.check[0], proc.check_script, *proc.check[1:], env=dict(proc.spec.env), timeout=120.0)
            else:
                done = await h.run(list(proc.check), env=dict(proc.spec.env), timeout=120.0)
        except ScriptUploadError as exc:
            return str(exc)
        except FileNotFoundError as exc:
            return f"cannot run {proc.check[0]}: {exc.strerror or exc}"
        except HostUnreachable as exc:
            return str(exc)
        if done.ok:
            return None
        lines = [ln for ln in done.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
        last = lines[-1].strip() if lines else f"exit code {done.exit_code}"
        if done.exit_code == 127 or "No such file" in last:
            return f"cannot run {proc.check[0]}: {last}"
        return f"{proc.check_label or ' '.join(proc.check[1:]) or proc.check[0]} failed: {last}"

    async def launch(
        self, exp_name: str, *, skip_preflight: bool = False, progress: Callable[[NodeCheck], None] | None = None, rehearsal: bool = False,
    ) -> MultiNodeRecord:
        """Preflight every node, then start the node processes in the mechanism's order.

        A failing node stops the launch before anything starts; a process that cannot start
        stops the ones already started (only those), and the error names the node. ``rehearsal``:
        every node's engine with the adapter's ``rehearsal_spec`` (see :meth:`plans`), each node's
        run and the group marked so (``engines/rehearsal`` watches the group and stops it).
        """
        exp = self.catalog.get(exp_name)
        problems = [p for e in self.catalog.entries if e.experiment is exp for p in e.problems]
        if problems:
            raise ServelabError(f"{exp.name}: definition has problems: {problems[0]} (run 'servelab check {exp.name}')")
        plans = self.plans(exp, rehearsal=rehearsal)
        patched: dict[int, dict[str, Any]] = {}  # rank -> the patch record its preflight applied
        if not skip_preflight:
            checks = await self.preflight(exp, progress)
            patched = {c.rank: c.patches for c in checks}
            bad = [c for c in checks if not c.ok]
            if bad:
                first = bad[0]
                raise ServelabError(f"{exp.name}: node {first.rank} ({first.host}) failed preflight, nothing started: {first.detail}")
        group = new_run_id(exp.name)
        e = exp.experiment
        mn = e.multinode
        assert mn is not None  # plans() refused a single-host experiment
        nodes = [
            NodeRun(p.node.rank, p.node.host, proc.role, node_run_id(group, p.node.rank, i, proc.role), proc.serves)
            for p in plans
            for i, proc in enumerate(p.processes)
        ]
        record = MultiNodeRecord(
            group, exp.name, e.engine, mn.backend, nodes, dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), mn.rendezvous_s, rehearsal,
        )
        by_rank = {p.node.rank: p for p in plans}
        started: list[str] = []
        head_cfg = self.catalog.host(plans[0].node.host)
        first_head = node_run_id(group, plans[0].node.rank, 0, plans[0].processes[0].role)
        for rank, index in start_order(plans):
            plan = by_rank[rank]
            proc = plan.processes[index]
            cfg = self.catalog.host(plan.node.host)
            rid = node_run_id(group, rank, index, proc.role)
            try:
                rec = await self.runs.start_spec(
                    exp, cfg, proc.spec, rid, proc.port if proc.port is not None else e.port + rank, patched.get(rank, {}), rehearsal=rehearsal,
                )
            except ServelabError as exc:
                await self._stop_ids(started)
                raise ServelabError(f"node {rank} ({plan.node.host}) {proc.role} did not start: {exc}") from None
            started.append(rec.id)
            if proc.up_line is not None:
                why = await self._wait_up(rec, proc.up_line, proc.up_timeout_s)
                if why is not None:
                    await self._stop_ids(started)
                    raise ServelabError(f"node {rank} ({plan.node.host}) {proc.role} did not come up, nothing left running: {why}")
        h = self.runs.host(head_cfg.name)
        head_rec = await self._record(first_head)
        await h.write_bytes(f"{head_rec.run_dir}/{GROUP_JSON}", json.dumps(record.to_json(), indent=1).encode())
        return record

    async def _wait_up(self, rec: RunRecord, line: str, timeout: float) -> str | None:
        """Wait until ``line`` is in the run's log (a daemon its peers need, e.g. Ray's head), or
        say why not: the process ended (its last log line, in its own words) or took too long."""
        h = self.runs.host(rec.host)
        deadline = time.monotonic() + timeout
        needle = line.encode()
        while True:
            try:
                data = await h.read_bytes(rec.log_path, 0, 1 << 20)
            except FileNotFoundError:
                data = b""
            if needle in data:
                return None
            st = await self.runs.status(rec.id)
            last = next((ln.strip() for ln in reversed(data.decode("utf-8", "replace").splitlines()) if ln.strip()), "")
            if not st.alive:
                return f"it exited (code {st.exit_code}) before {line!r}: {last or 'no output'}"
            if time.monotonic() > deadline:
                return f"no {line!r} in its log after {timeout:.0f} s; last line: {last or 'none'}"
            await asyncio.sleep(0.5)

    async def _record(self, run_id: str) -> RunRecord:
        _, rec = await self.runs.find(run_id)
        return rec

    # -- look-ups ---------------------------------------------------------------------------------
    async def load(self, group: str, at: Located | None = None) -> MultiNodeRecord:
        """The group's ``nodes.json``, read from the head's first run folder (``at``: that run, located before)."""
        head = node_run_id(group, 0, 0, "")
        raw = await self.runs.read_artifact(at if at is not None else head, GROUP_JSON)
        if raw is None:
            raise ServelabError(f"{group}: no such multi-node run (no {GROUP_JSON} beside {head})")
        return group_from_json(group, raw)

    async def find_group(self, run_id: str) -> MultiNodeRecord | None:
        """The multi-node run whose group id is ``run_id``, or None when no host holds such a group."""
        from servelab.engines.runs.records import NoSuchRun

        try:
            return await self.load(run_id)
        except NoSuchRun:
            return None

    def status_json(self, st: MultiNodeStatus) -> dict[str, object]:
        """``servelab nodes --json``: the group, each node's own status document, the cross-node cause and hint."""
        cause = st.root_cause
        return {
            "run": st.record.id,
            "experiment": st.record.experiment,
            "engine": st.record.engine,
            "backend": st.record.backend,
            "ready": st.ready,
            "ended": st.ended,
            "nodes": [
                {"rank": n.node.rank, "host": n.node.host, "role": n.node.role, "run": n.node.run_id, "serves": n.node.serves,
                 "unreachable": n.unreachable, "status": n.status.to_json() if n.status is not None else None,
                 "patches": n.status.record.patches if n.status is not None else None}
                for n in st.nodes
            ],
            "root_cause": None if cause is None else {
                "rank": cause.rank, "host": cause.host, "role": cause.role, "run": cause.run_id, "summary": cause.summary, "at": cause.at,
                "root_cause": cause.root_cause.to_json() if cause.root_cause is not None else None,
            },
            "hint": None if st.hint is None else st.hint.render(),
        }

    async def status(self, record: MultiNodeRecord, *, now: float | None = None) -> MultiNodeStatus:
        """Every node's status (a node that cannot be reached says so), the first failure, the hint."""

        async def one(n: NodeRun) -> NodeState:
            try:
                return NodeState(n, await self.runs.status(n.run_id))
            except ServelabError as exc:
                return NodeState(n, None, unreachable=str(exc))

        states = list(await asyncio.gather(*(one(n) for n in record.nodes)))
        ended = [
            n for n in states
            if n.status is not None and not n.status.alive and (n.status.exit_code not in (None, 0) or n.status.record.status == RunState.LOST)
        ]
        tails = dict(await asyncio.gather(*(self._last_stamp(n) for n in ended)))
        grammar = get_adapter(record.engine).rendezvous
        if record.rendezvous_s is not None:
            grammar = replace(grammar, expected_s=record.rendezvous_s)
        waiting = {n.node.rank: (n.node.host, await self._lines(n)) for n in live_logs(states)}
        argvs = {n.node.rank: n.status.record.argv for n in states if n.status is not None and not n.node.role.startswith("ray")}
        return MultiNodeStatus(record, states, first_failure(states, tails), rendezvous_hint(grammar, waiting, now=now, argvs=argvs))

    async def _lines(self, n: NodeState, limit: int = 4 << 20) -> list[str]:
        """A not-yet-ready node's log (small before the engine is up), as lines."""
        assert n.status is not None
        rec = n.status.record
        try:
            data = await self.runs.host(rec.host).read_bytes(rec.log_path, 0, limit)
        except (FileNotFoundError, HostUnreachable):
            return []
        return data.decode("utf-8", "replace").splitlines()

    async def _last_stamp(self, n: NodeState) -> tuple[str, float | None]:
        """The time of the node's last timestamped line (read from the last 16 kB of its log)."""
        assert n.status is not None
        rec = n.status.record
        h = self.runs.host(rec.host)
        try:
            size = await h.size(rec.log_path)
            data = await h.read_bytes(rec.log_path, max(0, size - 16384), None)
        except (FileNotFoundError, HostUnreachable):
            return n.node.run_id, None
        year = dt.datetime.now().year
        for ln in reversed(data.decode("utf-8", "replace").splitlines()):
            t = stamp_of(ln, year)
            if t is not None:
                return n.node.run_id, t
        return n.node.run_id, None

    # -- the merged log ---------------------------------------------------------------------------
    async def follow(self, record: MultiNodeRecord) -> AsyncGenerator[NodeLine, None]:
        """Every node's log as whole lines tagged with the node, until every node has ended.

        Each node is followed by :meth:`Runs.follow`, which keeps asking a host whose link drops
        and continues from its byte offset, so no line is lost or repeated.
        """

        async def pump(n: NodeRun, put: Callable[[NodeLine], Awaitable[None]]) -> None:
            rest = b""
            async for _, chunk in follow_node(self.runs, n):
                rest += chunk
                *whole, rest = rest.split(b"\n")
                for ln in whole:
                    await put(NodeLine(n.rank, n.host, n.role, ln.decode("utf-8", "replace").rstrip("\r")))
            if rest:
                await put(NodeLine(n.rank, n.host, n.role, rest.decode("utf-8", "replace")))

        async with aclosing(merge_nodes(record.nodes, pump, "the merged log")) as merged:
            async for line in merged:
                yield line

    # -- stop -------------------------------------------------------------------------------------
    async def stop(self, record: MultiNodeRecord, grace: float = 10.0) -> StopReport:
        """Stop every node process servelab started for this run (head first, then workers, at once).

        Every live node is marked stop-requested before any node is signalled: once one node goes,
        its peers die of the broken link on their own (gloo's "Connection reset by peer"), often
        before their own SIGTERM arrives over SSH. A node that exits that way during the stop was
        stopped by it, not crashed. A Ray run's engine processes go before its Ray daemons, each
        stopped through its own runctl session (never ``ray stop``, which ends every Ray on a host),
        workers before the head, each ``ray start`` leader first: it stops its own daemons in order
        in 1-3 s, where a SIGTERM to all of them at once takes over 20 s.
        """
        ids = [n.run_id for n in sorted(record.nodes, key=lambda n: (not n.serves, n.rank))]
        await asyncio.gather(*(self._mark_stop_requested(rid) for rid in ids))
        daemons = {n.run_id: n.rank for n in record.nodes if is_ray_daemon(n.role)}
        if not daemons:
            return await self._stop_ids(ids, grace)
        # the engine first (it leaves the cluster cleanly), then the Ray workers, then the Ray head
        # (a worker whose head has gone waits for it and outlasts any grace)
        t0 = time.monotonic()
        report = await self._stop_ids([i for i in ids if i not in daemons], grace)
        for wave in ([i for i, r in daemons.items() if r != 0], [i for i, r in daemons.items() if r == 0]):
            rest = await self._stop_ids(wave, grace, leader_first=True)
            report.stopped += rest.stopped
            report.problems += rest.problems
        report.seconds = time.monotonic() - t0
        return report

    async def _mark_stop_requested(self, run_id: str) -> None:
        """runctl's own stop-requested marker in a node's run folder, unless the node already exited."""
        from servelab.engines.helpers.runctl import STOP_REQUESTED

        try:
            h, rec = await self.runs.find(run_id)
            if rec.exit_code is None:
                await h.write_bytes(f"{rec.run_dir}/{STOP_REQUESTED}", f"{time.time():f}\n".encode())
        except (ServelabError, HostUnreachable, OSError):
            return  # the stop itself reports this node

    async def _stop_ids(self, ids: list[str], grace: float = 10.0, leader_first: bool = False) -> StopReport:
        report = StopReport()
        t0 = time.monotonic()

        async def one(rid: str) -> None:
            try:
                report.stopped.append(await self.runs.stop(rid, grace, leader_first=leader_first, engine_plan=False))
            except ServelabError as exc:
                report.problems.append(f"{rid}: {exc}")

        await asyncio.gather(*(one(r) for r in ids))
        report.seconds = time.monotonic() - t0
        return report


def live_logs(states: list[NodeState]) -> list[NodeState]:
    """Nodes whose join can still hang: alive and not yet ready."""
    return [n for n in states if n.status is not None and n.status.alive and not (n.status.analysis and n.status.analysis.was_ready)]


def _failure_of(n: NodeState, last_stamp: float | None) -> NodeFailure | None:
    """The node's failure, if it failed: its log's root cause, or its exit (a SIGKILL leaves none).

    ``last_stamp`` is the time of the node's last timestamped log line, when the failure line
    itself carries no time (a process killed mid-load stops logging when it dies).
    """
    st = n.status
    if st is None or st.alive:
        return None
    a = st.analysis
    crashed = a is not None and a.state == RunState.CRASHED
    killed = st.exit_code is not None and st.exit_code != 0 and st.record.status != RunState.STOPPED
    lost = st.record.status == RunState.LOST
    if not crashed and not killed and not lost:
        return None
    rc = a.root_cause if a is not None else None
    year = dt.datetime.now().year
    at: float | None = None
    if rc is not None:
        at = next((t for t in (stamp_of(x, year) for x in rc.excerpt) if t is not None), None)
    if at is None:
        at = last_stamp
    if rc is not None:
        summary = f"{rc.exception}: {rc.message}" if rc.exception else rc.message
    elif st.exit_code is not None and (st.exit_code < 0 or st.exit_code > 128):
        sig = -st.exit_code if st.exit_code < 0 else st.exit_code - 128
        summary = f"killed by signal {sig} with no error in its log"
    elif st.exit_code is None:
        summary = "its processes are gone with no exit code and no error in its log (killed together with servelab's supervisor)"
    else:
        summary = f"exited with code {st.exit_code} with no error in its log"
    return NodeFailure(n.node.rank, n.node.host, n.node.role, n.node.run_id, rc, summary, at)


def failure_line(rc: NodeFailure) -> str:
    """The cross-node root cause in one line, naming the node."""
    return f"node {rc.rank} ({rc.host}, {rc.role}) failed first: {rc.summary}"


def first_failure(states: list[NodeState], last_stamps: dict[str, float | None] | None = None) -> NodeFailure | None:
    """The failure that came first across nodes: the earliest by time; a node with no time after
    those that have one; ties to the worker (the head's error usually reports the worker's death)."""
    stamps = last_stamps or {}
    found = [f for f in (_failure_of(n, stamps.get(n.node.run_id)) for n in states) if f is not None]
    if not found:
        return None
    return min(found, key=lambda f: (f.at is None, f.at or 0.0, -f.rank))
