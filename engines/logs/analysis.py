"""What a log analysis says, as typed values: the run's state, its stages, the root cause, figures.

:class:`Analysis` is what :class:`~servelab.engines.logs.analyzer.LogAnalyzer` answers; its
``to_json()`` is the ``servelab analyze --json`` object. These values are pickled across the
ingest worker's process boundary, so they hold plain data only. :func:`stage_seconds` is how
long a stage took by the log's own clock (:func:`parse_log_time` reads the engines' timestamps).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from servelab.engines.runs.state import RunState, StageState

__all__ = [
    "EVIDENCE_WORDS",
    "Analysis",
    "LinePrefix",
    "Progress",
    "RootCause",
    "SpecFigures",
    "SpecPoint",
    "Stage",
    "ThroughputPoint",
    "log_span_s",
    "parse_log_time",
    "stage_seconds",
    "start_to_ready_s",
]

#: Timestamp shapes engines print (vLLM ``11-29 11:08:09``, SGLang ``2026-11-29 11:08:09``...).
_TS_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%m-%d %H:%M:%S", "%H:%M:%S")


#: A root cause's evidence (``RootCause.evidence``), in words, by the kind of a fatal rule (``FatalRule.kind``; "" a fatal record).
EVIDENCE_WORDS = {
    "traceback": "the innermost exception of the earliest failing traceback",
    "traceback cut": "a traceback cut off before its exception line",
    "": "no traceback: a fatal record",
    "native crash": "no traceback: a native crash report",
    "process death": "no traceback: a process died (a launcher or the engine named its exit)",
    "killed by signal 9": "no traceback: killed by signal 9 (the OOM killer is the usual sender)",
    "error line": "no traceback: an error-level line naming the error",
}


@dataclass
class RootCause:
    """The failure to show the operator. ``exception`` is None when the log cut the traceback off."""

    exception: str | None
    message: str
    process: str
    line: int
    excerpt: list[str] = field(default_factory=list)
    #: Innermost frame, ``file.py:N in func`` (where it broke), when known.
    where: str | None = None
    #: True when the message was pulled out of a wrapper ("Capture cuda graph failed: <inner>").
    harvested: bool = False
    #: Where the wrapper says it happened ("during CUDA graph capture"), when the message was harvested.
    context: str | None = None
    #: What the cause rests on, in words ("traceback", "no traceback: killed by signal 9 (...)").
    evidence: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "exception": self.exception,
            "message": self.message,
            "process": self.process,
            "line": self.line,
            "where": self.where,
            "context": self.context,
            "evidence": self.evidence,
            "excerpt": list(self.excerpt),
        }



@dataclass
class Progress:
    """A bar's state: ``rate`` in items per second, ``eta_s`` seconds left (None when unknown)."""

    done: int
    total: int
    rate: float | None = None
    eta_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Stage:
    """One startup stage. Times are the log's own timestamps (strings), None when not printed."""

    name: str
    status: StageState = StageState.PENDING
    started_at: str | None = None
    ended_at: str | None = None
    progress: Progress | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # the progress as its own to_json(): asdict's too

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Stage:
        """A stage from its ``to_json()`` (as ``servelab analyze --json`` wrote it; missing keys are defaults)."""
        progress = data.get("progress")
        return cls(
            name=str(data.get("name")),
            status=StageState(data.get("status") or StageState.PENDING),
            started_at=data.get("started_at"),
            ended_at=data.get("ended_at"),
            progress=Progress(**progress) if isinstance(progress, dict) else None,
            detail=str(data.get("detail") or ""),
        )


def parse_log_time(value: str | None) -> datetime | None:
    """A log's timestamp (fractions dropped), None when missing or not a known shape."""
    if not value:
        return None
    text = value.strip().split(".")[0].split(",")[0]
    for fmt in _TS_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def log_span_s(started: str | None, ended: str | None) -> float | None:
    """Seconds between two log timestamps (None when either is missing or unparsable)."""
    a, b = parse_log_time(started), parse_log_time(ended)
    if a is None or b is None:
        return None
    return (b - a).total_seconds()


def stage_seconds(stage: Stage) -> float | None:
    """How long a stage took (or has taken so far, when its end is not logged yet: None)."""
    return log_span_s(stage.started_at, stage.ended_at)


