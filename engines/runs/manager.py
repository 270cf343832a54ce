"""The run lifecycle: launch detached, list, follow the log, liveness, stop, cleanup, artifacts.

The host is the source of truth. Each run lives in ``<workdir>/runs/<run-id>/`` on its host:

- ``experiment.toml``: the definition as it was launched;
- ``run.json``: id, experiment, engine, host, argv, env, pid, pgid, start time (``/proc`` ticks,
  the pid-reuse guard), started_at, port, model, log_path, status, patch hashes;
- ``engine.log``: the engine's stdout and stderr; ``exit_code``: written when the engine exits;
- later ``probe.json`` / ``probe-requests.jsonl`` (written with :meth:`Runs.write_artifact`).

Every decision about a process (refusing a held port or busy GPUs, starting detached, liveness,
signalling only processes this run started) is taken on the host by ``engines/helpers/runctl.py``
in one round trip, so two dashboards on two machines see and do the same thing.
"""

from __future__ import annotations

import asyncio
import builtins
import datetime as dt
import json
from collections.abc import AsyncGenerator, Callable
from dataclasses import replace
from typing import Any

from servelab.engines.adapters.base import get_adapter
from servelab.engines.adapters.exchange import LaunchSpec
from servelab.engines.catalog.folder import Catalog
from servelab.engines.errors import ServelabError
from servelab.engines.catalog.experiment import SourcedExperiment
from servelab.engines.hosts.base import Host, HostUnreachable, host_workdir, place_of
from servelab.engines.hosts.registry import open_host
from servelab.engines.hosts.seen import HostSeen, SeenStore, clock, host_key
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.logs.analysis import Analysis
from servelab.engines.logs.live import LiveAnalyses
from servelab.engines.nodes.resolve import resolve_run
from servelab.engines.hosts.owner import me
from servelab.engines.preflight.checks import run_preflight
from servelab.engines.diagnosis.identity import drafter_identity
from servelab.engines.weights.fingerprint import target_identity
from servelab.engines.adapters.exchange import TargetIdentity
from servelab.engines.runs.state import RunState
from servelab.engines.placements.base import Placement, placement_for
from servelab.engines.placements.plain import runctl
from servelab.engines.runs.records import (
    EXIT_CODE,
    LOG_NAME,
    RUN_ID_RE,
    RUN_JSON,
    RUNS_DIR,
    TAIL_BYTES,
    KnownRun,
    Located,
    check_artifact,
    LogTail,
    NoSuchRun,
    ResolvedRun,
    RunRecord,
    RunRef,
    RunStatus,
    RunUnreachable,
    new_run_id,
    runs_root,
    unreachable_reason,
)


#: How often follow() looks for new bytes when the log is idle (liveness is known within 2 s).
POLL_SECONDS = 0.25
CHUNK = 1 << 20
#: How long follow() keeps trying to reach a host that dropped before giving up.
FOLLOW_UNREACHABLE_SECONDS = 120.0


