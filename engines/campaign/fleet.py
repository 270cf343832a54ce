"""A campaign over a fleet: which host each load goes to, and what happens when a host drops out.

Pure rules over typed values (no I/O), used by ``campaign plan`` (the first assignment, with its
reason) and by the local coordinator (``engines/campaign/coordinator.py``), which holds a
:class:`Fleet` and saves it as ``state.json`` after every change.

- Each host keeps its own queue: at most ``campaign_slots`` loads at once (hosts.toml, default 1).
- A load goes to a host that fits it (its GPUs, when the host says how many it has): a pinned base
  (``pin = {base = "host"}``) to its pin, any other to the host with the least queued work per
  slot (each load weighs its estimated load time; unknown weighs ``DEFAULT_ESTIMATE_S``), ties in
  the fleet's order.
- A host with room and nothing of its own queued takes the next pending load of a busy host (points
  go to whichever host has room).
- A host that drops out has every unfinished load moved to another live host that fits: only the
  points not yet done move (a done point is never run again), each recorded as "moved from X: why".
- A job the scheduler ended (time limit, node failure, preemption, or put back in its queue)
  has its load requeued the same way (its own host included, when it is least queued), at most
  ``MAX_REQUEUES`` times; after that its unfinished points fail.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.runs.state import CampaignState
from servelab.engines.placements.base import placement_for

#: What a load weighs in a queue when no earlier load of its model on that host says.
DEFAULT_ESTIMATE_S = 60.0
#: A load the scheduler ended this many times has its points failed rather than requeued again.
MAX_REQUEUES = 2
#: Point states that are final: never run again.
FINAL_POINT = frozenset({CampaignState.DONE, CampaignState.FAILED, CampaignState.SKIPPED, CampaignState.BLOCKED})
#: Load states that are final.
FINAL_LOAD = frozenset({CampaignState.DONE, CampaignState.CRASHED, CampaignState.SKIPPED, CampaignState.REFUSED})
#: A load holding a slot of its host.
ACTIVE_LOAD = frozenset({CampaignState.LAUNCHING, CampaignState.READY})


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class FleetHost:
    """One host of a fleet as the rules see it."""

    name: str
    kind: str = "plain"
    slots: int = 1
    #: GPUs a load may have there (None: the host does not say).
    gpus: int | None = None


def fleet_host(cfg: HostConfig) -> FleetHost:
    """A hosts.toml entry as a fleet host, its GPUs as its placement counts them (a plain host's ``gpus``, a batch host's per node)."""
    return FleetHost(cfg.name, cfg.kind, cfg.campaign_slots, placement_for(cfg).gpus(cfg))


@dataclass(frozen=True)
class LoadNeed:
    """What placing a load needs to know: its GPUs, its estimate, its pin."""

    index: int
    gpus: int = 1
    estimate_s: float | None = None
    pin: str | None = None


@dataclass(frozen=True)
class Assignment:
    """Where a load goes first, and why (one short reason); host None: nowhere fits."""

    load: int
    host: str | None
    reason: str


def fits(need: LoadNeed, host: FleetHost) -> bool:
    return host.gpus is None or need.gpus <= host.gpus


def _pick(need: LoadNeed, hosts: Sequence[FleetHost], queued: dict[str, float]) -> Assignment:
    """The rule for one load given the work already queued on each host (seconds)."""
    names = ", ".join(h.name for h in hosts) or "none"
    if need.pin is not None:
        pinned = next((h for h in hosts if h.name == need.pin), None)
        if pinned is None:
            return Assignment(need.index, None, f"pinned to {need.pin}, which is not available (fleet: {names})")
        if not fits(need, pinned):
            return Assignment(need.index, None, f"pinned to {need.pin}, which has {pinned.gpus} GPUs; the load needs {need.gpus}")
        return Assignment(need.index, pinned.name, "pinned to it by the campaign")
    fitting = [h for h in hosts if fits(need, h)]
    if not fitting:
        return Assignment(need.index, None, f"needs {need.gpus} GPUs; no host has that many (fleet: {names})")
    order = {h.name: i for i, h in enumerate(hosts)}
    best = min(fitting, key=lambda h: (queued.get(h.name, 0.0) / h.slots, order[h.name]))
    ahead = queued.get(best.name, 0.0) / best.slots
    only = f"the only host with {need.gpus} GPUs; " if len(fitting) == 1 and len(hosts) > 1 else ""
    if ahead <= 0:
        return Assignment(need.index, best.name, f"{only}nothing queued there yet")
    return Assignment(need.index, best.name, f"{only}least queued work (~{ahead:.0f} s ahead of it)")


def assign(needs: Iterable[LoadNeed], hosts: Sequence[FleetHost]) -> list[Assignment]:
    """Each load's first host, in run order (deterministic: the same plan gives the same answer)."""
    queued: dict[str, float] = {h.name: 0.0 for h in hosts}
    out: list[Assignment] = []
    for need in needs:
        a = _pick(need, hosts, queued)
        if a.host is not None:
            queued[a.host] += need.estimate_s if need.estimate_s is not None else DEFAULT_ESTIMATE_S
        out.append(a)
    return out


