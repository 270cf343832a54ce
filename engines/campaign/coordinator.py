"""The fleet coordinator: a detached local process that runs a fleet campaign's queues.

A fleet campaign (``hosts = [...]``) has no supervisor on one host: this process, started by
``engines/campaign/fleetctl.py`` on this machine, holds the :class:`~servelab.engines.campaign.fleet.Fleet`
and dispatches each load as an ordinary run through the caller's ``RunsAPI`` (``start_spec``: a
plain host's runctl, a scheduler host's batch submission), waits for its server, times each point from the
server's own host (``probe.timer.HostTimer``, the timed client every probe uses) with ``/metrics``
around each repeat, and stops the run (its placement's stop: a job is cancelled). Its files are the host supervisor's
(``plan.json``, ``state.json``, ``points/<point>.json``, ``supervisor.pid``), in the local
campaigns folder, so ``campaign status/stop/report`` read a fleet campaign as they read any other.

A host that cannot be reached (a run's status, a launch, a timed batch) is dropped: its unfinished
loads move to another host (``Fleet.drop``); a job the scheduler ended is requeued. A done point is
saved before it is marked done and never run again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx

from servelab.engines.campaign.document import PID_JSON, PLAN_JSON, STATE_JSON
from servelab.engines.campaign.fleet import Fleet
from servelab.engines.catalog.folder import Catalog
from servelab.engines.errors import ServelabError
from servelab.engines.catalog.experiment import Experiment, SourcedExperiment
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.hosts.kinds import title
from servelab.engines.preflight.checks import run_preflight
from servelab.engines.probe.runner import scrape_metrics, wait_ready
from servelab.engines.probe.timer import HostTimer, TimedBatch
from servelab.engines.runs.records import Located, RunRecord, RunRef, RunsAPI, RunUnreachable, new_run_id, unreachable_reason
from servelab.engines.runs.state import CampaignState, RunState
from servelab.engines.atomic_write import write_atomic
from servelab.engines.placements.base import placement_for

POINTS = "points"
POLL_S = 0.5
STOP_GRACE_S = 10.0
#: How long a failed point waits for its run's state to say whether the run ended under it.
SETTLE_S = 5.0
#: Job ends that say nothing about the load itself: its unfinished points are requeued. Out of
#: memory would end the same way again, and a cancel is someone's decision: those end the load.
REQUEUED_ENDS = frozenset({RunState.TIMED_OUT, RunState.NODE_FAILED, RunState.PREEMPTED})


class HostDropped(Exception):
    """The load's host did not answer: the fleet moves its unfinished points."""


class SchedulerEnded(Exception):
    """The scheduler ended the load's job (time limit, node failure, preemption): its points are requeued."""


class LoadFailed(Exception):
    """The load cannot serve: a refused launch, a crash before ready, a failed preflight."""

    def __init__(self, why: str, status: CampaignState = CampaignState.CRASHED, exit_code: int | None = None) -> None:
        super().__init__(why)
        self.status = status
        self.exit_code = exit_code


def _write_json(path: Path, value: Any) -> None:
    write_atomic(path, (json.dumps(value, indent=1, sort_keys=True) + "\n").encode(), durable=False)


