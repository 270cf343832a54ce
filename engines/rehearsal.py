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

What dummy weights cannot show is said in every result (``CANNOT_SHOW``); for a checkpoint's own
faults, ``engines/checkpoint_check`` reads the safetensors headers (headers only).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from servelab.engines import preflight_cache
from servelab.engines.catalog import Catalog
from servelab.engines.checkpoint_check import CheckpointCheck, check_checkpoint
from servelab.engines.errors import ServelabError
from servelab.engines.experiment import SourcedExperiment
from servelab.engines.helpers import HelperError, run_helper
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.hosts.registry import open_host
from servelab.engines.hostsfile import HostConfig
from servelab.engines.logs.values import Analysis, stage_seconds
from servelab.engines.patches import load_patch_set
from servelab.engines.runs import Runs
from servelab.engines.runstate import RunState, StageState

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
    """sha256 of each input (``PARTS``) as the host has it now."""

    parts: dict[str, str]

    @property
    def key(self) -> str:
        return preflight_cache.digest(KIND, self.parts)

    def changed_since(self, before: Mapping[str, str]) -> list[str]:
        return [p for p in PARTS if before.get(p) != self.parts.get(p)]


async def rehearsal_inputs(catalog: Catalog, sourced: SourcedExperiment, cfg: HostConfig) -> RehearsalInputs:
    """The inputs' hashes: what preflight's cache keys on, read the same way (no engine import)."""
    from servelab.engines.adapter import get_adapter

    e = sourced.experiment
    h = open_host(cfg)
    spec = catalog.launch_spec(sourced, cfg)
    try:
        facts = await run_helper(h, cfg.python, "hostinfo.py", get_adapter(e.engine).package, "--quick", timeout=60)
    except (HelperError, HostUnreachable, TimeoutError, asyncio.TimeoutError) as exc:
        raise ServelabError(f"{cfg.name}: cannot read the engine's version and root: {exc}") from None
    model = catalog.host_path(sourced, e.model, cfg)
    draft = catalog.host_path(sourced, e.speculative.draft_model, cfg) if e.speculative.draft_model else None
    d = preflight_cache.digest
    parts = {
        "interpreter": d(cfg.python),
        "engine": d(facts.get("package"), facts.get("version"), facts.get("root"), facts.get("torch_dist"), facts.get("gpu_devices")),
        "flags": d(spec.argv),
        "environment": d(spec.env),
        "patch set": d([(p.name, p.sha256) for p in load_patch_set(sourced)]),
        "model files": d(await preflight_cache.folder_digest(h, model)),
        "drafter files": d(await preflight_cache.folder_digest(h, draft)),
    }
    return RehearsalInputs(parts)


def _cache_key(sourced: SourcedExperiment, cfg: HostConfig) -> str:
    """The latest good rehearsal is kept per experiment and host."""
    return preflight_cache.digest(KIND, sourced.name, cfg.name)


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
class RehearsalResult:
    """What one rehearsal found. ``ok``: it reached ready, answered, and left nothing behind."""

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
            }
        )

    def lines(self) -> list[str]:
        """The result as a person reads it."""
        head = (
            f"rehearsal of {self.experiment} on {self.host}: "
            + (f"ready {self.ready_s:.1f} s after the engine started, answered, stopped clean" if self.ok else f"{self.state.upper()}")
            + f" (run {self.run_id}; {self.seconds:.1f} s in all, {self.preflight_s:.1f} s of it preflight)"
        )
        out = [head]
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


def last_good(sourced: SourcedExperiment, cfg: HostConfig) -> tuple[RehearsalResult, float] | None:
    """The latest good rehearsal of this experiment on this host, and when it was saved."""
    hit = preflight_cache.get(KIND, _cache_key(sourced, cfg))
    if hit is None:
        return None
    try:
        return RehearsalResult.from_json(hit.value), hit.saved
    except (KeyError, TypeError, ValueError):
        return None


