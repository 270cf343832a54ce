"""One resolution of a run id (``engines.nodes.resolve``), on real runs: a StubEngine group over two
local hosts (``local`` and ``local2``, two workdirs of this machine) and an ordinary StubEngine run.

Every id of a group names the head's server; an ordinary run names itself; an id no host holds is
``NoSuchRun`` in one line. The probe path asks the hosts where the run is once: ``Runs.find`` is
counted by a ``Runs`` whose ``find`` counts its calls before doing what ``Runs.find`` does.
"""

from __future__ import annotations

import sys

import pytest

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.hosts.base import Host

from servelab.engines.nodes.run import MultiNodeRuns
from servelab.engines.probe.artifacts import load_probe, probe_run
from servelab.engines.runs.records import NoSuchRun, RunKind, RunRecord
from servelab.engines.runs.manager import Runs
from tests.fixtures.runlab import Lab, toml_value
from tests.fixtures.stub_nodes import stub_group

PROBE = '[probe]\nprompts = "builtin:mixed"\nmax_tokens = 4\nrepeats = 1\nwarmup = 0\n'

class CountingRuns(Runs):
    """``Runs`` that counts how often it is asked to find a run by id."""

    finds = 0

    async def find(self, run_id: str) -> tuple[Host, RunRecord]:
        self.finds += 1
        return await super().find(run_id)

def add_local2(lab: Lab) -> None:
    """A second host on this machine with its own workdir (a node there is found on that host only)."""
    with (lab.folder / "hosts.toml").open("a") as f:
        f.write(f"\n[hosts.local2]\npython = {toml_value(sys.executable)}\nworkdir = {toml_value(str(lab.folder.parent / 'work2'))}\n")

async def test_every_id_of_a_group_resolves_to_its_head_and_an_ordinary_run_to_itself(lab: Lab) -> None:
    add_local2(lab)
    stub_group(lab, "stub-2n", probe=PROBE, hosts=("local", "local2"))
    lab.experiment("solo")
    runs = CountingRuns(load_catalog(lab.folder))
    group = await MultiNodeRuns(runs).launch("stub-2n", skip_preflight=True)
    solo = await runs.launch("solo", skip_preflight=True)
    try:
        head, worker = group.nodes
        asked = {group.id: RunKind.GROUP, head.run_id: RunKind.NODE, worker.run_id: RunKind.NODE}
        for rid, kind in asked.items():
            r = await runs.resolve(rid)
            assert (r.asked, r.kind, r.run_id, r.group) == (rid, kind, head.run_id, group.summary())
            assert r.host.name == head.host == "local" and r.record.id == head.run_id
        one = await runs.resolve(solo.id)
        assert (one.kind, one.run_id, one.group, one.record.host) == (RunKind.ORDINARY, solo.id, None, "local")
        # a located run is the run: status through it and through its id agree
        by_id, located = await runs.status(solo.id, analyze=False), await runs.status(one.head, analyze=False)
        assert (located.record.id, located.alive, located.record.pid) == (by_id.record.id, by_id.alive, by_id.record.pid)
        for unknown in ("stub-2n-20990101-000000-abcd", "stub-2n.n1-20990101-000000-abcd", "solo-20990101-000000-abcd"):
            with pytest.raises(NoSuchRun) as exc:
                await runs.resolve(unknown)
            assert "\n" not in str(exc.value) and unknown in str(exc.value)
    finally:
        await runs.stop(solo.id, grace=2)
        await MultiNodeRuns(runs).stop(group, grace=2)

async def test_the_probe_path_asks_where_the_run_is_once(lab: Lab) -> None:
    add_local2(lab)
    stub_group(lab, "stub-2n", probe=PROBE, hosts=("local", "local2"))
    lab.experiment("served", env={"STUB_HTTP": "1"})
    (lab.folder / "served.toml").write_text((lab.folder / "served.toml").read_text() + PROBE)
    runs = CountingRuns(load_catalog(lab.folder))
    group = await MultiNodeRuns(runs).launch("stub-2n", skip_preflight=True)
    served = await runs.launch("served", skip_preflight=True)
    try:
        runs.finds = 0
        await probe_run(runs, served.id, ready_timeout_s=60)  # an ordinary run: one look-up, then its host
        assert runs.finds == 1
        runs.finds = 0
        result = await probe_run(runs, group.id, ready_timeout_s=60)  # a group id: no such run, then the head
        assert runs.finds == 2 and result.summary["identity"]["group"] == group.id
        target = await runs.resolve(group.nodes[1].run_id)
        runs.finds = 0
        stored = await load_probe(runs, target)
        await probe_run(runs, target, ready_timeout_s=60)  # resolved before: no host is asked where it is
        assert runs.finds == 0 and stored is not None and stored["identity"]["group"] == group.id
    finally:
        await runs.stop(served.id, grace=2)
        await MultiNodeRuns(runs).stop(group, grace=2)
