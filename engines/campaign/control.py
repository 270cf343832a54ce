"""Start, follow, stop and resume a campaign whose queue runs on the host (``helpers/campaignctl.py``).

servelab's side of a campaign is short: preflight every load (a failure skips every point of that
load), write the plan document (each load's exact launch argv/env and run record as a run gets
them, each point's probe settings and request bodies) to ``<workdir>/campaigns/<id>/plan.json`` on
the host, and start the supervisor there detached. Everything after that happens on the host;
``status`` reads ``state.json`` back, ``stop`` asks the supervisor to stop, ``resume`` starts a new
supervisor on the same plan, which skips finished points.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from servelab.engines.campaign import fleetctl
from servelab.engines.campaign.check import campaign_files, load_checked
from servelab.engines.campaign.definition import load_campaign
from servelab.engines.campaign.document import PLAN_JSON, Located, Progress, build_document, campaigns_root, new_campaign_id
from servelab.engines.campaign.plan import Plan, plan
from servelab.engines.catalog.folder import Catalog
from servelab.engines.errors import ServelabError
from servelab.engines.helpers import helper_script, last_json, last_line
from servelab.engines.hosts.base import Host, HostUnreachable
from servelab.engines.hosts.registry import open_host
from servelab.engines.hosts.scripts import SCRIPTS
from servelab.engines.hosts.hostsfile import LOCAL, HostConfig
from servelab.engines.runs.state import CampaignState

CTL = "campaignctl.py"
#: Host scripts the supervisor runs (uploaded beside runctl.py, one file per content version).
HOST_SCRIPTS = ("campaignctl.py", "runctl.py", "timed_client.py")


async def upload_scripts(host: Host) -> dict[str, str]:
    """Each host script's path on the host (``engines/hosts/scripts.py``: uploaded once per content hash)."""
    return {name.removesuffix(".py"): await SCRIPTS.ensure(host, helper_script(name)) for name in HOST_SCRIPTS}


# -- the state as servelab reads it ---------------------------------------------------------------------
@dataclass(frozen=True)
class PointState:
    name: str
    load: int
    status: CampaignState
    error: str | None = None
    result: str | None = None
    #: The host it ran on (a fleet campaign; None on one host, where every point shares it).
    host: str | None = None
    #: Where its load was taken from, and why ("unreachable", "time limit reached").
    moved_from: str | None = None
    moved_why: str | None = None


@dataclass(frozen=True)
class LoadState:
    index: int
    status: CampaignState
    run_id: str | None = None
    error: str | None = None
    exit_code: int | None = None
    load_s: float | None = None
    #: A fleet campaign's: the load's host now, why it is there, and each move it had.
    host: str | None = None
    reason: str | None = None
    moves: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CampaignStatus:
    """One campaign on its host: what ``state.json`` says and whether its supervisor lives."""

    id: str
    campaign: str
    host: str
    dir: str
    #: running, waiting (for the GPU set), done, stopped, failed, or interrupted (supervisor gone).
    status: CampaignState
    supervisor_alive: bool
    loads: list[LoadState] = field(default_factory=list)
    points: list[PointState] = field(default_factory=list)
    current: dict[str, Any] | None = None
    waiting_for: Any = None
    error: str | None = None
    #: A fleet campaign's hosts, and those it dropped (with why); empty on one host.
    hosts: list[str] = field(default_factory=list)
    down: dict[str, str] = field(default_factory=dict)

    def counts(self) -> dict[CampaignState, int]:
        out: dict[CampaignState, int] = {}
        for p in self.points:
            out[p.status] = out.get(p.status, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "campaign": self.campaign,
            "host": self.host,
            "dir": self.dir,
            "status": self.status,
            "supervisor_alive": self.supervisor_alive,
            "current": self.current,
            "waiting_for": self.waiting_for,
            "error": self.error,
            "hosts": self.hosts,
            "down": self.down,
            "counts": self.counts(),
            "loads": [vars(ld) for ld in self.loads],
            "points": [vars(p) for p in self.points],
        }