def note_for(inputs: RehearsalInputs, sourced: SourcedExperiment, cfg: HostConfig) -> RehearsalNote:
    policy = sourced.experiment.launch.rehearse
    last = last_good(sourced, cfg)
    if last is None:
        return RehearsalNote(policy, None, ())
    return RehearsalNote(policy, last[1], tuple(inputs.changed_since(last[0].inputs)))


async def rehearsal_note(catalog: Catalog, sourced: SourcedExperiment | str, host: str | None = None) -> RehearsalNote:
    """What a launch of ``sourced`` says about its rehearsal (reads the host: the inputs' hashes)."""
    exp = catalog.get(sourced) if isinstance(sourced, str) else sourced
    cfg = catalog.host(host or exp.experiment.host)
    return note_for(await rehearsal_inputs(catalog, exp, cfg), exp, cfg)


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


async def _generate(runs: Runs, run_id: str, model: str) -> Generation:
    url = await runs.base_url(run_id)
    t0 = time.monotonic()
    try:
        async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=120.0) as http:
            r = await http.post("/v1/completions", json={"model": model, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0})
        if r.status_code != 200:
            return Generation(False, "", time.monotonic() - t0, f"HTTP {r.status_code}: {r.text[:200]}")
        text = str(r.json()["choices"][0]["text"])
        return Generation(True, text, time.monotonic() - t0)
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        return Generation(False, "", time.monotonic() - t0, " ".join(f"{type(exc).__name__}: {exc}".split()))


async def rehearse(
    runs: Runs,
    exp_name: str,
    host: str | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    ready_timeout: float = READY_TIMEOUT_S,
    save: bool = True,
) -> RehearsalResult:
    """Rehearse ``exp_name`` on its host (or ``host``): start, ready, one generation, stop, nothing left."""
    catalog = runs.catalog
    sourced = catalog.get(exp_name)
    e = sourced.experiment
    if e.multinode is not None:
        raise ServelabError(f"{sourced.name} is a multi-node experiment: rehearsing every node is not supported yet")
    cfg = catalog.host(host or e.host)
    say = progress or (lambda _line: None)
    inputs = await rehearsal_inputs(catalog, sourced, cfg)
    checkpoint_task = asyncio.create_task(check_checkpoint(open_host(cfg), catalog.host_path(sourced, e.model, cfg)))
    started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    try:
        rec = await runs.launch(exp_name, cfg.name, rehearsal=True, progress=lambda c: say(c.line() if hasattr(c, "line") else str(c)))
    except BaseException:
        checkpoint_task.cancel()
        raise
    preflight_s = time.monotonic() - t0
    say(f"rehearsal run {rec.id} started (pid {rec.pid}) after {preflight_s:.1f} s of preflight")
    try:
        return await _watch(runs, sourced, cfg, rec.id, rec.model, rec.argv, inputs, checkpoint_task, started_at, t0, preflight_s, say, ready_timeout, save)
    except BaseException:
        # interrupted or broken while watching: the rehearsal's run never outlives it
        try:
            if (await runs.status(rec.id, analyze=False)).alive:
                await runs.stop(rec.id)
        except (ServelabError, HostUnreachable, OSError):
            pass
        raise


