"""A campaign plan estimates each load from earlier probed loads of its model on its host (engines/runs/history.py)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from servelab.engines.campaign.check import load_checked
from servelab.engines.campaign.plan import describe, plan_with_history
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.runs.history import load_estimates
from servelab.engines.runs.manager import Runs
from tests.fixtures.runlab import Lab, wait_for


async def _ended_run(runs: Runs, experiment: str, load_stages_s: dict[str, float] | None, gaps_s: float = 7.0) -> str:
    """A real (StubEngine) run that ended; ``load_stages_s`` becomes its probe.json, as a probe writes it,
    with its start-to-ready ``load_s``: the stages plus ``gaps_s`` between and before them.

    Runs are ordered by their start second (a real load takes minutes), so each starts in a later
    second than the newest run before it: the clock is waited for, not a guessed delay."""
    newest = max((r.started_at for r in await runs.list()), default="")
    wait_for(lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds") > newest, 5)
    rec = await runs.launch(experiment, skip_preflight=True)
    wait_for(lambda: (Path(rec.run_dir) / "exit_code").exists(), 20)
    if load_stages_s is not None:
        load_s = sum(load_stages_s.values()) + gaps_s
        (Path(rec.run_dir) / "probe.json").write_text(json.dumps({"load_stages_s": load_stages_s, "load_s": load_s}))
    return rec.id


async def test_loads_are_estimated_from_the_newest_probed_runs_of_the_same_model_and_host(lab: Lab) -> None:
    lab.experiment("base", env={"STUB_LINES": "1"})
    other = lab.experiment("other-model", env={"STUB_LINES": "1"})
    toml = lab.folder / "other-model.toml"
    toml.write_text(toml.read_text().replace("no-model", "another-model"))
    (lab.folder / "campaigns").mkdir()
    (lab.folder / "campaigns" / "sweep.toml").write_text('base = ["base"]\n[axes]\n"probe.concurrency" = [1, 4]\n')
    runs = lab.runs()

    await _ended_run(runs, "base", {"weights": 500.0, "ready": 100.0})  # the oldest: beyond the newest 3
    await _ended_run(runs, "base", {"weights": 50.0, "ready": 10.0})  # 60 s
    await _ended_run(runs, "base", None)  # never probed: no load time to go by
    await _ended_run(runs, "base", {"weights": 100.0, "ready": 20.0})  # 120 s
    await _ended_run(runs, "base", {"weights": 80.0, "ready": 10.0})  # 90 s
    await _ended_run(runs, "other-model", {"weights": 1.0})
    assert other

    estimates = await load_estimates(runs, ["local"])
    model = str(lab.folder / "no-model")
    assert estimates[("local", model)] == 97.0  # start to ready: the median of 67, 127 and 97, not of the stage sums
    assert estimates[("local", str(lab.folder / "another-model"))] == 8.0

    catalog = load_catalog(lab.folder)
    planned = await plan_with_history(load_checked(catalog, "sweep"), catalog, Runs(catalog))
    assert [load.estimate_s for load in planned.loads] == [97.0]
    assert planned.estimate_s == 97.0
    assert "estimated loading time: ~2 min" in describe(planned)


async def test_a_host_without_earlier_runs_leaves_the_estimate_unknown(lab: Lab) -> None:
    lab.experiment("base")
    (lab.folder / "campaigns").mkdir()
    (lab.folder / "campaigns" / "sweep.toml").write_text('base = ["base"]\n[axes]\n"probe.concurrency" = [1, 4]\n')
    catalog = load_catalog(lab.folder)
    planned = await plan_with_history(load_checked(catalog, "sweep"), catalog, Runs(catalog))
    assert [load.estimate_s for load in planned.loads] == [None]
    assert any("unknown" in line for line in describe(planned))


async def test_every_host_that_could_not_be_asked_is_named(lab: Lab) -> None:
    lab.add_gone_host()
    runs = lab.runs()
    # "gone" is listed before "local": its reason must survive the later listing.
    assert await load_estimates(runs, ["local", "gone"]) == {}
    assert set(runs.unreachable) == {"gone"} and "cannot connect" in runs.unreachable["gone"]