class Runs:
    """Runs of one experiments folder, on every host its hosts.toml names."""

    def __init__(self, catalog: Catalog, live: LiveAnalyses | None = None) -> None:
        self.catalog = catalog
        #: Hosts the last :meth:`list` could not reach, with the one-line reason.
        self.unreachable: dict[str, str] = {}
        #: What this machine last saw of each host and its runs (``engines.hosts.seen``).
        self.seen = SeenStore()
        #: One live analysis per run, shared by everyone who asks through this ``Runs``; pass the
        #: previous one's when the folder is reloaded, so a run's followers keep sharing one.
        self.live = live if live is not None else LiveAnalyses()
        #: Each host kind's placement (``engines/placements``), made on first use; it keeps what it
        #: last learnt of each run (a scheduler's view of its job).
        self._placements: dict[str, Placement] = {}

    # -- hosts and the helper ---------------------------------------------------------------------
    def host(self, name: str) -> Host:
        return open_host(self.catalog.host(name))

    def placement(self, cfg: HostConfig) -> Placement:
        """How runs start, live, stop and are reached on this host's kind (one per kind and ``Runs``)."""
        if cfg.kind not in self._placements:
            self._placements[cfg.kind] = placement_for(cfg)
        return self._placements[cfg.kind]

    async def _ctl(self, host: Host, *args: str, timeout: float = 60.0) -> dict[str, Any]:
        """Run a runctl.py command on the host (``engines.placements.plain.runctl``); its JSON answer."""
        return await runctl(host, *args, timeout=timeout)

    # -- launch -----------------------------------------------------------------------------------
    async def launch(
        self,
        exp_name: str,
        host: str | None = None,
        *,
        skip_preflight: bool = False,
        progress: Callable[[Any], None] | None = None,
        rehearsal: bool = False,
    ) -> RunRecord:
        """Start an experiment detached on its host (or ``host``); refuse a held port or busy GPUs.

        Preflight runs first (``progress`` sees each check as it ends) and applies the patch set,
        all or nothing, so the engine never starts on an unpatched or half-patched package.
        ``rehearsal``: the same run with the adapter's ``rehearsal_spec`` (dummy weights), marked so
        (``engines/rehearsal`` watches it and stops it).
        """
        exp = self.catalog.get(exp_name)
        problems = [p for e in self.catalog.entries if e.experiment is exp for p in e.problems]
        if problems:
            raise ServelabError(f"{exp.name}: definition has problems: {problems[0]} (run 'servelab check {exp.name}')")
        if exp.experiment.spans_hosts:  # one host alone would start a server that waits for its peers forever
            raise ServelabError(
                f"{exp.name} names {len(exp.experiment.hosts)} hosts: start it with 'servelab launch {exp.name}' "
                "(every node at once; the dashboard does not start multi-node runs yet)"
            )
        cfg = self.catalog.host(host or exp.experiment.host)
        patch_record = {} if skip_preflight else await self._preflight(exp, cfg, progress)
        if rehearsal and self.placement(cfg).rehearsal_port_of_its_own:  # it may run beside a live run of the experiment
            exp = exp.model_copy(update={"experiment": exp.experiment.model_copy(update={"port": await self.free_port(cfg, exp.experiment.port)})})
        spec = self.catalog.launch_spec(exp, cfg)
        if rehearsal:
            spec = get_adapter(exp.experiment.engine).rehearsal_spec(exp.experiment, spec)
        return await self.start_spec(exp, cfg, spec, new_run_id(exp.name), exp.experiment.port, patch_record, rehearsal=rehearsal)

    async def free_port(self, cfg: HostConfig, after: int) -> int:
        """The first port above ``after`` on the host that nothing listens on and no live run holds
        (runctl ``free-port``): where a rehearsal serves beside the experiment's live run."""
        h = open_host(cfg)
        try:
            answer = await self._ctl(h, "free-port", runs_root(cfg), str(after))
        except HostUnreachable as exc:
            raise ServelabError(str(exc)) from None
        if "port" not in answer:
            raise ServelabError(f"{cfg.name}: {answer.get('error', 'no free port')}")
        return int(answer["port"])

    async def start_spec(
        self, exp: SourcedExperiment, cfg: HostConfig, spec: LaunchSpec, run_id: str, port: int, patch_record: dict[str, Any],
        *, rehearsal: bool = False,
    ) -> RunRecord:
        """Write the run's folder on ``cfg`` and start ``spec`` there through runctl (no preflight).

        :meth:`launch` uses it for one host; ``engines.nodes.run`` for each node of a multi-node run.
        """
        h = open_host(cfg)
        run_dir = f"{runs_root(cfg)}/{run_id}"
        e = exp.experiment
        model = self.catalog.host_path(exp, e.model, cfg)
        target, drafter = await weights_identities(h, cfg, model, self.catalog.host_path(exp, e.speculative.draft_model, cfg)
                                                   if e.speculative.draft_model and not rehearsal else None)
        who = me()
        rec = RunRecord(
            id=run_id,
            experiment=exp.name,
            engine=e.engine,
            host=cfg.name,
            argv=list(spec.argv),
            env=dict(spec.env),
            port=port,
            model=model,
            run_dir=run_dir,
            log_path=f"{run_dir}/{LOG_NAME}",
            started_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            patch_hashes={p.file: d for p, d in exp.patch_hashes() if d is not None},
            identity=exp.identity_hash(),
            patches=patch_record,
            rehearsal=rehearsal,
            target=target.to_dict() if target is not None else {},
            drafter_fingerprint=drafter,
            launched_by=who.user,
            launched_from=who.machine,
            servelab_instance=who.instance,
            shm_prefixes=list(get_adapter(e.engine).shm_prefixes),
        )
        try:
            await h.make_shared_dir(runs_root(cfg))  # every user of the host adds runs; each removes only its own
            await h.write_bytes(f"{run_dir}/experiment.toml", exp.text.encode("utf-8"))
            await h.write_bytes(f"{run_dir}/{RUN_JSON}", _dump(rec.to_json()))
            return await self.placement(cfg).start(h, rec, exp, self.catalog, rehearsal=rehearsal)
        except HostUnreachable as exc:
            raise ServelabError(str(exc)) from None
        except OSError as exc:  # a workdir this user may not write (another user's runs/ on a shared host)
            raise ServelabError(f"cannot launch {exp.name} on {cfg.name}: {exc.filename or run_dir}: {exc.strerror or exc}") from None

    async def _preflight(
        self, exp: SourcedExperiment, cfg: HostConfig, progress: Callable[[Any], None] | None = None
    ) -> dict[str, Any]:
        """``engines.preflight.checks.run_preflight`` with the patch set applied: a failed check refuses the launch.

        Returns the patch record (sha256 of every patch and patched file) for the run.
        """
        report = await run_preflight(self.catalog, exp, cfg, progress=progress, apply=True)
        if not report.ok:
            raise ServelabError(report.summary())
        return dict(report.patches.record()) if report.patches is not None else {}

    # -- look-ups ---------------------------------------------------------------------------------
    def host_names(self, host: str | None = None) -> list[str]:
        """The hosts to ask: one name per place (the first, by name), since two entries for one
        machine and work folder (``local`` and ``local-sglang``) hold the same runs."""
        if host is not None:
            return [host]
        places: dict[tuple[str, str], str] = {}
        for name in self.catalog.hosts.names():
            places.setdefault(place_of(self.catalog.host(name)), name)
        return list(places.values())

    async def list(self, host: str | None = None) -> list[RunRecord]:
        """Every run on the host (all configured hosts when None, each place once), oldest first.

        Hosts that cannot be reached are left out and named in :attr:`unreachable` (set when the
        listing ends: two listings at once, the watcher's and a screen's, never see each other's half).
        """
        unreachable: dict[str, str] = {}
        names = self.host_names(host)
        for name in names:
            self.catalog.host(name)  # an unknown name is the user's error, not an unreachable host
        results = await asyncio.gather(*(self._list_one(n) for n in names), return_exceptions=True)
        out: dict[str, RunRecord] = {}
        for name, res in zip(names, results, strict=True):
            if isinstance(res, BaseException):
                if not isinstance(res, (HostUnreachable, ServelabError, OSError)):
                    raise res
                unreachable[name] = str(res)
                if isinstance(res, HostUnreachable):
                    cfg = self.catalog.host(name)
                    self.seen.unreachable(self._seen_key(cfg), unreachable_reason(cfg, res))
                continue
            self.seen.answered(self._seen_key(self.catalog.host(name)), [r.to_json() for r, _ in res], complete=True)
            for r, _ in res:
                out.setdefault(r.id, r)
        self.unreachable = unreachable
        return sorted(out.values(), key=lambda r: (r.started_at, r.id))

    async def list_known(self, host: str | None = None) -> builtins.list[KnownRun]:
        """:meth:`list`, plus the last known runs of every host that cannot be reached now, marked stale.

        A running run on a host that went down stays listed (its state unknown, its last known
        state kept) instead of vanishing.
        """
        out = {r.id: KnownRun(r) for r in await self.list(host)}
        for name in self.unreachable:
            seen, last = self.host_seen(name)
            if seen.down_since is not None:
                for r in last:
                    out.setdefault(r.id, KnownRun(r, seen))
        return sorted(out.values(), key=lambda k: (k.record.started_at, k.record.id))

    async def run_ids(self, name: str) -> builtins.list[str]:
        """The run folders of one host: one cheap call (a folder listing, no command), so a dashboard
        can watch for runs launched elsewhere (the CLI, another person) every second."""
        h = self.host(name)
        try:
            names = await h.listdir(runs_root(h.config))
        except HostUnreachable as exc:
            self.seen.unreachable(self._seen_key(h.config), unreachable_reason(h.config, exc))
            raise
        self.seen.answered(self._seen_key(h.config))
        return [n for n in names if RUN_ID_RE.match(n)]

    def hosts_down(self) -> dict[str, HostSeen]:
        """Configured hosts that did not answer the last time this machine asked, with since when and why."""
        out: dict[str, HostSeen] = {}
        for name in self.catalog.hosts.names():
            h = self.seen.host(self._seen_key(self.catalog.host(name)))
            if h.down_since is not None:
                out[name] = h
        return out

    @staticmethod
    def _seen_key(cfg: HostConfig) -> str:
        return host_key(cfg.name, cfg.ssh, host_workdir(cfg))

    def host_seen(self, name: str) -> tuple[HostSeen, builtins.list[RunRecord]]:
        """What this machine last saw of a host: since when it is down (if it is) and its runs then, oldest first."""
        h = self.seen.host(self._seen_key(self.catalog.host(name)))
        records: builtins.list[RunRecord] = []
        for seen in h.runs.values():
            try:
                records.append(RunRecord.from_json(seen.record))
            except (TypeError, ServelabError):
                continue
        return h, sorted(records, key=lambda r: (r.started_at, r.id))

    async def _list_one(self, name: str, ids: tuple[str, ...] = ()) -> builtins.list[tuple[RunRecord, dict[str, Any]]]:
        h = self.host(name)
        if not await h.exists(runs_root(h.config)):
            return []
        answer = await self._ctl(h, "status", runs_root(h.config), *ids)
        out = [(RunRecord.from_json(r), r) for r in answer.get("runs", [])]
        placement = self.placement(h.config)
        for rec, _ in out:  # what the placement alone knows (a batch job's state is its scheduler's)
            if placement.may_change(rec):
                await placement.liveness(h, rec)
        return out

    async def latest_of(self, ref: str) -> str | None:
        """``ref`` as a run id: itself when it is one; the id of the experiment's latest run (on its
        hosts, newest start) when it names an experiment; None when it is neither or that
        experiment has no run."""
        if RUN_ID_RE.match(ref):
            return ref
        exp = next((e for e in self.catalog.experiments if e.name == ref), None)
        if exp is None:
            return None
        hosts = list(dict.fromkeys([exp.experiment.host, *exp.experiment.hosts]))
        found = [r for h in hosts for r in await self.list(h) if r.experiment == ref and not r.rehearsal]  # a rehearsal is never the latest run
        return max(found, key=lambda r: (r.started_at, r.id)).id if found else None

    async def find(self, run_id: str) -> tuple[Host, RunRecord]:
        """The host holding a run and its record.

        The run's host is known from what this machine last saw of it, else from its id (the
        experiment's host): that host alone is asked first. When it cannot be reached the answer
        is :class:`RunUnreachable` (state unknown, last seen ...), never "no run"; the other hosts
        are asked (all at once) only when the run may have been launched on one of them.
        """
        if not RUN_ID_RE.match(run_id):
            raise ServelabError(f"not a run id: {run_id!r} (expected <experiment>-<YYYYmmdd-HHMMSS>-<4 hex>)")
        names = self.catalog.hosts.names()
        seen = self.seen.run(run_id)
        known = str(seen[1].record.get("host")) if seen is not None else None
        if known not in names:
            known = None
        first = known or next((e.experiment.host for e in self.catalog.experiments if run_id.startswith(e.name + "-")), None)
        if first not in names:
            first = None
        if known is not None:  # this machine saw the run there: ask that host only
            found = await self._read_record(known, run_id)
            if isinstance(found, tuple):
                return found
            if isinstance(found, str):
                raise self._run_unreachable(run_id, known, found)
            names = [n for n in names if n != known]
        results = await asyncio.gather(*(self._read_record(n, run_id) for n in names))
        by_name = dict(zip(names, results, strict=True))
        order = ([first] if first in by_name else []) + [n for n in names if n != first]
        for name in order:
            hit = by_name[name]
            if isinstance(hit, tuple):
                return hit
        if first is not None and isinstance(by_name.get(first), str):
            raise self._run_unreachable(run_id, first, str(by_name[first]))
        reasons = [f"{n}: {r}" for n, r in by_name.items() if isinstance(r, str)]
        extra = f" (unreachable: {'; '.join(reasons)})" if reasons else ""
        raise NoSuchRun(f"no run {run_id} on any host{extra}")

    async def locate(self, run: RunRef) -> Located:
        """The run's host and record, looked up once (:meth:`find`); a :class:`Located` as it is."""
        if isinstance(run, Located):
            return run
        h, rec = await self.find(run)
        return Located(h, rec)

    async def resolve(self, run: str | ResolvedRun) -> ResolvedRun:
        """What ``run`` names, looked up once (``engines.nodes.resolve``): an ordinary run, a
        multi-node run's group id or one of its node processes' ids, with the located run that
        serves for it; a resolved run as it is."""
        if isinstance(run, ResolvedRun):
            return run
        return await resolve_run(self, run)

    async def _at(self, run: RunRef) -> tuple[Host, RunRecord]:
        """(host, record) of a run: found by id, or a located run's own (a copy, which liveness
        updates); a record located before its engine had a pid is read again from its host."""
        if not isinstance(run, Located):
            return await self.find(run)
        if run.record.pid is None:
            found = await self._read_record(run.host.name, run.id)
            if isinstance(found, tuple):
                return run.host, found[1]
        return run.host, replace(run.record)

    async def _read_record(self, name: str, run_id: str) -> tuple[Host, RunRecord] | str | None:
        """The run on one host: (host, record), None when it has no such run, or why it cannot be reached."""
        h = self.host(name)
        path = f"{runs_root(h.config)}/{run_id}/{RUN_JSON}"
        try:
            data = await h.read_bytes(path)
        except FileNotFoundError:
            return None
        except HostUnreachable as exc:
            reason = unreachable_reason(h.config, exc)
            self.seen.unreachable(self._seen_key(h.config), reason)
            return reason
        try:
            return h, RunRecord.from_json(json.loads(data.decode("utf-8")))
        except (ValueError, TypeError):
            raise ServelabError(f"{name}: {path} is not a valid run record") from None

    def _run_unreachable(self, run_id: str, host: str, reason: str) -> RunUnreachable:
        note = self.seen.host(self._seen_key(self.catalog.host(host))).note
        seen = self.seen.run(run_id)
        last: RunRecord | None = None
        when: str | None = None
        if seen is not None:
            try:
                last = RunRecord.from_json(seen[1].record)
                when = clock(seen[1].seen_at)
            except (TypeError, ServelabError):
                last = None
        return RunUnreachable(run_id, host, reason, last, when, note or None)

    async def status(self, run: RunRef, *, analyze: bool = True) -> RunStatus:
        """Liveness (pid + start time, read from the host's /proc), exit code and log analysis.

        Only file reads: no command runs on the host, so polling it every second is cheap over SSH.
        """
        h, rec = await self._at(run)
        try:
            alive, code = await self._liveness(h, rec)
        except HostUnreachable as exc:
            self.seen.unreachable(self._seen_key(h.config), unreachable_reason(h.config, exc))
            raise self._run_unreachable(rec.id, h.name, unreachable_reason(h.config, exc)) from None
        self.seen.answered(self._seen_key(h.config), [rec.to_json()])
        job = self.placement(h.config).view(rec)
        if not analyze:
            return RunStatus(record=rec, alive=alive, exit_code=code, job=job)
        try:
            analysis = await self.live.get(rec.id, rec.engine).catch_up(h, rec.log_path, alive=alive, exit_code=code)
        except HostUnreachable:
            return RunStatus(record=rec, alive=alive, exit_code=code, job=job)
        except Exception as exc:  # the analyzer must never break status
            self.live.drop(rec.id)
            why = " ".join(f"{type(exc).__name__}: {exc}".split())
            return RunStatus(record=rec, alive=alive, exit_code=code, analysis_error=why, job=job)
        return RunStatus(record=rec, alive=alive, exit_code=code, analysis=analysis, job=job)

    async def _liveness(self, h: Host, rec: RunRecord) -> tuple[bool, int | None]:
        """(alive, exit code) of a run, as its host's placement finds it; updates ``rec.status`` and
        ``rec.exit_code`` (``engines/placements``)."""
        return await self.placement(h.config).liveness(h, rec)

    # -- the log ----------------------------------------------------------------------------------
    async def log_tail(self, run: RunRef, nbytes: int = TAIL_BYTES) -> LogTail:
        """The whole lines in the last ``nbytes`` of the engine log, read in one ranged read.

        What a viewer shows first: a long log's end is on screen at once, while :meth:`follow`
        brings the whole log from its first byte behind it. An absent log is an empty tail.
        """
        h, rec = await self._at(run)
        try:
            size = await h.size(rec.log_path)
            start = max(size - nbytes, 0)
            data = await h.read_bytes(rec.log_path, start, size - start)
        except FileNotFoundError:
            return LogTail(0, b"")
        if start > 0:  # drop the partial first line: a tail starts at a line start
            cut = data.find(b"\n") + 1
            if cut == 0:
                return LogTail(start + len(data), b"")
            start, data = start + cut, data[cut:]
        return LogTail(start, data)

    async def follow(self, run: RunRef, offset: int = 0) -> AsyncGenerator[tuple[int, bytes], None]:
        """The engine log from ``offset``: yields ``(new_offset, chunk)`` until the run has ended.

        Survives dropped connections (it keeps asking the host). When the log shrinks below
        ``offset`` (truncated or replaced) it yields ``(0, b"")`` once and continues from 0.
        """
        h, rec = await self._at(run)
        log = rec.log_path
        exit_path = f"{rec.run_dir}/{EXIT_CODE}"
        down_since: float | None = None
        idle = 0
        loop = asyncio.get_running_loop()
        while True:
            try:
                try:
                    data = await h.read_bytes(log, offset, CHUNK)
                except FileNotFoundError:
                    data = b""
                if data:
                    down_since = None
                    idle = 0
                    offset += len(data)
                    yield offset, data
                    continue
                try:
                    size = await h.size(log)
                except FileNotFoundError:
                    size = 0
                if size < offset:
                    offset = 0
                    yield 0, b""
                    continue
                ended = await h.exists(exit_path)
                if not ended and idle % 4 == 3:  # every ~1 s: the engine may be gone with no exit code
                    alive, _ = await self._liveness(h, rec)
                    ended = not alive and (rec.pid is not None or rec.status.is_terminal)
                down_since = None
            except HostUnreachable:
                now = loop.time()
                down_since = down_since if down_since is not None else now
                if now - down_since > FOLLOW_UNREACHABLE_SECONDS:
                    raise
                await asyncio.sleep(1.0)
                continue
            if ended:
                tail = await h.read_bytes(log, offset, None) if await h.exists(log) else b""
                if tail:
                    offset += len(tail)
                    yield offset, tail
                return
            idle += 1
            await asyncio.sleep(POLL_SECONDS)

    # -- stop and cleanup -------------------------------------------------------------------------
    async def stop(self, run: RunRef, grace: float = 10.0, *, leader_first: bool = False, engine_plan: bool = True) -> RunStatus:
        """SIGTERM to the run's process group, SIGKILL after ``grace``; only this run's processes.
        ``leader_first``: SIGTERM its leader alone first (a daemon that stops its children itself).
        The engine's adapter may ask for both (``stop_plan``: SGLang's leader first, 30 s at least);
        ``engine_plan=False`` stops the group as a whole (a node of a multi-node group, whose broken
        collective leaves its leader unable to shut its children down in order)."""
        h, rec = await self._at(run)
        try:
            stopped = await self.placement(h.config).stop(h, rec, grace, leader_first=leader_first, engine_plan=engine_plan)
        except HostUnreachable as exc:
            raise self._run_unreachable(rec.id, h.name, unreachable_reason(h.config, exc)) from None
        self.seen.answered(self._seen_key(h.config), [stopped.record.to_json()])
        return stopped

    async def cleanup(self, host: str | None = None, dry_run: bool = True, *, run: str | None = None) -> builtins.list[str]:
        """Leftovers of ended servelab runs: their stray processes and /dev/shm files.

        With ``dry_run`` (the default) nothing is touched; the list says what would be removed.
        ``run``: that one run's leftovers only (its own cleanup, as a campaign does after each load).
        """
        out: list[str] = []
        for name in self.host_names(host):
            h = self.host(name)
            try:
                if not await h.exists(runs_root(h.config)):
                    continue
                args = ["cleanup", runs_root(h.config)] + ([] if dry_run else ["--apply"]) + (["--run", run] if run is not None else [])
                answer = await self._ctl(h, *args)
            except HostUnreachable as exc:
                self.unreachable[name] = str(exc)
                continue
            for p in answer.get("processes", []):
                out.append(f"{name}: process {p['pid']} of run {p['run']}: {' '.join(str(p['command']).split())}")
            for s in answer.get("shm", []):
                out.append(f"{name}: {s['path']} (shared memory of run {s['run']})")
        return out

    # -- artifacts and the server's address ------------------------------------------------------
    async def write_artifact(self, run: RunRef, name: str, data: bytes) -> None:
        """Store a file (``probe.json``...) in the run's folder on its host, atomically (a located
        run's own :meth:`Located.write` asks no host where the run is)."""
        check_artifact(name)
        await Located(*await self._at(run)).write(name, data)

    async def read_artifact(self, run: RunRef, name: str) -> bytes | None:
        check_artifact(name, reading=True)
        return await Located(*await self._at(run)).read(name)

    async def base_url(self, run: RunRef) -> str:
        """``http://127.0.0.1:<port>`` reaching the run's server from here (forwarded over SSH)."""
        h, rec = await self._at(run)
        return await self.placement(h.config).base_url(h, rec)


def _dump(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


async def weights_identities(h: Host, cfg: HostConfig, model: str, drafter: str | None) -> tuple[TargetIdentity | None, str]:
    """What a run serves by its weights: the target's fingerprint (on the host, cached there) and the
    drafter's; None / "" for what is not a readable safetensors folder (a hub id, a rehearsal's dummy)."""
    target = await target_identity(h, cfg.python, model, timeout=30.0)
    ident = await drafter_identity(h, drafter) if drafter else None
    return target, ident.fingerprint if ident is not None else ""