def start_to_ready_s(stages: list[Stage], started: str | None = None) -> float | None:
    """Seconds from start to ready by the log's own clock: what "load" means.

    ``started`` is when the process started on the same clock (the run record's ``started_local``);
    without it the first timestamped stage stands for the start. The gaps between stages and the
    time before the first log line count: a load is not the sum of its bars. None until ``ready``
    is done or when the log printed no usable timestamps.
    """
    ready = next((s for s in stages if s.name == "ready"), None)
    if ready is None or ready.status != StageState.DONE:
        return None
    end = parse_log_time(ready.ended_at) or parse_log_time(ready.started_at)
    firsts = [t for s in stages for t in (parse_log_time(s.started_at) or parse_log_time(s.ended_at),) if t is not None]
    if end is None or not firsts:
        return None
    start = min(firsts)
    launched = parse_log_time(started)
    if launched is not None:
        end, first = _on_date_of(end, launched), _on_date_of(start, launched)
        if launched <= first and (first - launched).total_seconds() < _LAUNCH_TO_LOG_S:
            start = launched
        else:
            start = first
    seconds = (end - start).total_seconds()
    return seconds if seconds >= 0 else None


#: Longer than this between the launch and the first log line, and ``started`` is not this log's start.
_LAUNCH_TO_LOG_S = 3600.0


def _on_date_of(t: datetime, ref: datetime) -> datetime:
    """A log time that printed no year (vLLM's ``11-29 11:26:06``) or no date, placed on ``ref``'s
    calendar: the first such moment at or after ``ref`` less a day (a load never spans a year)."""
    if t.year != 1900:
        return t
    if (t.month, t.day) == (1, 1):  # maybe no date at all: the time of day after ref
        day = datetime.combine(ref.date(), t.time())
        if ref - day > timedelta(hours=12):
            day += timedelta(days=1)
        placed = t.replace(year=ref.year)
        return day if abs((day - ref).total_seconds()) < abs((placed - ref).total_seconds()) else placed
    placed = t.replace(year=ref.year)
    return placed.replace(year=ref.year + 1) if ref - placed > timedelta(days=180) else placed


@dataclass
class SpecFigures:
    """Speculative-decoding figures as printed: acceptance rate is a fraction 0..1."""

    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "per_position": list(self.per_position),
        }


@dataclass(frozen=True)
class SpecPoint:
    ts: str | None
    line: int
    acceptance_rate: float | None
    mean_acceptance_length: float | None


@dataclass(frozen=True)
class ThroughputPoint:
    ts: str | None
    line: int
    generation_tps: float | None
    prompt_tps: float | None


@dataclass(frozen=True)
class LinePrefix:
    """What :class:`~servelab.engines.logs.prefix.PrefixNormalizer` stripped from a log's lines.

    ``shapes`` are the prefix shapes learnt (regexes: a word, `` +`` padding, punctuation as
    printed), ``examples`` the prefixes as they were printed (one per stream seen while learning),
    ``platform_shapes`` the shapes of the platform lines dropped (a timestamp and a few names, no
    engine text). Line numbers in the analysis count the lines left once those are dropped.
    """

    shapes: tuple[str, ...]
    examples: tuple[str, ...]
    platform_shapes: tuple[str, ...]
    stripped: int
    dropped: int

    def to_json(self) -> dict[str, Any]:
        return {
            "shapes": list(self.shapes),
            "examples": list(self.examples),
            "platform_shapes": list(self.platform_shapes),
            "stripped": self.stripped,
            "dropped": self.dropped,
        }


@dataclass
class Analysis:
    """What the log says right now. ``to_json()`` is the ``servelab analyze --json`` object."""

    engine: str
    state: RunState  # starting | loading | ready | crashed | exited
    was_ready: bool
    stages: list[Stage]
    root_cause: RootCause | None
    hint: str | None
    spec_decode: SpecFigures | None
    spec_series: list[SpecPoint]
    throughput_series: list[ThroughputPoint]
    lines: int
    exit_code: int | None = None
    #: The stage the run failed in (None unless it crashed before it was up).
    failed_stage: str | None = None
    #: The capture tool's line prefix that was stripped (None: the lines had none).
    prefix: LinePrefix | None = None
    #: False when no line was the engine's (an empty log, a launcher's or a trainer's output only):
    #: the state then says nothing about the engine.
    engine_output: bool = True

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        last_tp = self.throughput_series[-1] if self.throughput_series else None
        return {
            "engine": self.engine,
            "state": self.state,
            "was_ready": self.was_ready,
            "stages": [s.to_json() for s in self.stages],
            "root_cause": self.root_cause.to_json() if self.root_cause else None,
            "hint": self.hint,
            "spec_decode": self.spec_decode.to_json() if self.spec_decode else None,
            "generation_throughput": last_tp.generation_tps if last_tp else None,
            "lines": self.lines,
            "exit_code": self.exit_code,
            "failed_stage": self.failed_stage,
            "prefix": self.prefix.to_json() if self.prefix else None,
            "engine_output": self.engine_output,
        }