# -- the fleet while the campaign runs ------------------------------------------------------------
@dataclass(frozen=True)
class Move:
    """A load (its unfinished points) taken off a host: to another host, or back in a queue."""

    source: str
    target: str | None
    why: str
    at: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target, "why": self.why, "at": self.at}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Move:
        return cls(str(data.get("from") or ""), data.get("to"), str(data.get("why") or ""), str(data.get("at") or ""))


@dataclass
class FleetLoad:
    index: int
    points: list[str]
    need: LoadNeed
    host: str | None
    reason: str
    status: CampaignState = CampaignState.PENDING
    run_id: str | None = None
    error: str | None = None
    exit_code: int | None = None
    load_s: float | None = None
    moves: list[Move] = field(default_factory=list)
    requeues: int = 0
    #: Runs of this load left on a host that dropped out (its id, its host): stopped when it comes back.
    left: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class FleetPoint:
    name: str
    load: int
    status: CampaignState = CampaignState.PENDING
    host: str | None = None
    error: str | None = None
    result: str | None = None
    moved_from: str | None = None
    moved_why: str | None = None


class Fleet:
    """The coordinator's whole state: hosts up or down, each load's host and each point's."""

    def __init__(self, hosts: Sequence[FleetHost], loads: Sequence[FleetLoad], points: Sequence[FleetPoint]) -> None:
        self.hosts = list(hosts)
        self.down: dict[str, str] = {}
        self.loads = {ld.index: ld for ld in loads}
        self.points = {p.name: p for p in points}

    # -- reading
    def up(self) -> list[FleetHost]:
        return [h for h in self.hosts if h.name not in self.down]

    def active(self, host: str) -> list[FleetLoad]:
        return [ld for ld in self.loads.values() if ld.host == host and ld.status in ACTIVE_LOAD]

    def has_room(self, host: FleetHost) -> bool:
        return host.name not in self.down and len(self.active(host.name)) < host.slots

    def todo(self, index: int) -> list[str]:
        return [n for n in self.loads[index].points if self.points[n].status not in FINAL_POINT]

    @property
    def finished(self) -> bool:
        return all(ld.status in FINAL_LOAD for ld in self.loads.values())

    def stranded(self) -> list[FleetLoad]:
        """Pending loads no live host can take (every host that fits them is down)."""
        return [ld for ld in self.loads.values() if ld.status is CampaignState.PENDING and ld.host is None]

    def _queued(self) -> dict[str, float]:
        out = {h.name: 0.0 for h in self.hosts}
        for ld in self.loads.values():
            if ld.host in out and ld.status not in FINAL_LOAD:
                out[ld.host] += ld.need.estimate_s if ld.need.estimate_s is not None else DEFAULT_ESTIMATE_S
        return out

    # -- dispatch
    def next_load(self, host: FleetHost) -> FleetLoad | None:
        """The load ``host`` starts next: its own first pending one, else one a busy or gone host
        still queues (never another's pinned load)."""
        if not self.has_room(host):
            return None
        pending = sorted((ld for ld in self.loads.values() if ld.status is CampaignState.PENDING), key=lambda ld: ld.index)
        own = next((ld for ld in pending if ld.host == host.name), None)
        if own is not None:
            return own
        for ld in pending:
            if ld.need.pin is not None or not fits(ld.need, host):
                continue
            holder = next((h for h in self.hosts if h.name == ld.host), None)
            if holder is None or not self.has_room(holder):
                was = ld.host
                ld.host = host.name
                ld.reason = f"{was} was busy; {host.name} had room" if was else f"{host.name} had room"
                return ld
        return None

    def start(self, index: int, host: str) -> None:
        ld = self.loads[index]
        ld.host, ld.status, ld.error = host, CampaignState.LAUNCHING, None

    def launched(self, index: int, run_id: str) -> None:
        self.loads[index].run_id = run_id

    def ready(self, index: int, load_s: float | None) -> None:
        ld = self.loads[index]
        ld.status, ld.load_s = CampaignState.READY, load_s

    def point_running(self, name: str, host: str) -> None:
        p = self.points[name]
        p.status, p.host = CampaignState.RUNNING, host

    def point_ended(self, name: str, host: str, *, error: str | None = None, result: str | None = None, status: CampaignState | None = None) -> None:
        p = self.points[name]
        if p.status is CampaignState.DONE:
            raise ValueError(f"point {name} is done already (on {p.host}): a done point is never run again")
        p.host, p.error, p.result = host, error, result
        p.status = status or (CampaignState.DONE if error is None else CampaignState.FAILED)

    def load_ended(self, index: int, status: CampaignState, error: str | None = None, exit_code: int | None = None) -> None:
        ld = self.loads[index]
        for name in self.todo(index):  # what a crash or a refusal leaves undone fails with it
            if status is not CampaignState.DONE:
                self.point_ended(name, ld.host or "", error=error or str(status), status=CampaignState.SKIPPED if status is CampaignState.SKIPPED else None)
        ld.status, ld.error, ld.exit_code = status, error, exit_code

    # -- moves
    def _requeue(self, ld: FleetLoad, source: str, why: str) -> Move:
        """Take ``ld`` off ``source``: its unfinished points pending again, "moved from SOURCE: why",
        and the load on the live host that fits with the least queued work (``source`` itself
        when it is still up and least queued)."""
        if ld.run_id and ld.status in ACTIVE_LOAD and source in self.down:
            ld.left.append((ld.run_id, source))
        ld.status, ld.run_id, ld.load_s = CampaignState.PENDING, None, None
        for name in self.todo(ld.index):
            p = self.points[name]
            p.status, p.error, p.moved_from, p.moved_why = CampaignState.PENDING, None, source, why
            p.host = None
        a = _pick(ld.need, self.up(), self._queued())
        ld.host = a.host
        ld.reason = f"moved from {source}: {why}" if a.host else f"moved from {source}: {why}; {a.reason}"
        move = Move(source, ld.host, why, _now())
        ld.moves.append(move)
        return move

    def drop(self, host: str, why: str) -> list[Move]:
        """``host`` dropped out (``why``: the one-line reason, kept in :attr:`down`): every unfinished
        load on it, running or queued, goes elsewhere, each of its points "moved from HOST: unreachable"."""
        self.down[host] = why
        moves: list[Move] = []
        for ld in sorted(self.loads.values(), key=lambda x: x.index):
            if ld.host == host and ld.status not in FINAL_LOAD:
                moves.append(self._requeue(ld, host, "unreachable"))  # the long reason: ``down``
        return moves

    def scheduler_end(self, index: int, why: str) -> Move | None:
        """The scheduler ended a load's job (time limit, node failure, preemption): requeue its
        unfinished points, at most ``MAX_REQUEUES`` times; after that they fail."""
        ld = self.loads[index]
        source = ld.host or ""
        if ld.requeues >= MAX_REQUEUES:
            self.load_ended(index, CampaignState.CRASHED, f"{why} ({ld.requeues + 1} times)")
            return None
        ld.requeues += 1
        return self._requeue(ld, source, why)

    # -- state.json
    def to_json(self) -> dict[str, Any]:
        return {
            "fleet": {"hosts": [{"name": h.name, "kind": h.kind, "slots": h.slots, "gpus": h.gpus} for h in self.hosts], "down": dict(self.down)},
            "loads": [
                {
                    "index": ld.index, "status": str(ld.status), "host": ld.host, "reason": ld.reason, "run_id": ld.run_id,
                    "error": ld.error, "exit_code": ld.exit_code, "load_s": ld.load_s, "requeues": ld.requeues,
                    "moves": [m.to_json() for m in ld.moves], "left": [list(x) for x in ld.left],
                    "need": {"gpus": ld.need.gpus, "estimate_s": ld.need.estimate_s, "pin": ld.need.pin}, "points": ld.points,
                }
                for ld in sorted(self.loads.values(), key=lambda x: x.index)
            ],
            "points": {
                p.name: {"status": str(p.status), "load": p.load, "host": p.host, "error": p.error, "result": p.result,
                         "moved_from": p.moved_from, "moved_why": p.moved_why}
                for p in self.points.values()
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fleet:
        info = data.get("fleet") or {}
        hosts = [FleetHost(str(h["name"]), str(h.get("kind") or "plain"), int(h.get("slots") or 1), h.get("gpus")) for h in info.get("hosts") or []]
        loads = []
        for raw in data.get("loads") or []:
            need = raw.get("need") or {}
            loads.append(FleetLoad(
                int(raw["index"]), list(raw.get("points") or []),
                LoadNeed(int(raw["index"]), int(need.get("gpus") or 1), need.get("estimate_s"), need.get("pin")),
                raw.get("host"), str(raw.get("reason") or ""), CampaignState.parse(raw.get("status"), CampaignState.PENDING),
                raw.get("run_id"), raw.get("error"), raw.get("exit_code"), raw.get("load_s"),
                [Move.from_json(m) for m in raw.get("moves") or []], int(raw.get("requeues") or 0),
                [(str(x[0]), str(x[1])) for x in raw.get("left") or []],
            ))
        points = [
            FleetPoint(name, int(p.get("load", 0)), CampaignState.parse(p.get("status"), CampaignState.PENDING), p.get("host"),
                       p.get("error"), p.get("result"), p.get("moved_from"), p.get("moved_why"))
            for name, p in (data.get("points") or {}).items()
        ]
        fleet = cls(hosts, loads, points)
        fleet.down = {str(k): str(v) for k, v in (info.get("down") or {}).items()}
        return fleet

    def resumed(self) -> None:
        """A new coordinator on the same state: every host is tried again, and whatever was in
        flight when the last one ended is pending again (done points stay done)."""
        self.down = {}
        for ld in self.loads.values():
            if ld.status in ACTIVE_LOAD:
                if ld.run_id and ld.host:  # its run, if the last coordinator was killed: stopped before anything else
                    ld.left.append((ld.run_id, ld.host))
                ld.status, ld.run_id = CampaignState.PENDING, None
            if ld.status is CampaignState.PENDING and ld.host is None:
                ld.host = _pick(ld.need, self.hosts, self._queued()).host
        for p in self.points.values():
            if p.status is CampaignState.RUNNING:
                p.status = CampaignState.PENDING


def new_fleet(hosts: Sequence[FleetHost], assignments: Sequence[Assignment], load_points: dict[int, list[str]], needs: dict[int, LoadNeed]) -> Fleet:
    """The fleet at the start: each load on its assigned host, every point pending."""
    loads = [FleetLoad(a.load, list(load_points[a.load]), needs[a.load], a.host, a.reason) for a in assignments]
    points = [FleetPoint(name, a.load) for a in assignments for name in load_points[a.load]]
    return Fleet(hosts, loads, points)
