"""``servelab ab`` on two real StubEngine servers (the engine itself is tested in test_ab_engine.py):
an experiment's rehearsal is never the run it pairs (issue #36: a rehearsal is never the latest run,
never compared), and each round records the host's GPU utilisation and memory where the host has GPUs,
as a plain probe does (nvidia-smi answers recorded on a real H200, replayed by FakeNvidiaSmi)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.engines.probe.paired import measure
from tests.fixtures.campaignlab import stub_experiment
from tests.fixtures.gpus import replayed_h200
from tests.fixtures.ports import free_port
from tests.fixtures.runlab import Lab


async def test_ab_pairs_the_real_runs_not_a_newer_rehearsal_and_records_gpu_conditions(
    lab: Lab, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stub_experiment(lab, "base", free_port(), {"STUB_TOKEN_S": "0.002"})
    stub_experiment(lab, "cand", free_port(), {"STUB_TOKEN_S": "0.001"})
    stub_experiment(lab, "base-twin", free_port(), {})  # its run becomes a newer rehearsal of "base" (below)
    runs = lab.runs()
    base = await runs.launch("base", skip_preflight=True)
    cand = await runs.launch("cand", skip_preflight=True)
    # a newer run of "base" that is a rehearsal (its own port, as servelab gives one), as run.json marks it
    rehearsal = await runs.launch("base-twin", skip_preflight=True)
    try:
        rec = json.loads((Path(rehearsal.run_dir) / "run.json").read_text())
        (Path(rehearsal.run_dir) / "run.json").write_text(json.dumps({**rec, "experiment": "base", "rehearsal": True}))
        assert await runs.latest_of("base") == base.id  # the listing's own rule
        replayed_h200(monkeypatch, tmp_path, "60")  # from here the host answers as a GPU host: two H200s
        result = await measure(runs, "base", "cand", pairs=1)
        assert (result.base_run, result.cand_run) == (base.id, cand.id)
        assert result.rounds and all(
            c.gpu_util_pct is not None and c.gpu_mem_mib is not None for r in result.rounds for c in (r.base, r.cand)
        ), result.rounds
        # the other runs alive on the host are named in each side's rounds: the rehearsal among them
        assert all(rehearsal.id in r.base.other_runs and cand.id in r.base.other_runs for r in result.rounds)
    finally:
        for r in (base, cand, rehearsal):
            await runs.stop(r.id, grace=1)
