"""A campaign over a fleet, its rules alone (engines/campaign/fleet.py): where each load goes and
why, and what a host dropping out or a job the scheduler ended does to the loads and points.

The property test drives a Fleet the way the coordinator does (dispatch to hosts with room, a
point at a time per running load) over random fleets, with hosts dropping out at random steps:
every point ends done exactly once, on a host that was up when it ran, and says which host that was.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.campaign.definition import load_campaign
from servelab.engines.campaign.fleet import (
    DEFAULT_ESTIMATE_S,
    MAX_REQUEUES,
    Fleet,
    FleetHost,
    LoadNeed,
    assign,
    new_fleet,
)
from servelab.engines.campaign.plan import describe, plan
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.runs.state import CampaignState
from tests.fixtures.campaignlab import campaign_file, stub_experiment
from tests.fixtures.runlab import Lab


def test_assignment_balances_queued_work_and_says_why() -> None:
    hosts = [FleetHost("local"), FleetHost("cluster", "slurm")]
    needs = [LoadNeed(0, estimate_s=100), LoadNeed(1, estimate_s=30), LoadNeed(2, estimate_s=30), LoadNeed(3, estimate_s=30)]
    got = assign(needs, hosts)
    assert [a.host for a in got] == ["local", "cluster", "cluster", "cluster"]  # 100 s on local outweighs 30 + 30 on cluster
    assert got[0].reason == "nothing queued there yet" and got[2].reason == "least queued work (~30 s ahead of it)"
    assert assign(needs, hosts) == got  # deterministic


def test_unknown_estimates_alternate_and_a_second_slot_takes_two() -> None:
    got = assign([LoadNeed(i) for i in range(4)], [FleetHost("a"), FleetHost("b")])
    assert [a.host for a in got] == ["a", "b", "a", "b"]
    assert "~60 s" in got[2].reason and DEFAULT_ESTIMATE_S == 60
    got = assign([LoadNeed(i) for i in range(3)], [FleetHost("a", slots=2), FleetHost("b")])
    assert [a.host for a in got] == ["a", "b", "a"]


def test_pins_and_gpu_counts() -> None:
    hosts = [FleetHost("small", gpus=1), FleetHost("big", "slurm", gpus=8)]
    got = assign([LoadNeed(0, gpus=4), LoadNeed(1, pin="small"), LoadNeed(2, gpus=4, pin="small"), LoadNeed(3, gpus=16)], hosts)
    assert (got[0].host, got[0].reason) == ("big", "the only host with 4 GPUs; nothing queued there yet")
    assert (got[1].host, got[1].reason) == ("small", "pinned to it by the campaign")
    assert got[2].host is None and "has 1 GPUs; the load needs 4" in got[2].reason
    assert got[3].host is None and "no host has that many" in got[3].reason


def _fleet(n_hosts: int, n_loads: int, points_per_load: int, pin: dict[int, str] | None = None) -> Fleet:
    hosts = [FleetHost(f"h{i}") for i in range(n_hosts)]
    needs = {i: LoadNeed(i, pin=(pin or {}).get(i)) for i in range(n_loads)}
    points = {i: [f"p{i}.{j}" for j in range(points_per_load)] for i in range(n_loads)}
    return new_fleet(hosts, assign(needs.values(), hosts), points, needs)


def test_a_dropped_host_moves_only_unfinished_points_and_says_so() -> None:
    fleet = _fleet(2, 3, 2)  # h0: loads 0, 2; h1: load 1
    for h in fleet.hosts:
        ld = fleet.next_load(h)
        assert ld is not None
        fleet.start(ld.index, h.name)
        fleet.launched(ld.index, f"run-{ld.index}")
    fleet.point_ended("p1.0", "h1", result="points/p1.0.json")
    moves = fleet.drop("h1", "connection refused")
    assert [(m.source, m.target) for m in moves] == [("h1", "h0")]
    assert fleet.loads[1].status is CampaignState.PENDING and fleet.loads[1].left == [("run-1", "h1")]
    assert fleet.points["p1.0"].status is CampaignState.DONE and fleet.points["p1.0"].host == "h1"
    assert fleet.todo(1) == ["p1.1"]
    moved = fleet.points["p1.1"]
    assert (moved.moved_from, moved.moved_why) == ("h1", "unreachable")
    assert fleet.next_load(fleet.hosts[1]) is None  # a host that dropped out takes nothing
    # state.json keeps it all
    again = Fleet.from_json(fleet.to_json())
    assert again.down == {"h1": "connection refused"} and again.loads[1].moves[0].target == "h0"
    assert again.points["p1.1"].moved_from == "h1"


def test_a_done_point_is_never_marked_done_twice() -> None:
    fleet = _fleet(1, 1, 1)
    fleet.point_ended("p0.0", "h0", result="x")
    try:
        fleet.point_ended("p0.0", "h0", result="y")
    except ValueError as exc:
        assert "never run again" in str(exc)
    else:
        raise AssertionError("a done point was ended again")


def test_scheduler_end_requeues_then_gives_up() -> None:
    fleet = _fleet(2, 1, 2)
    for _ in range(MAX_REQUEUES):
        host = next(h for h in fleet.hosts if fleet.next_load(h) is not None)
        fleet.start(0, host.name)
        move = fleet.scheduler_end(0, "time limit reached")
        assert move is not None and move.why == "time limit reached" and fleet.loads[0].status is CampaignState.PENDING
    fleet.start(0, "h0")
    assert fleet.scheduler_end(0, "time limit reached") is None
    assert fleet.loads[0].status is CampaignState.CRASHED
    assert {fleet.points[p].status for p in ("p0.0", "p0.1")} == {CampaignState.FAILED}


def test_pinned_load_waits_when_its_host_is_gone_and_others_steal_work() -> None:
    fleet = _fleet(2, 4, 1, pin={3: "h1"})
    fleet.drop("h1", "gone")
    assert fleet.loads[3].host is None and fleet.stranded() == [fleet.loads[3]]
    # h0 has room and its own loads come first; a busy host's pending load goes to one with room
    fleet2 = _fleet(2, 4, 1)
    h0, h1 = fleet2.hosts
    first = fleet2.next_load(h0)
    assert first is not None
    fleet2.start(first.index, "h0")
    second = fleet2.next_load(h1)
    assert second is not None
    fleet2.start(second.index, "h1")
    fleet2.point_ended(f"p{second.index}.0", "h1", result="r")
    fleet2.load_ended(second.index, CampaignState.DONE)
    third = fleet2.next_load(h1)
    assert third is not None and third.host == "h1"
    fleet2.start(third.index, "h1")
    fleet2.point_ended(f"p{third.index}.0", "h1", result="r")
    fleet2.load_ended(third.index, CampaignState.DONE)
    stolen = fleet2.next_load(h1)  # h0 still busy with its first load: h1 takes h0's queued one
    assert stolen is not None and stolen.reason == "h0 was busy; h1 had room"


@settings(max_examples=150, deadline=None)
@given(
    n_hosts=st.integers(1, 4),
    n_loads=st.integers(1, 7),
    points=st.integers(1, 3),
    slots=st.lists(st.integers(1, 2), min_size=4, max_size=4),
    drops=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), max_size=3),
    ends=st.lists(st.integers(0, 60), max_size=4),
    seed=st.integers(0, 2**16),
)
def test_every_point_done_exactly_once_whatever_drops_out(
    n_hosts: int, n_loads: int, points: int, slots: list[int], drops: list[tuple[int, int]], ends: list[int], seed: int
) -> None:
    rng = random.Random(seed)
    hosts = [FleetHost(f"h{i}", slots=slots[i]) for i in range(n_hosts)]
    needs = {i: LoadNeed(i, estimate_s=rng.choice([None, 10.0, 50.0])) for i in range(n_loads)}
    names = {i: [f"p{i}.{j}" for j in range(points)] for i in range(n_loads)}
    fleet = new_fleet(hosts, assign(needs.values(), hosts), names, needs)
    ran: dict[str, list[str]] = {}
    drop_at = {step: f"h{h}" for step, h in drops if h < n_hosts - 1}  # the last host stays: someone can finish
    for step in range(500):
        if fleet.finished:
            break
        gone = drop_at.get(step)
        if gone is not None and gone not in fleet.down:
            fleet.drop(gone, "unreachable")
        if step in ends:  # the scheduler ends a running load's job (time limit, node failure)
            running = sorted(ld.index for h in fleet.up() for ld in fleet.active(h.name))
            if running:
                fleet.scheduler_end(rng.choice(running), "time limit reached")
        for h in fleet.up():
            while (ld := fleet.next_load(h)) is not None:
                fleet.start(ld.index, h.name)
        for h in fleet.up():  # a point takes two steps (started, then done): a drop between them cuts it short
            for ld in fleet.active(h.name):
                todo = fleet.todo(ld.index)
                running = [n for n in todo if fleet.points[n].status is CampaignState.RUNNING]
                if running and rng.random() < 0.7:
                    ran.setdefault(running[0], []).append(h.name)
                    fleet.point_ended(running[0], h.name, result=f"points/{running[0]}.json")
                elif todo and not running:
                    fleet.point_running(todo[0], h.name)
                elif not todo:
                    fleet.load_ended(ld.index, CampaignState.DONE)
    assert fleet.finished, fleet.to_json()
    for name, p in fleet.points.items():
        if p.status is CampaignState.FAILED:  # its load's job ended more than MAX_REQUEUES times
            assert name not in ran and fleet.loads[p.load].requeues == MAX_REQUEUES
            continue
        assert p.status is CampaignState.DONE
        assert ran[name] == [p.host], (name, ran[name], p.host)  # once, and the recorded host is where it ran
        if p.moved_from is not None:  # a host that dropped out, or a job the scheduler ended
            assert p.moved_from in fleet.down or p.moved_why == "time limit reached", p


def test_plan_prints_each_loads_host_and_why(lab: Lab) -> None:
    for i, name in enumerate(("stub-a", "stub-b")):
        stub_experiment(lab, name, 18000 + i, {})
    path = campaign_file(lab, "spread", ["stub-a", "stub-b"], "stub-a", '"probe.concurrency" = [1, 2]')
    path.write_text('hosts = ["local", "box"]\npin = { "stub-b" = "box" }\n' + path.read_text())
    with (lab.folder / "hosts.toml").open("a") as f:
        f.write('\n[hosts.box]\nssh = "127.0.0.1:1"\ngpus = 2\ncampaign_slots = 2\n')
    campaign, problems = load_campaign(path)
    assert campaign is not None, problems
    p = plan(campaign, load_catalog(lab.folder))
    assert not p.problems and [a.host for a in p.assignments] == ["local", "box"]
    text = "\n".join(describe(p))
    assert "fleet: local (plain, 1 at a time), box (plain, 2 at a time, 2 GPUs)" in text
    assert "load 1: vllm on local (nothing queued there yet)" in text and "load 2: vllm on box (pinned to it by the campaign)" in text
    path.write_text(path.read_text().replace('"box"]', '"nowhere"]').replace('"stub-b" = "box"', '"stub-b" = "nowhere"'))
    campaign, _ = load_campaign(path)
    assert campaign is not None
    bad = plan(campaign, load_catalog(lab.folder))
    assert [f"{pr.path}: {pr.message}" for pr in bad.problems][0].startswith("hosts[1]: no host named 'nowhere' in hosts.toml")


def test_bad_fleets_are_one_line_each(lab: Lab) -> None:
    """An unknown host in ``hosts``, a pin outside the fleet, a fleet whose every host is down: one line, no traceback."""
    import subprocess
    import sys

    lab.add_gone_host()
    stub_experiment(lab, "stub-a", 18100, {})
    path = campaign_file(lab, "far", ["stub-a"], "stub-a", '"probe.concurrency" = [1]')
    body = path.read_text()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "servelab", "--dir", str(lab.folder), *args], capture_output=True, text=True, timeout=120)

    path.write_text('hosts = ["local", "atlantis"]\n' + body)
    done = cli("campaign", "start", "far")
    assert done.returncode == 1 and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "hosts[1]: no host named 'atlantis' in hosts.toml (known: gone, local)" in done.stderr, done.stderr
    path.write_text('hosts = ["local"]\npin = { "stub-a" = "gone" }\n' + body)
    done = cli("campaign", "plan", "far")
    assert done.returncode != 0 and "Traceback" not in done.stderr and "pin puts stub-a on 'gone', which is not one of hosts (local)" in done.stderr + done.stdout
    path.write_text('hosts = ["gone"]\n' + body)
    done = cli("campaign", "start", "far", "--skip-preflight")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "every host of the fleet is unreachable: gone" in done.stderr, done.stderr
