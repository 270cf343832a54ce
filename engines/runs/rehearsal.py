"""Rehearsal: the launch's whole start-up with dummy weights, before a long load.

``rehearse`` starts the experiment as an ordinary run marked ``rehearsal`` (the same preflight,
patch set, GPU lock and stop rules as a launch; ``Runs.launch(rehearsal=True)``), with the argv the
adapter's ``rehearsal_spec`` gives (``--load-format dummy`` for the target and the drafter). It
watches the run's own log analysis until ready or crashed, sends one short generation, records the
time to each stage, then stops the run and checks nothing of it is left. A crash anywhere on that
path (config, model construction, drafter set-up, KV cache, compile, graphs) shows its root cause
like any run, after the rehearsal's minutes instead of the checkpoint's half hour.

A good result is cached (``engines/preflight_cache``, kind ``rehearsal``) with the hash of each of
its inputs: interpreter, engine, flags, environment, patch set, model and drafter small files.
``rehearsal_note`` compares them with now, which is what a launch says ("rehearsed at 14:02, same
inputs" / "not rehearsed since the patch set changed") and what ``[launch] rehearse`` decides on.

A multi-node experiment rehearses on every node: ``MultiNodeRuns.launch(rehearsal=True)`` starts the
group as its launch would (every node's preflight, the mechanism's start order), each engine process
with the adapter's ``rehearsal_spec``; the rehearsal watches the head to ready and one generation,
takes the first node's failure as the root cause (naming the node), stops every node and runs each
node's own cleanup. Its inputs are hashed per node (``node_inputs``).

What dummy weights cannot show is said in every result (``CANNOT_SHOW``); for a checkpoint's own
faults, ``engines/checkpoint_check`` reads the safetensors headers (headers only; the head's copy).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

import httpx

from servelab.engines.preflight import cache as preflight_cache
from servelab.engines.catalog.folder import Catalog
from servelab.engines.preflight.checkpoint import CheckpointCheck, check_checkpoint
from servelab.engines.errors import ServelabError
from servelab.engines.catalog.experiment import SourcedExperiment
from servelab.engines.helpers import HelperError, run_helper
from servelab.engines.hosts.base import HostUnreachable, place_of
from servelab.engines.hosts.registry import open_host
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.logs.analysis import Analysis, stage_seconds
from servelab.engines.probe.client import until_listening
from servelab.engines.nodes.run import MultiNodeRecord, MultiNodeRuns, NodeCheck, NodeFailure, failure_line
from servelab.engines.catalog.patches import load_patch_set
from servelab.engines.runs.manager import Runs
from servelab.engines.runs.state import RunState, StageState
from servelab.engines.adapters.exchange import LaunchSpec

KIND = "rehearsal"
#: The inputs a rehearsal's answer depends on, in the words a launch says what changed.
PARTS: tuple[str, ...] = ("interpreter", "engine", "flags", "environment", "patch set", "model files", "drafter files")
#: What a rehearsal with dummy weights cannot show, said in every result.
CANNOT_SHOW: tuple[str, ...] = (
    "acceptance: the drafter's weights are random, so it accepts nothing; measure it with the real weights (servelab probe)",
    "the checkpoint's own faults: a missing shard, a KeyError on a weight name, a dtype mismatch in a file "
    "(no weight is read; see the checkpoint headers check)",
)
READY_TIMEOUT_S = 1800.0
POLL_S = 0.5
#: After a crash line, how long the rehearsal lets the engine finish writing its traceback and exit.
CRASH_SETTLE_S = 15.0
PROMPT = "The quick brown fox"
MAX_TOKENS = 8


@dataclass(frozen=True)
class RehearsalInputs:
    """sha256 of each input as the host has it now: ``PARTS`` for one host; for a multi-node
    experiment each part per node (``flags on node 1 (box)``), the patch set (servelab's own files) once."""

    parts: dict[str, str]

    @property
    def key(self) -> str:
        return preflight_cache.digest(KIND, self.parts)

    def changed_since(self, before: Mapping[str, str]) -> list[str]:
        keys = [*self.parts, *(k for k in before if k not in self.parts)]
        return [k for k in keys if before.get(k) != self.parts.get(k)]


async def _host_parts(catalog: Catalog, sourced: SourcedExperiment, cfg: HostConfig, specs: list[LaunchSpec]) -> dict[str, str]:
    """What preflight's cache keys on for what ``specs`` start on ``cfg``, read the same way (no engine import)."""
    from servelab.engines.adapters.base import get_adapter

    e = sourced.experiment
    h = open_host(cfg)
    try:
        facts = await run_helper(h, cfg.python, "hostinfo.py", get_adapter(e.engine).package, "--quick", timeout=60)
    except (HelperError, HostUnreachable, TimeoutError, asyncio.TimeoutError) as exc:
        raise ServelabError(f"{cfg.name}: cannot read the engine's version and root: {exc}") from None
    model = catalog.host_path(sourced, e.model, cfg)
    draft = catalog.host_path(sourced, e.speculative.draft_model, cfg) if e.speculative.draft_model else None
    d = preflight_cache.digest
    one = len(specs) == 1  # one host's hashes stay those of its one spec
    return {
        "interpreter": d(cfg.python),
        "engine": d(facts.get("package"), facts.get("version"), facts.get("root"), facts.get("torch_dist"), facts.get("gpu_devices")),
        "flags": d(specs[0].argv) if one else d([s.argv for s in specs]),
        "environment": d(specs[0].env) if one else d([s.env for s in specs]),
        "patch set": d([(p.name, p.sha256) for p in load_patch_set(sourced)]),
        "model files": d(await preflight_cache.folder_digest(h, model)),
        "drafter files": d(await preflight_cache.folder_digest(h, draft)),
    }


async def rehearsal_inputs(catalog: Catalog, sourced: SourcedExperiment, cfg: HostConfig) -> RehearsalInputs:
    """The inputs' hashes of a one-host experiment on ``cfg``."""
    return RehearsalInputs(await _host_parts(catalog, sourced, cfg, [catalog.launch_spec(sourced, cfg)]))


async def node_inputs(catalog: Catalog, sourced: SourcedExperiment) -> RehearsalInputs:
    """The inputs' hashes of a multi-node experiment, per node: each node's interpreter, engine,
    model and drafter files as its host has them, and the flags and environment of its processes."""
    plans = catalog.node_plans(sourced)
    per = await asyncio.gather(*(_host_parts(catalog, sourced, catalog.host(p.node.host), [proc.spec for proc in p.processes]) for p in plans))
    parts: dict[str, str] = {}
    for plan, one in zip(plans, per):
        for part, digest in one.items():
            parts[part if part == "patch set" else f"{part} on node {plan.node.rank} ({plan.node.host})"] = digest
    return RehearsalInputs(parts)


async def inputs_of(catalog: Catalog, sourced: SourcedExperiment, cfg: HostConfig | None = None) -> RehearsalInputs:
    """The inputs' hashes: every node's for a multi-node experiment, else ``cfg``'s (the experiment's host)."""
    if sourced.experiment.spans_hosts:
        return await node_inputs(catalog, sourced)
    return await rehearsal_inputs(catalog, sourced, cfg or catalog.host(sourced.experiment.host))


def _where(sourced: SourcedExperiment, cfg: HostConfig | None) -> str:
    """Where a rehearsal ran: the host, or a multi-node experiment's hosts, head first."""
    e = sourced.experiment
    if e.spans_hosts or cfg is None:
        return "+".join(e.nodes)
    return cfg.name


def _cache_key(sourced: SourcedExperiment, cfg: HostConfig | None) -> str:
    """The latest good rehearsal is kept per experiment definition (its file: a copy of the folder
    elsewhere is another experiment) and host, as the machine and work folder it names (a host
    entry of the same name in another hosts.toml is another host); a multi-node one per its hosts."""
    where: object = place_of(cfg) if cfg is not None and not sourced.experiment.spans_hosts else _where(sourced, cfg)
    return preflight_cache.digest(KIND, sourced.name, str(sourced.path.resolve()), where)


@dataclass(frozen=True)
class StageTime:
    """A start-up stage as the rehearsal saw it: reached ``reached_s`` after the start; the log's own duration."""

    name: str
    status: str
    reached_s: float | None
    seconds: float | None


@dataclass(frozen=True)
class Generation:
    """The one short generation sent once the server was ready."""

    ok: bool
    text: str
    seconds: float
    error: str | None = None


@dataclass(frozen=True)
class RehearsedNode:
    """One node process of a multi-node rehearsal: where it ran, its argv, how it ended."""

    rank: int
    host: str
    role: str
    run_id: str
    argv: tuple[str, ...]
    #: Its run's state once the rehearsal ended (``stopped`` when the rehearsal's stop ended it).
    state: str


@dataclass(frozen=True)
class RehearsalResult:
    """What one rehearsal found. ``ok``: it reached ready, answered, and left nothing behind.

    A multi-node rehearsal: ``run_id`` is the group's, ``host`` the head's, ``nodes`` every node
    process, ``argv`` the head's; ``root_cause`` names the node that failed first."""

    experiment: str
    host: str
    engine: str
    run_id: str
    state: str
    ok: bool
    started_at: str
    seconds: float
    preflight_s: float
    ready_s: float | None
    stages: tuple[StageTime, ...]
    generation: Generation | None
    root_cause: str | None
    hint: str | None
    failed_stage: str | None
    stopped: bool
    leftovers: tuple[str, ...]
    inputs: dict[str, str]
    checkpoint: CheckpointCheck
    #: What the run's own cleanup removed after the stop (an engine's /dev/shm files, stray processes).
    cleaned: tuple[str, ...] = ()
    cannot_show: tuple[str, ...] = CANNOT_SHOW
    argv: tuple[str, ...] = field(default=())
    nodes: tuple[RehearsedNode, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RehearsalResult:
        gen = d.get("generation")
        return cls(
            **{
                **{k: d[k] for k in ("experiment", "host", "engine", "run_id", "state", "ok", "started_at", "seconds", "preflight_s", "ready_s",
                                      "root_cause", "hint", "failed_stage", "stopped")},
                "stages": tuple(StageTime(**s) for s in d.get("stages") or ()),
                "generation": Generation(**gen) if isinstance(gen, dict) else None,
                "leftovers": tuple(d.get("leftovers") or ()),
                "cleaned": tuple(d.get("cleaned") or ()),
                "inputs": dict(d.get("inputs") or {}),
                "checkpoint": CheckpointCheck.from_json(d.get("checkpoint") or {}),
                "cannot_show": tuple(d.get("cannot_show") or CANNOT_SHOW),
                "argv": tuple(d.get("argv") or ()),
                "nodes": tuple(RehearsedNode(**{**n, "argv": tuple(n.get("argv") or ())}) for n in d.get("nodes") or ()),
            }
        )

    def lines(self) -> list[str]:
        """The result as a person reads it."""
        where = f"{len(self.nodes)} nodes ({', '.join(dict.fromkeys(n.host for n in self.nodes))})" if self.nodes else self.host
        head = (
            f"rehearsal of {self.experiment} on {where}: "
            + (f"ready {self.ready_s:.1f} s after the engine started, answered, stopped clean" if self.ok else f"{self.state.upper()}")
            + f" (run {self.run_id}; {self.seconds:.1f} s in all, {self.preflight_s:.1f} s of it preflight)"
        )
        out = [head]
        for n in self.nodes:
            out.append(f"  node {n.rank} {n.host} {n.role}: {n.state} (run {n.run_id})")
        if self.root_cause:
            out.append(f"  root cause: {self.root_cause}" + (f" (in stage {self.failed_stage})" if self.failed_stage else ""))
        if self.hint:
            out.append(f"  hint: {self.hint}")
        for s in self.stages:
            reached = f"at {s.reached_s:6.1f} s" if s.reached_s is not None else "  not reached"
            took = f", {s.seconds:.1f} s by the log" if s.seconds is not None else ""
            out.append(f"  {s.name:<12} {s.status:<8} {reached}{took}")
        if self.generation is not None:
            g = self.generation
            out.append(f"  generation: {'ok' if g.ok else 'FAILED'} in {g.seconds:.2f} s" + (f": {g.text!r}" if g.ok else f": {g.error}"))
        if self.cleaned:
            out.append("  cleaned after the stop: " + "; ".join(self.cleaned))
        if self.leftovers:
            out.append("  left behind: " + "; ".join(self.leftovers))
        out.append(f"  checkpoint headers: {self.checkpoint.line()}")
        out.append("  dummy weights cannot show:")
        out.extend(f"    - {c}" for c in self.cannot_show)
        return out


@dataclass(frozen=True)
class RehearsalNote:
    """Whether the inputs of a launch were rehearsed, and whether ``[launch] rehearse`` asks for one now."""

    policy: str
    rehearsed_at: float | None
    changed: tuple[str, ...]

    @property
    def same(self) -> bool:
        return self.rehearsed_at is not None and not self.changed

    @property
    def needed(self) -> bool:
        return self.policy == "always" or (self.policy == "when-changed" and not self.same)

    def message(self) -> str:
        if self.rehearsed_at is None:
            return "not rehearsed yet (servelab rehearse EXP: the same start-up with dummy weights)"
        at = dt.datetime.fromtimestamp(self.rehearsed_at).strftime("%H:%M")
        if not self.changed:
            return f"rehearsed at {at}, same inputs"
        names = list(self.changed)
        what = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        return f"not rehearsed since the {what} changed (last good rehearsal at {at})"


def last_good(sourced: SourcedExperiment, cfg: HostConfig | None = None) -> tuple[RehearsalResult, float] | None:
    """The latest good rehearsal of this experiment on this host (a multi-node one: on its hosts), and when it was saved."""
    hit = preflight_cache.get(KIND, _cache_key(sourced, cfg))
    if hit is None:
        return None
    try:
        return RehearsalResult.from_json(hit.value), hit.saved
    except (KeyError, TypeError, ValueError):
        return None


def note_for(inputs: RehearsalInputs, sourced: SourcedExperiment, cfg: HostConfig | None = None) -> RehearsalNote:
    policy = sourced.experiment.launch.rehearse
    last = last_good(sourced, cfg)
    if last is None:
        return RehearsalNote(policy, None, ())
    return RehearsalNote(policy, last[1], tuple(inputs.changed_since(last[0].inputs)))


async def rehearsal_note(catalog: Catalog, sourced: SourcedExperiment | str, host: str | None = None) -> RehearsalNote:
    """What a launch of ``sourced`` says about its rehearsal (reads the host: the inputs' hashes)."""
    exp = catalog.get(sourced) if isinstance(sourced, str) else sourced
    cfg = None if exp.experiment.spans_hosts else catalog.host(host or exp.experiment.host)
    return note_for(await inputs_of(catalog, exp, cfg), exp, cfg)


def _stage_times(analysis: Analysis, reached: Mapping[str, float]) -> tuple[StageTime, ...]:
    return tuple(
        StageTime(s.name, str(s.status), reached.get(s.name), stage_seconds(s))
        for s in analysis.stages
    )


def _root_cause(analysis: Analysis | None) -> str | None:
    rc = analysis.root_cause if analysis is not None else None
    if rc is None:
        return None
    return f"{rc.exception}: {rc.message}" if rc.exception else rc.message


async def _generate(url: str, model: str) -> Generation:
    t0 = time.monotonic()
    await until_listening(url)  # the log says ready; its server may listen a moment later
    try:
        async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=120.0) as http:
            r = await http.post("/v1/completions", json={"model": model, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0})
        if r.status_code != 200:
            return Generation(False, "", time.monotonic() - t0, f"HTTP {r.status_code}: {r.text[:200]}")
        text = str(r.json()["choices"][0]["text"])
        return Generation(True, text, time.monotonic() - t0)
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        return Generation(False, "", time.monotonic() - t0, " ".join(f"{type(exc).__name__}: {exc}".split()))


@dataclass(frozen=True)
class _Seen:
    """The rehearsed run as one poll saw it: every process alive, the serving process's analysis,
    ready (it answers), crashed (its log or, for a group, any node's failure says so)."""

    alive: bool
    analysis: Analysis | None
    ready: bool
    crashed: bool


@dataclass(frozen=True)
class _Ending:
    """How the rehearsed run ended, read after its stop: the root cause (naming the node for a
    group), its hint and stage, each node process's end, and whether a process was still alive."""

    analysis: Analysis | None
    crashed: bool
    root_cause: str | None
    hint: str | None
    failed_stage: str | None
    stopped: bool
    nodes: tuple[RehearsedNode, ...] = ()
    #: What the stop could not do (a node it could not stop), said with the leftovers.
    problems: tuple[str, ...] = ()


class _Rehearsed(Protocol):
    """What a rehearsal watches and stops: one run, or a multi-node group."""

    run_id: str
    argv: tuple[str, ...]
    model: str

    async def poll(self) -> _Seen: ...

    async def base_url(self) -> str: ...

    async def stop(self) -> _Ending: ...

    async def cleanup(self, dry_run: bool) -> list[str]: ...


def _ending(analysis: Analysis | None, stopped: bool) -> _Ending:
    crashed = analysis is not None and analysis.state == RunState.CRASHED
    return _Ending(analysis, crashed, _root_cause(analysis), analysis.hint if analysis else None, analysis.failed_stage if analysis else None, stopped)


class _OneRun:
    """A one-host rehearsal's run."""

    def __init__(self, runs: Runs, run_id: str, argv: list[str], model: str, host: str) -> None:
        self.runs, self.run_id, self.argv, self.model, self.host = runs, run_id, tuple(argv), model, host

    async def poll(self) -> _Seen:
        st = await self.runs.status(self.run_id)
        a = st.analysis
        return _Seen(st.alive, a, a is not None and a.state == RunState.READY, a is not None and a.state == RunState.CRASHED)

    async def base_url(self) -> str:
        return await self.runs.base_url(self.run_id)

    async def stop(self) -> _Ending:
        st = await self.runs.status(self.run_id)
        stopped = st.alive
        if stopped:
            st = await self.runs.stop(self.run_id)
        return _ending(st.analysis, stopped or not st.alive)

    async def cleanup(self, dry_run: bool) -> list[str]:
        return await self.runs.cleanup(self.host, dry_run=dry_run, run=self.run_id)


class _Group:
    """A multi-node rehearsal's group: the head's analysis and answer, every node's failure and stop.

    The root cause is the first node failure seen before the rehearsal stops anything (a node the
    stop ends while it loads is not a failure of the start-up)."""

    def __init__(self, runs: Runs, record: MultiNodeRecord, argvs: dict[str, list[str]], model: str) -> None:
        self.runs, self.nodes, self.record, self.argvs, self.model = runs, MultiNodeRuns(runs), record, argvs, model
        self.run_id = record.id
        self.argv = tuple(argvs.get(record.head.run_id, ()))
        self.cause: NodeFailure | None = None
        self.cause_analysis: Analysis | None = None
        self.head_crashed = False

    async def poll(self) -> _Seen:
        st = await self.nodes.status(self.record)
        head = next(n for n in st.nodes if n.node.serves)
        a = head.status.analysis if head.status is not None else None
        alive = all(n.status is None or n.status.alive for n in st.nodes)  # a node that cannot be asked is not taken for dead
        if self.cause is None and st.root_cause is not None:
            self.cause = st.root_cause
            failed = next((n for n in st.nodes if n.node.run_id == st.root_cause.run_id), None)
            self.cause_analysis = failed.status.analysis if failed is not None and failed.status is not None else None
        self.head_crashed = a is not None and a.state == RunState.CRASHED
        return _Seen(alive, a, st.ready and alive, self.cause is not None or self.head_crashed)

    async def base_url(self) -> str:
        return await self.runs.base_url(self.record.head.run_id)

    async def stop(self) -> _Ending:
        st = await self.nodes.status(self.record)
        live = any(n.status is not None and n.status.alive for n in st.nodes)
        problems: tuple[str, ...] = ()
        if live:
            problems = tuple(f"not stopped: {p}" for p in (await self.nodes.stop(self.record)).problems)
            st = await self.nodes.status(self.record)
        head = next(n for n in st.nodes if n.node.serves)
        ended = tuple(
            RehearsedNode(n.node.rank, n.node.host, n.node.role, n.node.run_id, tuple(self.argvs.get(n.node.run_id, ())),
                          str(n.status.record.status) if n.status is not None else f"unreachable: {n.unreachable}")
            for n in st.nodes
        )
        end = _ending(head.status.analysis if head.status is not None else None, st.ended)
        if self.cause is None and self.head_crashed:  # the head's own crash: its analysis has the root cause
            return replace(end, crashed=True, nodes=ended, problems=problems)
        if self.cause is None:  # nothing failed before the stop (a node the stop ended mid-load is no root cause)
            return _Ending(end.analysis, False, None, None, None, end.stopped, ended, problems)
        fa = self.cause_analysis
        return _Ending(
            end.analysis, True, failure_line(self.cause), (fa.hint if fa else None) or (st.hint.render() if st.hint else None),
            fa.failed_stage if fa else None, st.ended, ended, problems,
        )

    async def cleanup(self, dry_run: bool) -> list[str]:
        out: list[str] = []
        for n in self.record.nodes:  # each node's own cleanup, on its own host
            out += await self.runs.cleanup(n.host, dry_run=dry_run, run=n.run_id)
        return out


async def rehearse(
    runs: Runs,
    exp_name: str,
    host: str | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    ready_timeout: float = READY_TIMEOUT_S,
    save: bool = True,
    skip_preflight: bool = False,
) -> RehearsalResult:
    """Rehearse ``exp_name`` on its host (or ``host``), or on every node of a multi-node experiment:
    start, ready, one generation, stop, nothing left. ``skip_preflight``: start without servelab's
    preflight (as ``servelab launch --skip-preflight``)."""
    catalog = runs.catalog
    sourced = catalog.get(exp_name)
    e = sourced.experiment
    say = progress or (lambda _line: None)
    multinode = e.spans_hosts
    if multinode and host:
        raise ServelabError(f"--host: {sourced.name} names its own hosts (hosts = [...]); a multi-node rehearsal runs on them")
    cfg = catalog.host(e.nodes[0] if multinode else host or e.host)
    inputs = await inputs_of(catalog, sourced, cfg)
    checkpoint_task = asyncio.create_task(check_checkpoint(open_host(cfg), catalog.host_path(sourced, e.model, cfg)))
    started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    target: _Rehearsed
    try:
        if multinode:
            target = await _start_group(runs, sourced, say, skip_preflight)
        else:
            rec = await runs.launch(exp_name, cfg.name, rehearsal=True, skip_preflight=skip_preflight,
                                    progress=lambda c: say(c.line() if hasattr(c, "line") else str(c)))
            target = _OneRun(runs, rec.id, rec.argv, rec.model, cfg.name)
    except BaseException:
        checkpoint_task.cancel()
        raise
    preflight_s = time.monotonic() - t0
    say(f"rehearsal run {target.run_id} started after {preflight_s:.1f} s of preflight")
    try:
        return await _watch(target, sourced, cfg, inputs, checkpoint_task, started_at, t0, preflight_s, say, ready_timeout, save)
    except BaseException:
        # interrupted or broken while watching: the rehearsal's run never outlives it
        try:
            await target.stop()
        except (ServelabError, HostUnreachable, OSError):
            pass
        raise


async def _start_group(runs: Runs, sourced: SourcedExperiment, say: Callable[[str], None], skip_preflight: bool) -> _Group:
    """Every node started as its launch would, each engine process with the adapter's dummy weights."""
    def checked(c: NodeCheck) -> None:
        say(f"preflight  node {c.rank} ({c.host}): {'ok' if c.ok else c.detail}")

    record = await MultiNodeRuns(runs).launch(sourced.name, skip_preflight=skip_preflight, progress=checked, rehearsal=True)
    recs = await asyncio.gather(*(runs.find(n.run_id) for n in record.nodes))
    head = next(rec for _, rec in recs if rec.id == record.head.run_id)
    return _Group(runs, record, {rec.id: rec.argv for _, rec in recs}, head.model)


async def _watch(
    target: _Rehearsed, sourced: SourcedExperiment, cfg: HostConfig, inputs: RehearsalInputs,
    checkpoint_task: asyncio.Task[CheckpointCheck], started_at: str, t0: float, preflight_s: float, say: Callable[[str], None], ready_timeout: float, save: bool,
) -> RehearsalResult:
    e = sourced.experiment
    t_engine = time.monotonic()  # stage times count from the engine's start; the total includes preflight
    reached: dict[str, float] = {}
    analysis: Analysis | None = None
    state = "timed-out"
    crash_seen: float | None = None
    while time.monotonic() - t_engine < ready_timeout:
        seen = await target.poll()
        analysis = seen.analysis if seen.analysis is not None else analysis
        if analysis is not None:
            for s in analysis.stages:
                if s.status != StageState.PENDING and s.name not in reached:
                    reached[s.name] = time.monotonic() - t_engine
                    say(f"  {s.name} at {reached[s.name]:.1f} s")
        if seen.ready:
            state = "ready"
            break
        if seen.crashed:
            crash_seen = crash_seen if crash_seen is not None else time.monotonic()
            if not seen.alive or time.monotonic() - crash_seen > CRASH_SETTLE_S:
                state = "crashed"
                break
        if not seen.alive:
            state = str(analysis.state) if analysis is not None and analysis.state.is_terminal else "exited"
            break
        await asyncio.sleep(POLL_S)
    ready_s = reached.get("ready") if state == "ready" else None
    if state == "ready" and ready_s is None:
        ready_s = time.monotonic() - t_engine
    generation = None
    if state == "ready":
        generation = await _generate(await target.base_url(), e.served_model_name or target.model)
        say(f"  generation {'ok' if generation.ok else 'failed'} in {generation.seconds:.2f} s")
    end = await target.stop()
    if end.analysis is None and end.root_cause is None:  # the stop's read had no analysis: the last poll's
        end = replace(_ending(analysis, end.stopped), nodes=end.nodes, problems=end.problems)
    analysis = end.analysis if end.analysis is not None else analysis
    if state != "ready" and end.crashed:
        state = "crashed"
    # the run's own cleanup (its stray processes, the /dev/shm files it held), then what is still there
    cleaned = tuple(await target.cleanup(dry_run=False))
    leftovers = tuple(await target.cleanup(dry_run=True)) + end.problems
    ok = state == "ready" and generation is not None and generation.ok and not leftovers and end.stopped
    failed = state != "ready"
    result = RehearsalResult(
        experiment=sourced.name,
        host=cfg.name,
        engine=e.engine,
        run_id=target.run_id,
        state=state,
        ok=ok,
        started_at=started_at,
        seconds=time.monotonic() - t0,
        preflight_s=preflight_s,
        ready_s=ready_s,
        stages=_stage_times(analysis, reached) if analysis is not None else (),
        generation=generation,
        root_cause=end.root_cause if failed else None,
        hint=end.hint if failed else None,
        failed_stage=end.failed_stage if failed else None,
        stopped=end.stopped,
        leftovers=leftovers,
        cleaned=cleaned,
        inputs=inputs.parts,
        checkpoint=await checkpoint_task,
        argv=target.argv,
        nodes=end.nodes,
    )
    if ok and save:
        save_good(result, sourced, cfg)
    return result


def save_good(result: RehearsalResult, sourced: SourcedExperiment, cfg: HostConfig | None = None) -> None:
    """Keep ``result`` as the latest good rehearsal of the experiment on this host, or on a multi-node
    experiment's hosts (only a good one is kept)."""
    if not result.ok:
        raise ValueError("only a good rehearsal is kept")
    preflight_cache.put(KIND, _cache_key(sourced, cfg), result.to_json())


async def before_launch(runs: Runs, exp_name: str, host: str | None = None, *, say: Callable[[str], None] | None = None) -> RehearsalNote | None:
    """What a launch does about rehearsal: say whether these inputs were rehearsed, and rehearse first
    when ``[launch] rehearse`` asks; a rehearsal that fails refuses the launch (one line, its root cause).
    A multi-node experiment's note reads every node's inputs, and its rehearsal runs on every node."""
    sourced = runs.catalog.get(exp_name)
    tell = say or (lambda _line: None)
    note = await rehearsal_note(runs.catalog, sourced, host)
    tell(f"rehearsal: {note.message()}")
    if note.needed:
        tell(f"rehearsal: [launch] rehearse = {note.policy!r}: rehearsing first")
        result = await rehearse(runs, exp_name, host, progress=tell)
        for line in result.lines():
            tell(line)
        if not result.ok:
            why = result.root_cause or (f"generation failed: {result.generation.error}" if result.generation and not result.generation.ok else result.state)
            raise ServelabError(f"launch of {sourced.name} refused: its rehearsal {result.state} (run {result.run_id}): {why}")
    return note


async def launch_offer(catalog: Catalog, exp_name: str) -> RehearsalNote | None:
    """What the dashboard's ``l`` offers before a launch: a note when the experiment changed since its
    last good rehearsal (or ``[launch] rehearse`` asks for one and these inputs were not rehearsed),
    None when there is nothing to offer. With no good rehearsal kept and the policy ``never`` the host
    is not asked at all (the launch opens at once, as before); a host that cannot answer offers nothing."""
    sourced = catalog.get(exp_name)
    cfg = None if sourced.experiment.spans_hosts else catalog.host(sourced.experiment.host)
    if last_good(sourced, cfg) is None and sourced.experiment.launch.rehearse == "never":
        return None
    try:
        note = note_for(await inputs_of(catalog, sourced, cfg), sourced, cfg)
    except (ServelabError, HostUnreachable, OSError):
        return None
    return note if note.needed or not note.same else None
