"""``servelab launch``, ``runs``, ``status``, ``logs``, ``stop`` and ``cleanup``: the run lifecycle.

Each command is one ``asyncio.run`` over :class:`engines.runs.manager.Runs`; the hosts it opened are closed
before it returns. Every expected failure is a ``ServelabError`` (one line, exit 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.errors import ServelabError
from servelab.engines.runs.loadtime import load_seconds, load_text
from servelab.engines.logs.live import current_stage
from servelab.engines.runs.history import accept_text, ended_words, engine_state, probe_of
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.runs.records import KnownRun, Located, NoSuchRun
from servelab.engines.runs.manager import CHUNK, Runs
from servelab.engines.runs.state import EngineState, RunState
from servelab.tui.commands.hostloop import run_on_hosts

T = TypeVar("T")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("launch", help="start an experiment detached on its host (preflight first)")
    p.add_argument("experiment")
    p.add_argument("--host", help="run on this host instead of the experiment's")
    p.add_argument("--follow", action="store_true", help="then print the engine log until it ends")
    p.add_argument("--json", action="store_true", help='print {"run": ID, ...}')
    p.add_argument("--skip-preflight", action="store_true", help="launch without the preflight checks")
    p.set_defaults(func=cmd_launch)

    p = sub.add_parser("nodes", help="a multi-node run's nodes: each one's state, the first failing node, the rendezvous hint")
    p.add_argument("run", help="the multi-node run's id (what launch printed)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_nodes)

    p = sub.add_parser("runs", help="list runs on every host (or one)")
    p.add_argument("--host")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("status", help="a run's state: pid, alive, exit code and the log analysis")
    p.add_argument("run")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("logs", help="print a run's engine log")
    p.add_argument("run")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")
    p.add_argument("--errors", action="store_true", help="only error and traceback lines")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("stop", help="SIGTERM the run's process group, SIGKILL after a grace period (every node of a multi-node run)")
    p.add_argument("run")
    p.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL (default 10)")
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("cleanup", help="remove leftovers of ended servelab runs (processes, /dev/shm files)")
    p.add_argument("--host")
    p.add_argument("--yes", "-y", action="store_true", help="remove without asking")
    p.set_defaults(func=cmd_cleanup)


def _with_runs(args: argparse.Namespace, body: Callable[[Runs], Awaitable[T]]) -> T:
    """Run ``body`` in a fresh event loop and close every host it opened."""
    return run_on_hosts(lambda: body(Runs(load_catalog(args.dir))))


def cmd_launch(args: argparse.Namespace) -> int:
    async def body(runs: Runs) -> int:
        multinode = runs.catalog.get(args.experiment).experiment.spans_hosts  # a run per host (one scheduler job is one run)
        if multinode and args.host:
            raise ServelabError(f"--host: {args.experiment} names its own hosts (hosts = [...]); a multi-node run cannot be moved")
        if not args.skip_preflight:
            from servelab.engines.runs.rehearsal import before_launch  # httpx and the rehearsal only when launching

            await before_launch(runs, args.experiment, args.host, say=lambda line: print(line, file=sys.stderr, flush=True))
        if multinode:
            return await _launch_nodes(runs, args)
        rec = await runs.launch(args.experiment, args.host, skip_preflight=args.skip_preflight)
        placement = runs.placement(runs.catalog.host(rec.host))
        if args.json:
            facts = placement.launch_facts(rec)
            print(json.dumps({"run": rec.id, "host": rec.host, "pid": rec.pid, "port": rec.port, "log_path": rec.log_path, "run_dir": rec.run_dir, **facts}), flush=True)
        else:
            print(rec.id, flush=True)
        note = placement.launch_note(rec)
        if note is not None:  # stderr: stdout stays the run id
            print(note, file=sys.stderr, flush=True)
        if args.follow:
            await _print_log(runs, rec.id, follow=True, errors=False)
        return 0

    return _with_runs(args, body)


async def _launch_nodes(runs: Runs, args: argparse.Namespace) -> int:
    """A multi-node experiment: every node's preflight, then its processes in the mechanism's order."""
    from servelab.engines.nodes.run import MultiNodeRuns, NodeCheck

    if args.host:
        raise ServelabError(f"--host: {args.experiment} names its own hosts (hosts = [...]); a multi-node run cannot be moved")

    def said(check: NodeCheck) -> None:
        print(f"preflight  node {check.rank} ({check.host}): {'ok' if check.ok else check.detail}", file=sys.stderr, flush=True)

    nodes = MultiNodeRuns(runs)
    record = await nodes.launch(args.experiment, skip_preflight=args.skip_preflight, progress=said)
    if args.json:
        listed = [{"rank": n.rank, "host": n.host, "role": n.role, "run": n.run_id, "serves": n.serves} for n in record.nodes]
        print(json.dumps({"run": record.id, "backend": record.backend, "nodes": listed}), flush=True)
    else:
        print(record.id, flush=True)
        for n in record.nodes:
            print(f"  node {n.rank}  {n.host}  {n.role}  {n.run_id}", file=sys.stderr, flush=True)
    if args.follow:
        async for line in nodes.follow(record):
            print(line.render(), flush=True)
    return 0


def cmd_nodes(args: argparse.Namespace) -> int:
    async def body(runs: Runs) -> int:
        return await _print_nodes(runs, args.run, as_json=args.json)

    return _with_runs(args, body)


async def _group_head(runs: Runs, ref: str) -> str | None:
    """The head's run id when ``ref`` is a multi-node run's group id (not itself a run), else None."""
    from servelab.engines.runs.records import RunKind

    try:
        resolved = await runs.resolve(ref)
    except NoSuchRun:
        return None
    return resolved.head.id if resolved.kind is RunKind.GROUP else None


async def _print_nodes(runs: Runs, ref: str, *, as_json: bool) -> int:
    """``servelab nodes``: a multi-node run (its group id or any node's run id), node by node."""
    from servelab.engines.nodes.run import MultiNodeRuns
    from servelab.engines.nodes.resolve import resolve_group_run
    from servelab.engines.nodes.view import current_view, lanes_json

    nodes = MultiNodeRuns(runs)
    group = (await resolve_group_run(runs, ref))[1]  # the group's id or any node's
    st = await nodes.status(group if group is not None else await nodes.load(ref))
    view = await current_view(runs, st)
    if as_json:
        print(json.dumps({**nodes.status_json(st), "rows": lanes_json(view)}, indent=2, default=str))
        return 0
    r = st.record
    print(f"{r.id}  {r.engine} {r.backend}, {len(r.nodes)} node processes  ({'ready' if st.ready else 'ended' if st.ended else 'not ready'})")
    for n in st.nodes:
        if n.status is None:
            print(f"  node {n.node.rank}  {n.node.host:<10} {n.node.role:<7} {n.node.run_id}  unreachable: {n.unreachable}")
            continue
        a = n.status.analysis
        stage = current_stage(a) if a is not None else None
        where = f", {stage.name} ({stage.status})" if stage is not None else ""
        print(f"  node {n.node.rank}  {n.node.host:<10} {n.node.role:<7} {n.node.run_id}  {n.status.record.status}, {a.state if a else '-'}{where}")
        patched = n.status.record.patches
        if patched.get("patches"):
            names = ", ".join(f"{name} {digest[:12]}" for name, digest in patched["patches"].items())
            print(f"           patches under {patched.get('root')}: {names}")
    for lv in view.lanes:  # a stage row per node, or per rank where the lines carry rank tags
        stage = lv.stage
        print(f"  row  {lv.lane.label:<18} {lv.state:<8} {stage.name + ' (' + stage.status + ')' if stage is not None else '-'}")
    if st.root_cause is not None:
        print(f"root cause  node {st.root_cause.rank} ({st.root_cause.host}): {st.root_cause.summary}")
    if st.hint is not None:
        print(f"hint        {st.hint.render()}")
    return 0


def _row(known: KnownRun, engine: EngineState | None = None) -> dict[str, Any]:
    rec = known.record
    return {
        "run": rec.id,
        "experiment": rec.experiment,
        "host": rec.host,
        "status": rec.status,
        # what its engine does (loading, ready, serving; ended): the log's word for a live run
        "engine_state": engine if engine is not None else (EngineState.ENDED if rec.status.is_terminal else EngineState.UNKNOWN),
        "ended": ended_words(rec) if rec.status.is_terminal else None,
        "rehearsal": rec.rehearsal,
        "launched_by": rec.launched_by,
        "launched_from": rec.launched_from,
        "servelab_instance": rec.servelab_instance,
        "pid": rec.pid,
        "exit_code": rec.exit_code,
        "port": rec.port,
        "started_at": rec.started_at,
        # the host did not answer: this is its state as last seen, and when that was checked
        "last_known": known.stale,
        "host_note": known.down.note if known.down is not None else None,
    }


RUNS_COLUMNS = ("RUN", "HOST", "STATUS", "ENGINE", "PID", "ENDED", "PORT", "STARTED", "BY")


def _cells(r: dict[str, Any]) -> list[str]:
    exit_code = "-" if r["exit_code"] is None else str(r["exit_code"])
    status = f"{r['status']}?" if r["last_known"] else str(r["status"])  # ? = last known: its host did not answer
    if r["rehearsal"]:
        status += " (rehearsal)"
    engine = "-" if r["engine_state"] in (EngineState.ENDED, EngineState.UNKNOWN) else str(r["engine_state"])
    if r["ended"]:  # how it ended, in the one wording (history.ended_words): "stopped · SIGTERM", "exited · exit code 1"
        exit_code = r["ended"]
    who = r["launched_by"] + (f"@{r['launched_from']}" if r["launched_from"] else "") if r["launched_by"] else "-"
    return [r["run"], r["host"], status, engine, str(r["pid"] or "-"), exit_code, str(r["port"]), r["started_at"], who]


def runs_table(rows: list[list[str]], *, terminal: bool, width: int | None = None) -> str:
    """The runs as text. A run id is never broken: a pipe gets whole rows, one per line, at any width;
    a terminal gets a table that folds other columns (never the id) to fit."""
    if not terminal:
        widths = [max(len(c) for c in col) for col in zip(RUNS_COLUMNS, *rows, strict=True)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() for cells in (list(RUNS_COLUMNS), *rows)]
        return "\n".join(lines) + "\n"
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    longest = max((len(r[0]) for r in rows), default=3)
    for col in RUNS_COLUMNS:
        if col == "RUN":
            table.add_column(col, no_wrap=True, min_width=longest)
        else:
            table.add_column(col, overflow="fold")
    for cells in rows:
        table.add_row(*cells)
    console = Console(width=width, force_terminal=terminal if width is not None else None, color_system=None if width is not None else "auto")
    with console.capture() as cap:
        console.print(table)
    return cap.get()


def cmd_runs(args: argparse.Namespace) -> int:
    async def body(runs: Runs) -> int:
        known = await runs.list_known(args.host)
        rows = [_row(k, await _engine_state(runs, k)) for k in known]
        if args.json:
            print(json.dumps({"runs": rows, "unreachable": runs.unreachable}, indent=2))
        else:
            print(runs_table([_cells(r) for r in rows], terminal=sys.stdout.isatty()), end="")
            if not rows:
                print("no runs", file=sys.stderr)
        down = runs.hosts_down()
        for name, why in runs.unreachable.items():
            note = down[name].note if name in down else "unreachable"
            print(f"servelab: host {name} {note}: {why} (its runs: last known state, marked ?)", file=sys.stderr)
        return 0

    return _with_runs(args, body)


async def _engine_state(runs: Runs, known: KnownRun) -> EngineState | None:
    """A live run's engine state from its log (one look); None for an ended or stale run."""
    rec = known.record
    if known.stale or not rec.status.is_active or not runs.placement(runs.catalog.host(rec.host)).engine_state_in_listing(rec):
        return None
    try:
        return engine_state(await runs.status(Located(runs.host(rec.host), rec)))
    except (ServelabError, HostUnreachable, OSError):
        return EngineState.UNKNOWN


async def _run_of(runs: Runs, ref: str) -> str:
    """A run id, or an experiment's name standing for its latest run (said on stderr)."""
    run_id = await runs.latest_of(ref)
    if run_id is None:
        if any(e.name == ref for e in runs.catalog.experiments):
            raise ServelabError(f"no runs of {ref} yet (start one: servelab launch {ref})")
        return ref  # neither: the look-up below gives its own one-line error
    if run_id != ref:
        print(f"servelab: {ref} is an experiment: its latest run is {run_id}", file=sys.stderr, flush=True)
    return run_id


def cmd_status(args: argparse.Namespace) -> int:
    async def body(runs: Runs) -> int:
        run_id = await _run_of(runs, args.run)
        try:
            st = await runs.status(run_id)
        except NoSuchRun:
            if await _group_head(runs, run_id) is None:
                raise
            print(f"servelab: {run_id} is a multi-node run: each node's status follows (as `servelab nodes`)", file=sys.stderr, flush=True)
            return await _print_nodes(runs, run_id, as_json=args.json)
        data = st.to_json()
        state = engine_state(st)
        probe = await probe_of(runs, st.record.id)
        data["engine_state"] = state
        data["ended"] = ended_words(st.record) if st.record.status.is_terminal else None
        data["probe"] = dict(probe) if probe is not None else None  # the probe's figures (probe.json's summary)
        if args.json:
            print(json.dumps(data, indent=2, default=str))
            return 0
        r = st.record
        what = f"{r.status}" + (" (rehearsal)" if r.rehearsal else "")
        how = f"engine {state}, pid {r.pid or '-'}" if st.alive else ended_words(r) if r.status.is_terminal else f"pid {r.pid or '-'}"
        print(f"{r.id}  {what}  (host {r.host}, {how})")
        if r.launched_by:
            print(f"{'by':<9} {r.owner.label} (servelab {r.servelab_instance or '-'})")
        print(f"log       {r.log_path}")
        if probe is not None:
            tps = probe.output_throughput
            acc = accept_text(_num(probe.acceptance_rate), _num(probe.acceptance_length))
            print(f"{'probe':<9} " + ", ".join(x for x in (f"{tps:.1f} tok/s" if tps is not None else "", f"acceptance {acc}" if acc else "") if x))
        target = r.target.get("fingerprint") or "- (not a readable safetensors folder)"
        print(f"{'weights':<9} target {target} ({r.model})" + (f", drafter {r.drafter_fingerprint}" if r.drafter_fingerprint else ""))
        if st.job is not None:  # a batch job: its scheduler's view, in the core's words
            where = f", nodes {st.job.node_list}, head {st.record.head_node} at {st.record.head_address}" if st.job.node_list else ""
            print(f"{st.job.scheduler:<9} job {st.job.job_id}: {st.job.words}{where}")
            if st.job.started_at:
                print(f"{'started':<9} {st.job.started_at} (job start; submitted {st.job.submitted_at or '-'})")
        a = st.analysis
        if a is not None:
            print(f"{'state':<9} {a.state}")
            if (load := load_seconds(a, None, st.record.started_local)) is not None:
                print(f"{'load':<9} {load_text(load)} (start to ready)")
            stage = current_stage(a)
            if stage is not None:
                print(f"{'stage':<9} {stage.name} ({stage.status}{', ' + stage.detail if stage.detail else ''})")
            if a.root_cause is not None:
                print(f"{'root_cause':<9} {json.dumps(a.root_cause.to_json(), default=str)}")
            if a.hint:
                print(f"{'hint':<9} {a.hint}")
        elif st.analysis_error:
            print(f"{'analysis':<9} failed: {st.analysis_error}")
        return 0

    return _with_runs(args, body)


async def _print_log(runs: Runs, run_id: str, *, follow: bool, errors: bool) -> None:
    out = sys.stdout.buffer
    if not follow:
        host, rec = await runs.find(run_id)
        offset = 0
        pending = b""
        while True:  # in chunks: a log of gigabytes never sits in memory
            try:
                chunk = await host.read_bytes(rec.log_path, offset, CHUNK)
            except FileNotFoundError:
                chunk = b""
            if not chunk:
                break
            offset += len(chunk)
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            _emit(out, b"\n".join(lines) + b"\n" if lines else b"", errors)
        if pending:
            _emit(out, pending, errors)
        return
    pending = b""
    async for offset, chunk in runs.follow(run_id):
        if offset == 0 and not chunk:
            print("servelab: the log was truncated; reading it again from the start", file=sys.stderr)
            pending = b""
            continue
        if not errors:
            out.write(chunk)
            out.flush()
            continue
        pending += chunk
        lines = pending.split(b"\n")
        pending = lines.pop()
        _emit(out, b"\n".join(lines) + b"\n" if lines else b"", errors)
    if pending:
        _emit(out, pending, errors)


def _emit(out: Any, data: bytes, errors: bool) -> None:
    if not errors:
        out.write(data)
        out.flush()
        return
    from servelab.engines.logs.lines import LineKind, classify, strip_ansi

    wanted = {LineKind.ERROR, LineKind.TRACEBACK}
    for raw in data.splitlines():
        text = strip_ansi(raw).decode("utf-8", "replace")
        if classify(text) in wanted:
            out.write(raw + b"\n")
    out.flush()


def cmd_logs(args: argparse.Namespace) -> int:
    async def body(runs: Runs) -> None:
        run_id = await _run_of(runs, args.run)
        try:
            await runs.find(run_id)
            head = None
        except NoSuchRun:
            head = await _group_head(runs, run_id)
            if head is None:
                raise
        if head is not None:
            print(f"servelab: {run_id} is a multi-node run: its head's log is {head}'s (`servelab nodes {run_id}` lists every node's run)", file=sys.stderr, flush=True)
            run_id = head
        await _print_log(runs, run_id, follow=args.follow, errors=args.errors)

    return _with_runs(args, body) or 0


def cmd_stop(args: argparse.Namespace) -> int:
    async def body(runs: Runs) -> int:
        try:
            st = await runs.stop(args.run, grace=args.grace)
        except NoSuchRun:
            from servelab.engines.nodes.run import MultiNodeRuns

            nodes = MultiNodeRuns(runs)
            group = await nodes.find_group(args.run)
            if group is None:
                raise
            report = await nodes.stop(group, grace=args.grace)
            for s in report.stopped:
                print(f"{s.record.id}: {'stopped' if s.status is RunState.STOPPED else f'had already {s.status}'} (host {s.record.host})")
            for problem in report.problems:
                print(f"servelab: {problem}", file=sys.stderr)
            print(f"{group.id}: {len(report.stopped)} of {len(group.nodes)} node processes stopped in {report.seconds:.1f} s")
            return 1 if report.problems else 0
        if st.status is RunState.STOPPED:  # the signal servelab sent, whatever code the engine died with
            print(f"{st.record.id}: {ended_words(st.record)}" + (f" (removed {len(st.cleaned)} /dev/shm file(s) of its own)" if st.cleaned else ""))
        else:
            print(f"{st.record.id}: had already ended: {ended_words(st.record)}")
        return 0

    return _with_runs(args, body)


def cmd_cleanup(args: argparse.Namespace) -> int:
    async def plan(runs: Runs) -> tuple[list[str], dict[str, str]]:
        return await runs.cleanup(args.host, dry_run=True), runs.unreachable

    items, unreachable = _with_runs(args, plan)
    for name, why in unreachable.items():
        print(f"servelab: host {name} unreachable: {why}", file=sys.stderr)
    if not items:
        print("nothing to clean up")
        return 0
    print("will remove:")
    for item in items:
        print("  " + " ".join(item.split()))
    if not args.yes:
        if not sys.stdin.isatty():
            raise ServelabError("not removing anything without confirmation: run again with --yes")
        answer = input("remove these? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing removed")
            return 0

    async def apply(runs: Runs) -> list[str]:
        return await runs.cleanup(args.host, dry_run=False)

    done = _with_runs(args, apply)
    print(f"removed {len(done)} item(s)")
    return 0


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
