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
from tui.widgets.run_view_model import log_span_s


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
    """Seconds from the first stage's start to ready, by the log's own timestamps."""
    stages = [s for s in analysis.get("stages") or [] if isinstance(s, dict)]
    starts = [s.get("started_at") for s in stages if s.get("started_at")]
    ready = next((s for s in stages if s.get("name") == "ready"), None)
    if not starts or ready is None or ready.get("status") != "done":
        return None
    return log_span_s(starts[0], ready.get("ended_at") or ready.get("started_at"))


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
    for res in results:
        if isinstance(res, BaseException) and not isinstance(res, Exception):
            raise res
    out: dict[str, LatestRun] = {}
    for rec, res in zip(newest.values(), results, strict=True):
        out[rec.experiment] = res if isinstance(res, LatestRun) else LatestRun(rec.id, rec.status)
    return out, dict(runs.unreachable)


async def _one(runs: Runs, rec: RunRecord) -> LatestRun:
    status = await runs.status(rec.id)
    latest = LatestRun(rec.id, run_state(status.record.status, status.analysis), load_s=load_seconds(status.analysis))
    probe = await read_probe(runs, rec.id)
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