async def _watch(
    runs: Runs, sourced: SourcedExperiment, cfg: HostConfig, run_id: str, model: str, argv: list[str], inputs: RehearsalInputs,
    checkpoint_task: asyncio.Task[CheckpointCheck], started_at: str, t0: float, preflight_s: float, say: Callable[[str], None], ready_timeout: float, save: bool,
) -> RehearsalResult:
    e = sourced.experiment
    t_engine = time.monotonic()  # stage times count from the engine's start; the total includes preflight
    reached: dict[str, float] = {}
    analysis: Analysis | None = None
    state = "timed-out"
    crash_seen: float | None = None
    alive = True
    while time.monotonic() - t_engine < ready_timeout:
        st = await runs.status(run_id)
        alive = st.alive
        analysis = st.analysis if st.analysis is not None else analysis
        if analysis is not None:
            for s in analysis.stages:
                if s.status != StageState.PENDING and s.name not in reached:
                    reached[s.name] = time.monotonic() - t_engine
                    say(f"  {s.name} at {reached[s.name]:.1f} s")
            if analysis.state == RunState.READY:
                state = "ready"
                break
            if analysis.state == RunState.CRASHED:
                crash_seen = crash_seen if crash_seen is not None else time.monotonic()
                if not alive or time.monotonic() - crash_seen > CRASH_SETTLE_S:
                    state = "crashed"
                    break
        if not alive:
            state = str(analysis.state) if analysis is not None and analysis.state.is_terminal else "exited"
            break
        await asyncio.sleep(POLL_S)
    ready_s = reached.get("ready") if state == "ready" else None
    if state == "ready" and ready_s is None:
        ready_s = time.monotonic() - t_engine
    generation = None
    if state == "ready":
        generation = await _generate(runs, run_id, e.served_model_name or model)
        say(f"  generation {'ok' if generation.ok else 'failed'} in {generation.seconds:.2f} s")
    stopped = False
    st = await runs.status(run_id)
    if st.alive:
        st = await runs.stop(run_id)
        stopped = True
    analysis = st.analysis if st.analysis is not None else analysis
    if analysis is not None and state != "ready" and analysis.state == RunState.CRASHED:
        state = "crashed"
    # the run's own cleanup (its stray processes, the /dev/shm files it held), then what is still there
    cleaned = tuple(await runs.cleanup(cfg.name, dry_run=False, run=run_id))
    leftovers = tuple(await runs.cleanup(cfg.name, dry_run=True, run=run_id))
    ok = state == "ready" and generation is not None and generation.ok and not leftovers
    result = RehearsalResult(
        experiment=sourced.name,
        host=cfg.name,
        engine=e.engine,
        run_id=run_id,
        state=state,
        ok=ok,
        started_at=started_at,
        seconds=time.monotonic() - t0,
        preflight_s=preflight_s,
        ready_s=ready_s,
        stages=_stage_times(analysis, reached) if analysis is not None else (),
        generation=generation,
        root_cause=_root_cause(analysis) if state != "ready" else None,
        hint=analysis.hint if analysis is not None and state != "ready" else None,
        failed_stage=analysis.failed_stage if analysis is not None and state != "ready" else None,
        stopped=stopped or not st.alive,
        leftovers=leftovers,
        cleaned=cleaned,
        inputs=inputs.parts,
        checkpoint=await checkpoint_task,
        argv=tuple(argv),
    )
    if ok and save:
        save_good(result, sourced, cfg)
    return result


def save_good(result: RehearsalResult, sourced: SourcedExperiment, cfg: HostConfig) -> None:
    """Keep ``result`` as the latest good rehearsal of the experiment on this host (only a good one is kept)."""
    if not result.ok:
        raise ValueError("only a good rehearsal is kept")
    preflight_cache.put(KIND, _cache_key(sourced, cfg), result.to_json())


async def before_launch(runs: Runs, exp_name: str, host: str | None = None, *, say: Callable[[str], None] | None = None) -> RehearsalNote | None:
    """What a launch does about rehearsal: say whether these inputs were rehearsed, and rehearse first
    when ``[launch] rehearse`` asks; a rehearsal that fails refuses the launch (one line, its root cause).
    None for a multi-node experiment (not rehearsed yet)."""
    sourced = runs.catalog.get(exp_name)
    if sourced.experiment.multinode is not None:
        return None
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
    if sourced.experiment.multinode is not None:
        return None
    cfg = catalog.host(sourced.experiment.host)
    if last_good(sourced, cfg) is None and sourced.experiment.launch.rehearse == "never":
        return None
    try:
        note = note_for(await rehearsal_inputs(catalog, sourced, cfg), sourced, cfg)
    except (ServelabError, HostUnreachable, OSError):
        return None
    return note if note.needed or not note.same else None
