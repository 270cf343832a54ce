"""What the run screen shows, built from the log analyzer's snapshot (duck-typed, Textual-free).

The analyzer is written by another part of servelab and evolves; everything the widgets need
goes through :func:`view_from_analysis`, so a renamed field breaks one function, not the screen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engines.runstate import RunState

#: Stage ids in start-up order, with the label shown to the operator.
STAGE_LABELS: dict[str, str] = {
    "process": "process",
    "config": "config",
    "weights": "weights",
    "drafter": "drafter",
    "compile": "compile",
    "kv_cache": "KV cache",
    "cuda_graphs": "CUDA graphs",
    "warmup": "warm-up",
    "ready": "ready",
}


@dataclass
class StageRow:
    """One stage bar."""

    id: str
    label: str
    status: str = "pending"  # pending, running, done, failed, skipped
    done: float | None = None
    total: float | None = None
    rate: str | None = None
    eta_s: float | None = None
    elapsed_s: float | None = None
    detail: str = ""


@dataclass
class RootCauseView:
    exception: str | None
    message: str
    process: str = ""
    line: int | None = None
    where: str | None = None
    excerpt: list[str] = field(default_factory=list)


@dataclass
class RunView:
    state: RunState = RunState.WAITING
    stages: list[StageRow] = field(default_factory=list)
    root_cause: RootCauseView | None = None
    hint: str | None = None
    spec_decode: dict[str, Any] = field(default_factory=dict)


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def view_from_analysis(analysis: Any) -> RunView:
    """Map an analyzer snapshot (object or dict) to the view model; missing parts stay empty."""
    view = RunView(state=RunState.parse(_get(analysis, "state", None) or RunState.WAITING))
    raw_stages = _get(analysis, "stages", None) or []
    if isinstance(raw_stages, dict):
        raw_stages = [dict(v, name=k) if isinstance(v, dict) else v for k, v in raw_stages.items()]
    by_id: dict[str, StageRow] = {}
    for stage in raw_stages:
        sid = str(_get(stage, "name", None) or _get(stage, "id", ""))
        status = _get(stage, "status", "pending")
        status = getattr(status, "value", status)
        row = StageRow(id=sid, label=STAGE_LABELS.get(sid, sid), status=str(status))
        progress = _get(stage, "progress", None)
        if progress is not None:
            row.done = _num(_get(progress, "done"))
            row.total = _num(_get(progress, "total"))
            rate = _get(progress, "rate")
            row.rate = f"{rate:.2f}/s" if isinstance(rate, (int, float)) else (str(rate) if rate else None)
            row.eta_s = _num(_get(progress, "eta_s"))
        row.elapsed_s = _num(_get(stage, "elapsed_s", None) or _get(stage, "duration_s", None))
        if row.elapsed_s is None:
            row.elapsed_s = log_span_s(_get(stage, "started_at"), _get(stage, "ended_at"))
        detail = _get(stage, "detail", "") or ""
        row.detail = str(detail)
        by_id[sid] = row
    view.stages = [by_id.get(sid, StageRow(sid, label)) for sid, label in STAGE_LABELS.items()]
    view.stages += [row for sid, row in by_id.items() if sid not in STAGE_LABELS]
    rc = _get(analysis, "root_cause", None)
    if rc is not None:
        excerpt = _get(rc, "excerpt", []) or []
        view.root_cause = RootCauseView(
            exception=_get(rc, "exception"),
            message=str(_get(rc, "message", "") or ""),
            process=str(_get(rc, "process", "") or ""),
            line=_get(rc, "line"),
            where=_get(rc, "where"),
            excerpt=[str(x) for x in excerpt],
        )
    hint = _get(analysis, "hint", None)
    view.hint = str(_get(hint, "text", hint)) if hint else None
    spec = _get(analysis, "spec_decode", None)
    if spec is not None:
        view.spec_decode = spec if isinstance(spec, dict) else {k: v for k, v in vars(spec).items() if not k.startswith("_")} if hasattr(spec, "__dict__") else {}
    return view


_TS_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%m-%d %H:%M:%S", "%H:%M:%S")


def _parse_ts(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    text = value.strip().split(".")[0].split(",")[0]
    for fmt in _TS_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def log_span_s(started: Any, ended: Any) -> float | None:
    """Seconds between two log timestamps (None when either is missing or unparsable)."""
    a, b = _parse_ts(started), _parse_ts(ended)
    if a is None or b is None:
        return None
    return (b - a).total_seconds()


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