def status_from_answer(answer: dict[str, Any], host: str, camp_dir: str, camp_id: str) -> CampaignStatus:
    """campaignctl's ``status`` answer as a typed status."""
    state = answer.get("state")
    alive = bool(answer.get("supervisor_alive"))
    if not isinstance(state, dict):
        return CampaignStatus(camp_id, camp_id.rsplit("-", 3)[0], host, camp_dir, CampaignState.STARTING if alive else CampaignState.NOT_STARTED, alive)
    status = CampaignState.parse(state.get("status"))
    if status in (CampaignState.RUNNING, CampaignState.WAITING) and not alive:
        status = CampaignState.INTERRUPTED
    loads = [
        LoadState(int(ld["index"]), CampaignState.parse(ld.get("status")), ld.get("run_id"), ld.get("error"), ld.get("exit_code"), ld.get("load_s"),
                  ld.get("host"), ld.get("reason"), list(ld.get("moves") or []))
        for ld in state.get("loads") or []
    ]
    points = [
        PointState(name, int(p.get("load", 0)), CampaignState.parse(p.get("status")), p.get("error"), p.get("result"),
                   p.get("host"), p.get("moved_from"), p.get("moved_why"))
        for name, p in (state.get("points") or {}).items()
    ]
    fleet: dict[str, Any] = state["fleet"] if isinstance(state.get("fleet"), dict) else {}
    return CampaignStatus(
        id=str(state.get("id") or camp_id),
        campaign=str(state.get("campaign") or ""),
        host=host,
        dir=camp_dir,
        status=status,
        supervisor_alive=alive,
        loads=loads,
        points=points,
        current=state.get("current"),
        waiting_for=state.get("waiting_for"),
        error=state.get("error"),
        hosts=[str(h.get("name")) for h in fleet.get("hosts") or []],
        down={str(k): str(v) for k, v in (fleet.get("down") or {}).items()},
    )


def describe_status(st: CampaignStatus) -> list[str]:
    """The status as terminal lines."""
    counts = ", ".join(f"{n} {s}" for s, n in sorted(st.counts().items())) or "no points"
    where = f"the fleet {', '.join(st.hosts)}" if st.hosts else st.host
    lines = [f"campaign {st.id} on {where}: {st.status} ({counts})"]
    if st.status == CampaignState.INTERRUPTED:
        lines.append(f"  the {'coordinator' if st.hosts else 'supervisor'} is gone: servelab campaign resume {st.id}")
    for host, why in st.down.items():
        lines.append(f"  {host} dropped out: {why}")
    if st.waiting_for:
        lines.append(f"  waiting for the GPU set, held by {st.waiting_for}")
    if st.error:
        lines.append(f"  error: {st.error}")
    for ld in st.loads:
        extra = f", loaded in {ld.load_s:.0f} s" if ld.load_s is not None else ""
        run = f" run {ld.run_id}" if ld.run_id else ""
        why = f": {ld.error}" if ld.error else ""
        on = f" on {ld.host}" if ld.host else ""
        lines.append(f"  load {ld.index + 1}{on}: {ld.status}{run}{extra}{why}")
        for m in ld.moves:
            lines.append(f"    moved from {m.get('from')}{' to ' + str(m['to']) if m.get('to') else ' (no host can take it now)'}: {m.get('why')}")
        for p in st.points:
            if p.load == ld.index:
                now = " <- now" if (st.current and st.current.get("point") == p.name) or (st.hosts and st.supervisor_alive and p.status == CampaignState.RUNNING) else ""
                host = f" on {p.host}" if p.host and st.hosts else ""
                moved = f" (moved from {p.moved_from}: {p.moved_why})" if p.moved_from else ""
                lines.append(f"    - {p.name}: {p.status}{host}{': ' + p.error if p.error else ''}{moved}{now}")
    return lines


# -- the plan document ---------------------------------------------------------------------------------
def _host_of(p: Plan) -> str:
    hosts = sorted({pt.experiment.host for pt in p.points})
    if len(hosts) != 1:
        raise ServelabError(f"campaign {p.campaign}: its points run on {', '.join(hosts) or 'no host'}; a campaign runs on one host")
    return hosts[0]


# -- the commands ---------------------------------------------------------------------------------------
async def _ctl(host: Host, *args: str, timeout: float = 120.0) -> dict[str, Any]:
    """One campaignctl.py command and its JSON answer (the script is run through the host-script cache)."""
    try:
        done = await SCRIPTS.run(host, host.config.python, helper_script(CTL), *args, timeout=timeout)
    except HostUnreachable as exc:
        raise ServelabError(str(exc)) from None
    answer = last_json(done)
    if answer is None:
        raise ServelabError(f"{host.name}: campaign control failed: {last_line(done.stderr) or f'exit code {done.exit_code}'}")
    return answer


