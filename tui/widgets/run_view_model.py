"""What the run screen shows, built from the core's typed :class:`~engines.logs.analysis.Analysis`.

Textual-free, so it is tested without an app. A renamed field of the analysis is a type error
here (mypy and the tests), not a dashboard that quietly goes blank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servelab.engines.logs.live import STAGE_LABELS, STAGES
from servelab.engines.logs.analysis import Analysis, RootCause, SpecFigures, Stage, stage_seconds
from servelab.engines.runs.state import RunState, StageState


@dataclass
class StageRow:
    """One stage bar."""

    id: str
    label: str
    status: StageState = StageState.PENDING
    done: float | None = None
    total: float | None = None
    rate: str | None = None
    eta_s: float | None = None
    elapsed_s: float | None = None
    detail: str = ""


@dataclass
class RunView:
    state: RunState = RunState.WAITING
    stages: list[StageRow] = field(default_factory=list)
    root_cause: RootCause | None = None
    hint: str | None = None
    spec_decode: SpecFigures | None = None


def stage_row(stage: Stage) -> StageRow:
    """One analyzer stage as a bar: progress, rate, ETA and the seconds it took by the log's clock."""
    row = StageRow(id=stage.name, label=STAGE_LABELS.get(stage.name, stage.name), status=stage.status, detail=stage.detail)
    if stage.progress is not None:
        row.done = float(stage.progress.done)
        row.total = float(stage.progress.total)
        row.rate = f"{stage.progress.rate:.2f}/s" if stage.progress.rate is not None else None
        row.eta_s = stage.progress.eta_s
    row.elapsed_s = stage_seconds(stage)
    return row


def view_from_analysis(analysis: Analysis | None) -> RunView:
    """The view of an analysis; None (nothing read yet) is every stage pending."""
    if analysis is None:
        return RunView(stages=[StageRow(sid, STAGE_LABELS.get(sid, sid)) for sid in STAGES])
    by_id = {s.name: stage_row(s) for s in analysis.stages}
    stages = [by_id.get(sid, StageRow(sid, STAGE_LABELS.get(sid, sid))) for sid in STAGES]
    stages += [row for sid, row in by_id.items() if sid not in STAGES]
    return RunView(state=analysis.state, stages=stages, root_cause=analysis.root_cause, hint=analysis.hint, spec_decode=analysis.spec_decode)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
