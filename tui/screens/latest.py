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
from engines.errors import ServelabError
from engines.runs import RunRecord, Runs


@dataclass
class LatestRun:
    """The newest run of one experiment."""

    run_id: str
    state: str
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


def run_state(record_status: str, analysis: dict[str, Any]) -> str:
    """One word: the analyzer's state when it has one, else the run record's status."""
    state = analysis.get("state")
    if isinstance(state, str) and state:
        if record_status in ("stopped", "lost") and state not in ("crashed", "failed"):
            return record_status
        return state
    return record_status


def load_seconds(analysis: dict[str, Any]) -> float | None:
    """Seconds from start to ready, from the analyzer's fields when present."""
    for key in ("load_s", "load_seconds", "ready_after_s", "time_to_ready_s"):
        value = analysis.get(key)
        if isinstance(value, (int, float)):
            return float(value)
    return None


async def latest_runs(catalog: Catalog) -> tuple[dict[str, LatestRun], dict[str, str]]:
    """``{experiment: LatestRun}`` and ``{host: why unreachable}``."""
    runs = Runs(catalog)
    try:
        records = await runs.list()
    except ServelabError as exc:
        return {}, {"hosts": str(exc)}
    newest: dict[str, RunRecord] = {}
    for rec in records:  # oldest first: the last one wins
        newest[rec.experiment] = rec
    results = await asyncio.gather(*(_one(runs, rec) for rec in newest.values()), return_exceptions=True)
    out: dict[str, LatestRun] = {}
    for rec, res in zip(newest.values(), results, strict=True):
        out[rec.experiment] = res if isinstance(res, LatestRun) else LatestRun(rec.id, rec.status)
    for exp in catalog.experiments:
        mine = out.get(exp.name)
        base = catalog.baseline_of(exp)
        theirs = out.get(base.name) if base is not None else None
        if mine and theirs and mine.output_throughput and theirs.output_throughput:
            mine.speedup = mine.output_throughput / theirs.output_throughput
    return out, dict(runs.unreachable)


async def _one(runs: Runs, rec: RunRecord) -> LatestRun:
    status = await runs.status(rec.id)
    latest = LatestRun(rec.id, run_state(status.record.status, status.analysis), load_s=load_seconds(status.analysis))
    probe = await read_probe(runs, rec.id)
    if probe:
        latest.acceptance_rate = _num(probe.get("spec_decode_acceptance_rate"))
        latest.acceptance_length = _num(probe.get("spec_decode_acceptance_length"))
        latest.output_throughput = _num(probe.get("output_throughput"))
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
