"""Each experiment's latest run, with the figures the experiments table shows.

Asks every configured host once (``Runs.list``), then the latest run of each experiment for its
state and its ``probe.json``. Unreachable hosts are reported, never raised.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from engines.catalog import Catalog
from engines.compare import baseline_speedup
from engines.errors import ServelabError
from engines.runs import RunRecord, Runs
from engines.runstate import RunState
from tui.widgets.run_view_model import RunView, StageRow


@dataclass
class LatestRun:
    """The newest run of one experiment."""

    run_id: str
    state: RunState
    load_s: float | None = None
    acceptance_rate: float | None = None  # percent
    acceptance_length: float | None = None
    output_throughput: float | None = None
    speedup: float | None = None

    @property
    def load_text(self) -> str:
        if self.load_s is None:
            return ""
        return f"{self.load_s:.0f}s" if self.load_s < 600 else f"{self.load_s / 60:.0f}m"

    @property
    def accept_text(self) -> str:
        if self.acceptance_length is not None:
            return f"{self.acceptance_length:.2f}"
        return f"{self.acceptance_rate:.0f}%" if self.acceptance_rate is not None else ""

    @property
    def speedup_text(self) -> str:
        return f"{self.speedup:.2f}x" if self.speedup is not None else ""


def run_state(record_status: RunState, exit_code: int | None, live: RunView | None) -> RunState:
    """One word: the live analysis when the app follows the run, else what the process did."""
    if live is not None and live.state not in (RunState.WAITING, RunState.STARTING) and record_status.is_active:
        return live.state
    if live is not None and live.state is RunState.CRASHED:
        return RunState.CRASHED
    if record_status is RunState.EXITED and exit_code not in (None, 0):
        return RunState.CRASHED
    return record_status


def load_seconds(stages: list[StageRow] | None, probe: dict[str, Any] | None) -> float | None:
    """Seconds from start to ready: the probe's stage timings, else the live analysis."""
    if probe and isinstance(probe.get("load_stages_s"), dict):
        values = [v for v in probe["load_stages_s"].values() if isinstance(v, (int, float))]
        if values:
            return float(sum(values))
    if stages:
        ready = next((s for s in stages if s.id == "ready"), None)
        if ready is not None and ready.status == "done":
            return sum(s.elapsed_s or 0.0 for s in stages if s.status == "done")
    return None


async def latest_runs(catalog: Catalog, live: dict[str, RunView] | None = None) -> tuple[dict[str, LatestRun], dict[str, str]]:
    """``{experiment: LatestRun}`` and ``{host: why unreachable}``.

    Never reads whole logs: the state comes from the app's live followers (``live``) or the
    process's exit, the figures from ``probe.json``.
    """
    live = live or {}
    runs = Runs(catalog)
    try:
        records = await runs.list()
    except ServelabError as exc:
        return {}, {"hosts": str(exc)}
    newest: dict[str, RunRecord] = {}
    for rec in records:  # oldest first: the last one wins
        newest[rec.experiment] = rec
    results = await asyncio.gather(*(_one(runs, rec, live.get(rec.id)) for rec in newest.values()), return_exceptions=True)
    for res in results:
        if isinstance(res, BaseException) and not isinstance(res, Exception):
            raise res
    out: dict[str, LatestRun] = {}
    for rec, res in zip(newest.values(), results, strict=True):
        out[rec.experiment] = res if isinstance(res, LatestRun) else LatestRun(rec.id, rec.status)
    return out, dict(runs.unreachable)


async def _one(runs: Runs, rec: RunRecord, view: RunView | None) -> LatestRun:
    latest = LatestRun(rec.id, run_state(rec.status, rec.exit_code, view))
    probe = await read_probe(runs, rec.id)
    latest.load_s = load_seconds(view.stages if view else None, probe)
    if probe:
        latest.acceptance_rate = _num(probe.get("spec_decode_acceptance_rate"))
        latest.acceptance_length = _num(probe.get("spec_decode_acceptance_length"))
        latest.output_throughput = _num(probe.get("output_throughput"))
        sp = await baseline_speedup(runs, rec.id, probe)
        latest.speedup = sp.value if sp is not None else None
    return latest


async def read_probe(runs: Runs, run_id: str) -> dict[str, Any] | None:
    """The run's ``probe.json``, or None when absent or unreadable."""
    data = await runs.read_artifact(run_id, "probe.json")
    if not data:
        return None
    try:
        parsed = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