def proc_start_time(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(raw[raw.rfind(")") + 2 :].split()[19])


class Coordinator:
    """One fleet campaign's queues, run from its folder ``camp_dir`` on this machine."""

    def __init__(self, runs: RunsAPI, camp_dir: Path) -> None:
        self.runs = runs
        self.catalog: Catalog = runs.catalog
        self.dir = camp_dir
        self.plan: dict[str, Any] = json.loads((camp_dir / PLAN_JSON).read_text())
        self.state: dict[str, Any] = json.loads((camp_dir / STATE_JSON).read_text())
        self.fleet = Fleet.from_json(self.state)
        if self.state.get("status") != "starting":  # a resume: every host is tried again, what was in flight runs again
            self.fleet.resumed()
        self.loads = {int(ld["index"]): ld for ld in self.plan["loads"]}
        self.points = {p["name"]: p for p in self.plan["points"]}
        self.current: dict[str, dict[str, Any]] = {}
        (camp_dir / POINTS).mkdir(exist_ok=True)
        #: When each host last answered (monotonic), for the drops' figures.
        self.answered: dict[str, float] = {}
        #: The runs this coordinator started, located once.
        self.located: dict[str, Located] = {}
        #: The load tasks running now, with their load and host.
        self.tasks: dict[asyncio.Task[None], tuple[int, str]] = {}
        #: Each drop: the host, why, the loads moved, how long the host had been silent before (``silent_s``:
        #: from its last answer) and seconds from the drop being seen to its loads being moved (``state.json``'s ``drops``).
        self.drops: list[dict[str, Any]] = list(self.state.get("drops") or [])

    # -- state.json
    def save(self, status: str | None = None, error: str | None = None) -> None:
        if status is not None:
            self.state["status"] = status
        if error is not None:
            self.state["error"] = error
        self.state.update(self.fleet.to_json())
        for ld in self.state["loads"]:
            ld["experiment"] = self.loads[int(ld["index"])]["experiment"]
        steps = [self.current[k] for k in sorted(self.current, key=int)]
        self.state["current"] = dict(steps[0]) if steps else None  # what a one-host campaign's readers show
        self.state["current_by_load"] = dict(self.current)
        self.state["drops"] = self.drops
        self.state["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        _write_json(self.dir / STATE_JSON, self.state)

    # -- one load on one host
    def _sourced(self, index: int, host: str) -> SourcedExperiment:
        load = self.loads[index]
        exp = Experiment.model_validate({**tomllib.loads(load["experiment_toml"]), "host": host})
        origin = self.catalog.get(str(load["base"]))
        return SourcedExperiment(experiment=exp, path=origin.path, text=load["experiment_toml"])

    async def _reachable(self, host: str) -> str | None:
        """None when ``host`` answers; else why not (one line)."""
        h = self.runs.host(host)
        try:
            await asyncio.wait_for(h.exists("/"), timeout=h.config.connect_timeout + 20)
        except HostUnreachable as exc:
            return unreachable_reason(h.config, exc)
        except (TimeoutError, OSError) as exc:
            return f"{host}: no answer ({type(exc).__name__})"
        self.answered[host] = time.monotonic()
        return None

    async def _dropped_or(self, host: str, exc: Exception) -> Exception:
        """A failure as what it means: the host gone (it does not answer now), or the failure itself."""
        why = await self._reachable(host)
        return HostDropped(why) if why is not None else exc

    async def _launch(self, index: int, host: str) -> RunRecord:
        cfg = self.catalog.host(host)
        sourced = self._sourced(index, host)
        why = await self._reachable(host)
        if why is not None:
            raise HostDropped(why)
        patches: dict[str, Any] = {}
        if not self.plan.get("skip_preflight"):
            self.current[str(index)] = {"load": index, "point": None, "step": "preflight", "host": host}
            self.save()
            try:
                report = await run_preflight(self.catalog, sourced, cfg, apply=True)
            except (HostUnreachable, ServelabError) as exc:
                raise await self._dropped_or(host, LoadFailed(f"preflight: {exc}", CampaignState.SKIPPED)) from None
            if not report.ok:
                raise LoadFailed(f"preflight failed: {report.summary()}", CampaignState.SKIPPED)
            patches = dict(report.patches.record()) if report.patches is not None else {}
        spec = self.catalog.launch_spec(sourced, cfg)
        run_id = new_run_id(sourced.name)
        self.fleet.launched(index, run_id)  # before the submit: a stop that lands during it still finds the run
        self.save()
        try:
            rec = await self.runs.start_spec(sourced, cfg, spec, run_id, sourced.experiment.port, patches)
        except (HostUnreachable, ServelabError) as exc:
            raise await self._dropped_or(host, LoadFailed(f"refused: {exc}", CampaignState.REFUSED)) from None
        self.located[rec.id] = Located(self.runs.host(host), rec)  # found once: no host is asked where it is again
        return rec

    def _ref(self, run_id: str) -> RunRef:
        return self.located.get(run_id, run_id)

    async def _status(self, run_id: str, host: str) -> Any:
        try:
            st = await self.runs.status(self._ref(run_id), analyze=False)
            self.answered[host] = time.monotonic()
            return st
        except RunUnreachable as exc:
            raise HostDropped(exc.short()) from None
        except HostUnreachable as exc:
            raise HostDropped(str(exc)) from None

    def _check_ended(self, st: Any, *, served: bool = False) -> None:
        """Raise what a run that is no longer serving means for its load (``served``: it was ready)."""
        if st.job is not None and st.job.state in REQUEUED_ENDS:
            raise SchedulerEnded(st.job.words)
        if st.job is not None and st.job.is_queued:
            if served:  # the scheduler put the job back in its queue (a node failed, a preemption that requeues)
                raise SchedulerEnded(f"{title(st.job.scheduler)} requeued its job ({st.job.words})")
            return
        if not st.alive:
            code = st.exit_code
            raise LoadFailed(f"engine exited with code {code}" if code is not None else f"engine gone ({st.status})", exit_code=code)

    async def _ready(self, rec: RunRecord, host: str) -> tuple[str, RunRecord]:
        deadline = time.monotonic() + float(self.plan.get("ready_timeout_s") or 1800)
        while time.monotonic() < deadline:
            st = await self._status(rec.id, host)
            self._check_ended(st)
            if st.alive:
                try:
                    url = await self.runs.base_url(self._ref(rec.id))
                    async with httpx.AsyncClient(base_url=url, timeout=10.0) as http:
                        return await wait_ready(http, timeout_s=1.0), st.record
                except ServelabError:
                    pass
                except HostUnreachable as exc:
                    raise HostDropped(str(exc)) from None
            await asyncio.sleep(POLL_S)
        raise LoadFailed(f"not ready after {self.plan.get('ready_timeout_s')} s")

    async def _point(self, name: str, rec: RunRecord, host: str, model: str) -> str | None:
        """Warm-up, then the timed repeats with ``/metrics`` around each, saved to ``points/<name>.json``;
        None when done, else why not."""
        point = self.points[name]
        probe = point["probe"]
        h = self.runs.host(host)
        there = placement_for(h.config).server_address(rec)
        timer = HostTimer(h, h.config.python, f"http://{there}:{rec.port}")
        here = await self.runs.base_url(self._ref(rec.id))
        bodies = [dict(b, model=model) for b in point["bodies"]]
        timeout = float(point.get("timeout_s", 300))
        out: dict[str, Any] = {"point": name, "run_dir": rec.run_dir, "run_id": rec.id, "host": host, "served_model": model,
                               "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "repeats": []}
        try:
            if probe["warmup"]:
                warm = [dict(bodies[i % len(bodies)], max_tokens=min(probe["max_tokens"], 32)) for i in range(probe["warmup"])]
                batch = await timer.time_batch(warm, 1, timeout)
                bad = next((r.error for r in batch.records if r.error), None)
                if bad:
                    return f"warm-up failed: {bad}"
            async with httpx.AsyncClient(base_url=here, timeout=10.0) as http:
                for rep in range(int(probe["repeats"])):
                    before = await scrape_metrics(http)
                    batch = await timer.time_batch(bodies, int(probe["concurrency"]), timeout)
                    after = await scrape_metrics(http) if before is not None else None
                    out["repeats"].append({"repeat": rep, "duration_s": batch.duration_s, "records": _records(batch), "metrics_before": before, "metrics_after": after})
                    if batch.records and all(r.error for r in batch.records):
                        return f"every request failed: {batch.records[0].error}"
        except (HostUnreachable, ServelabError) as exc:
            raise await self._dropped_or(host, LoadFailed(f"timed client: {exc}")) from None
        out["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        _write_json(self.dir / POINTS / f"{name}.json", out)
        return None

    async def _settled(self, run_id: str, host: str) -> None:
        """After a failed point: raise what the run's end means if it ended (or ends within
        ``SETTLE_S``: a job's state trails its engine's death); return when it still serves."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            st = await self._status(run_id, host)
            self._check_ended(st, served=True)
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(POLL_S)

    def _blocked(self, name: str) -> str | None:
        ref = self.points[name].get("baseline_point")
        p = self.fleet.points.get(ref) if ref else None
        if p is not None and p.status in (CampaignState.FAILED, CampaignState.SKIPPED, CampaignState.BLOCKED):
            return f"baseline point {ref} {p.status}"
        return None

    async def _stop(self, run_id: str) -> None:
        try:
            await self.runs.stop(self._ref(run_id), STOP_GRACE_S)
        except (ServelabError, HostUnreachable, OSError):
            pass  # gone already, or its host is: recorded as left

    async def run_load(self, index: int, host: str) -> None:
        """One load on ``host``, start to stop; every outcome ends in the fleet's state."""
        fleet = self.fleet
        rec: RunRecord | None = None
        t0 = time.time()
        try:
            self.current[str(index)] = {"load": index, "point": None, "step": "launching", "host": host}
            rec = await self._launch(index, host)
            self.current[str(index)]["step"] = "loading"
            self.save()
            model, rec = await self._ready(rec, host)
            fleet.ready(index, round(time.time() - t0, 2))
            self.save()
            for name in fleet.todo(index):
                why = self._blocked(name)
                if why is not None:
                    fleet.point_ended(name, host, error=why, status=CampaignState.BLOCKED)
                    continue
                self.current[str(index)] = {"load": index, "point": name, "step": "probing", "host": host}
                fleet.point_running(name, host)
                self.save()
                why = await self._point(name, rec, host, model)
                if why is not None:  # the load's end first: a job its scheduler ended requeues the point rather than failing it
                    await self._settled(rec.id, host)
                fleet.point_ended(name, host, error=why, result=f"{POINTS}/{name}.json" if why is None else None)
                self.save()
                self._check_ended(await self._status(rec.id, host), served=True)
            self.current[str(index)] = {"load": index, "point": None, "step": "stopping", "host": host}
            await self._stop(rec.id)
            fleet.load_ended(index, CampaignState.DONE)
        except HostDropped as exc:
            if host not in fleet.down:
                seen = time.monotonic()
                silent = round(seen - self.answered[host], 2) if host in self.answered else None
                for other, (_i, where) in self.tasks.items():  # the host's other loads: moved with this one
                    if where == host and other is not asyncio.current_task():
                        other.cancel()
                moves = fleet.drop(host, str(exc))
                self.drops.append({"host": host, "why": str(exc), "loads": sorted({i for i, ld in fleet.loads.items() for m in ld.moves if m in moves}),
                                   "silent_s": silent, "moved_in_s": round(time.monotonic() - seen, 3), "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        except SchedulerEnded as exc:
            if rec is not None:  # what is left of its job (a requeued job would start again): cancelled
                await self._stop(rec.id)
            fleet.scheduler_end(index, str(exc))
        except LoadFailed as exc:
            if rec is not None:
                await self._stop(rec.id)
            fleet.load_ended(index, exc.status, str(exc), exc.exit_code)
        except (ServelabError, OSError, ValueError) as exc:  # anything else this load hit ends it, not the queues
            if rec is not None:
                await self._stop(rec.id)
            fleet.load_ended(index, CampaignState.REFUSED, f"{type(exc).__name__}: {exc}" if not isinstance(exc, ServelabError) else str(exc))
        finally:
            self.current.pop(str(index), None)
            self.save()

    # -- the queues
    async def _stop_left(self) -> None:
        """Runs a dropped host (or a killed coordinator) left: stopped where their host answers now."""
        for ld in self.fleet.loads.values():
            kept: list[tuple[str, str]] = []
            for run_id, host in ld.left:
                if await self._reachable(host) is None:
                    await self._stop(run_id)
                else:
                    kept.append((run_id, host))
            ld.left = kept

    async def run(self) -> str:
        """Dispatch until every load is final; the campaign's end state."""
        tasks = self.tasks
        try:
            await self._stop_left()
            self.save("running")
            while not self.fleet.finished:
                for h in self.fleet.up():
                    while True:
                        ld = self.fleet.next_load(h)
                        if ld is None:
                            break
                        self.fleet.start(ld.index, h.name)
                        tasks[asyncio.create_task(self.run_load(ld.index, h.name))] = (ld.index, h.name)
                self.save()
                if not tasks:
                    stranded = self.fleet.stranded()
                    down = "; ".join(f"{k}: {v}" for k, v in self.fleet.down.items())
                    why = f"every host that can take load {stranded[0].index + 1} is unreachable ({down})" if stranded else "no host can take the pending loads"
                    self.save("failed", why)
                    return "failed"
                done, _ = await asyncio.wait(list(tasks), timeout=POLL_S, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    del tasks[t]
                    if not t.cancelled():  # cancelled: its host dropped out and its load moved
                        t.result()
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._stop_running()
            await self._stop_left()
            self.save("stopped")
            return "stopped"
        await self._stop_left()
        self.state["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.save("done")
        return "done"

    async def _stop_running(self) -> None:
        """A stop: every run this coordinator started and has not stopped (``scancel`` for a job)."""
        for ld in self.fleet.loads.values():
            if ld.status in (CampaignState.LAUNCHING, CampaignState.READY) and ld.run_id:
                await self._stop(ld.run_id)
            if ld.status in (CampaignState.LAUNCHING, CampaignState.READY):
                ld.status, ld.run_id = CampaignState.PENDING, None
        for p in self.fleet.points.values():
            if p.status is CampaignState.RUNNING:
                p.status = CampaignState.PENDING


def _records(batch: TimedBatch) -> list[dict[str, Any]]:
    return [{"start_s": r.start_s, "error": r.error, "events": [list(e) for e in r.events]} for r in batch.records]


async def coordinate(runs: RunsAPI, camp_dir: Path) -> int:
    """The detached process's body: record its pid, run the queues until done or SIGTERM."""
    pid = os.getpid()
    _write_json(camp_dir / PID_JSON, {"pid": pid, "pgid": os.getpgid(0), "start_time": proc_start_time(pid), "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    coordinator = Coordinator(runs, camp_dir)
    job = asyncio.create_task(coordinator.run())
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, job.cancel)  # campaign stop: end its runs, record stopped
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the terminal that started it going away must not end the queues
    try:
        end = await job
    except asyncio.CancelledError:
        end = "stopped"
    except Exception as exc:  # recorded, so status can say why the queues ended
        coordinator.save("failed", f"{type(exc).__name__}: {exc}")
        raise
    return 0 if end in ("done", "stopped") else 1