async def start(catalog: Catalog, name: str, *, skip_preflight: bool = False, progress: Progress | None = None) -> CampaignStatus:
    """Preflight, write the plan on the host, start the detached supervisor; the status right after."""
    campaign = load_checked(catalog, name)
    p = plan(campaign, catalog)
    if p.problems:
        raise ServelabError(f"{p.problems[0]} (and {len(p.problems) - 1} more: servelab check {name})" if len(p.problems) > 1 else str(p.problems[0]))
    if not p.points:
        raise ServelabError(f"campaign {p.campaign} has no points to run")
    if p.is_fleet:  # a local coordinator over several hosts' queues
        return await _status(await fleetctl.start(catalog, p, skip_preflight=skip_preflight, progress=progress))
    cfg = catalog.host(_host_of(p))
    host = open_host(cfg)
    camp_id = new_campaign_id(p.campaign)
    camp_dir = f"{campaigns_root(cfg)}/{camp_id}"
    try:
        scripts = await upload_scripts(host)
        doc = await build_document(catalog, p, cfg, camp_id, scripts, skip_preflight=skip_preflight, progress=progress)
        await host.write_bytes(f"{camp_dir}/{PLAN_JSON}", (json.dumps(doc, indent=1) + "\n").encode())
    except HostUnreachable as exc:
        raise ServelabError(str(exc)) from None
    return await _start_supervisor(Located(host, camp_id, camp_dir))


async def _start_supervisor(where: Located) -> CampaignStatus:
    answer = await _ctl(where.host, "start", where.dir)
    if not answer.get("ok"):
        raise ServelabError(f"cannot start campaign {where.id} on {where.host.name}: {answer.get('error')}")
    return await _status(where)


async def _status(where: Located) -> CampaignStatus:
    answer = await _ctl(where.host, "status", where.dir)
    return status_from_answer(answer, where.host.name, where.dir, where.id)


def _home_of(p: Plan) -> str:
    """Where a campaign's files are: a fleet's on this machine, a one-host campaign's on its host."""
    return LOCAL if p.is_fleet else _host_of(p)


async def locate(catalog: Catalog, ref: str) -> Located:
    """A campaign run by id, or the latest run of a campaign by its file or name."""
    candidates: list[tuple[HostConfig, str | None]] = []
    try:
        campaign = load_checked(catalog, ref)
    except ServelabError:
        campaign = None
    if campaign is not None:
        p = plan(campaign, catalog)
        candidates.append((catalog.host(_home_of(p)), p.campaign))
    else:  # an id: the host of the campaign it names is asked first, so a down host elsewhere costs nothing
        names = catalog.hosts.names()
        for path in campaign_files(catalog.folder):
            found, _ = load_campaign(path)
            if found is not None and ref.startswith(found.name + "-"):
                try:
                    first = _home_of(plan(found, catalog))
                except ServelabError:
                    break
                names = [first] + [n for n in names if n != first]
                break
        candidates += [(catalog.host(n), None) for n in names]
    reasons: list[str] = []
    for cfg, prefix in candidates:
        host = open_host(cfg)
        root = campaigns_root(cfg)
        try:
            names = await host.listdir(root) if await host.exists(root) else []
        except HostUnreachable as exc:
            reasons.append(str(exc))
            continue
        if prefix is None:
            if ref in names:
                return Located(host, ref, f"{root}/{ref}")
            continue
        mine = sorted(n for n in names if n.startswith(prefix + "-") and n[len(prefix) + 1 :].count("-") == 2)
        if mine:
            return Located(host, mine[-1], f"{root}/{mine[-1]}")
        raise ServelabError(f"campaign {prefix} was never started on {cfg.name} (servelab campaign start {ref})")
    extra = f" (unreachable: {'; '.join(reasons)})" if reasons else ""
    raise ServelabError(f"no campaign {ref!r}: not a campaign file or name, and no started campaign has that id{extra}")


async def status(catalog: Catalog, ref: str) -> CampaignStatus:
    return await _status(await locate(catalog, ref))


async def stop(catalog: Catalog, ref: str, grace: float = 90.0) -> CampaignStatus:
    """SIGTERM to the campaign's supervisor (verified on the host), which stops its current run."""
    where = await locate(catalog, ref)
    answer = await _ctl(where.host, "stop", where.dir, f"{grace:g}", timeout=grace + 60)
    if answer.get("remaining"):
        raise ServelabError(f"campaign {where.id}: the supervisor is still alive {grace:g} s after SIGTERM")
    return await _status(where)


async def resume(catalog: Catalog, ref: str) -> CampaignStatus:
    """A new supervisor on the same plan: finished points are skipped, an interrupted load relaunched."""
    where = await locate(catalog, ref)
    await upload_scripts(where.host)  # the plan names runctl's and timed_client's paths: put back any removed
    current = await _status(where)
    if current.supervisor_alive:
        raise ServelabError(f"campaign {where.id} is still running on {where.host.name} (supervisor alive); nothing to resume")
    if current.status == CampaignState.DONE:
        raise ServelabError(f"campaign {where.id} is done; nothing to resume")
    if current.hosts:  # a fleet campaign: a new local coordinator
        return await _status(await fleetctl.resume(catalog, where))
    return await _start_supervisor(where)
