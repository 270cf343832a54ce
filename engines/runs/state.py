"""The one vocabulary for where a run is: what its process did and what its log says.

Two sources name a run's state, and every screen, the CLI and the JSON use these words:

- the host (``engines/helpers/runctl.py``, which runs with the host's Python and cannot import
  servelab, spells the same strings): ``launching``, ``running``, ``exited``, ``stopped``,
  ``lost``, and ``refused`` when a launch was turned down;
- a scheduler's placement (a batch job, ``engines/placements/``): ``queued``, and the ends the
  scheduler itself brings, ``timed out``, ``out of memory``, ``node failed``, ``preempted``,
  ``cancelled``;
- the log analyzer: ``starting``, ``loading``, ``ready``, ``crashed``, ``exited``, and ``waiting``
  before the first byte has been read.

``StageState`` names where one startup stage is (``pending``, ``running``, ``done``, ``failed``).

Both are ``StrEnum``s, so JSON keeps the plain strings it always had; each has one style table
that every screen draws it in.
"""

from __future__ import annotations

from enum import StrEnum

from servelab.engines.errors import ServelabError


class RunState(StrEnum):
    """A run's state. The string values are the ones ``run.json`` and ``--json`` output carry."""

    # what the process did (runctl.py)
    LAUNCHING = "launching"
    RUNNING = "running"
    EXITED = "exited"
    STOPPED = "stopped"
    LOST = "lost"
    REFUSED = "refused"
    # what a scheduler did (a placement's job): a batch job waiting, or ended by the scheduler
    QUEUED = "queued"
    TIMED_OUT = "timed out"
    OUT_OF_MEMORY = "out of memory"
    NODE_FAILED = "node failed"
    PREEMPTED = "preempted"
    CANCELLED = "cancelled"
    # what the log says (engines.logs.analyzer)
    WAITING = "waiting"
    STARTING = "starting"
    LOADING = "loading"
    READY = "ready"
    CRASHED = "crashed"

    @property
    def is_terminal(self) -> bool:
        """Nothing more happens to a run in this state (its process is gone)."""
        return self in _TERMINAL

    @property
    def is_active(self) -> bool:
        """The process is (or is about to be) up: worth following."""
        return self in (RunState.LAUNCHING, RunState.RUNNING, RunState.QUEUED)

    @property
    def is_scheduler_end(self) -> bool:
        """The scheduler ended the run (time limit, memory limit, a node, preemption, a cancel):
        what its log says last is its last stage, not a crash."""
        return self in _SCHEDULER_ENDS

    @property
    def style(self) -> str:
        """The Rich style every screen draws this state in."""
        return STYLES[self]

    @classmethod
    def parse(cls, value: object) -> RunState:
        """A state from JSON; anything else is a clear one-line error."""
        try:
            return cls(str(value))
        except ValueError:
            raise ServelabError(f"unknown run state {value!r} (expected one of {', '.join(s.value for s in cls)})") from None


_SCHEDULER_ENDS = frozenset({RunState.TIMED_OUT, RunState.OUT_OF_MEMORY, RunState.NODE_FAILED, RunState.PREEMPTED, RunState.CANCELLED})
_TERMINAL = frozenset({RunState.EXITED, RunState.STOPPED, RunState.LOST, RunState.REFUSED, RunState.CRASHED}) | _SCHEDULER_ENDS

#: One style per state, for the experiments table, the runs table and the run screen's title.
STYLES: dict[RunState, str] = {
    RunState.LAUNCHING: "cyan",
    RunState.RUNNING: "bold cyan",
    RunState.EXITED: "yellow",
    RunState.STOPPED: "dim",
    RunState.LOST: "red",
    RunState.REFUSED: "red",
    RunState.QUEUED: "magenta",
    RunState.TIMED_OUT: "yellow",
    RunState.OUT_OF_MEMORY: "bold red",
    RunState.NODE_FAILED: "bold red",
    RunState.PREEMPTED: "yellow",
    RunState.CANCELLED: "yellow",
    RunState.WAITING: "cyan",
    RunState.STARTING: "cyan",
    RunState.LOADING: "cyan",
    RunState.READY: "bold green",
    RunState.CRASHED: "bold red",
}


def is_terminal(state: RunState | str) -> bool:
    """``RunState.is_terminal`` for a state that may still be a plain string."""
    return RunState.parse(state).is_terminal


class EngineState(StrEnum):
    """What a live run's engine is doing, from its log (``history.engine_state``): ``starting``,
    ``loading``, ``ready`` (up, no generation seen yet), ``serving`` (it has generated tokens);
    ``ended`` once its process is gone, ``unknown`` when the log could not be read."""

    STARTING = "starting"
    LOADING = "loading"
    READY = "ready"
    SERVING = "serving"
    ENDED = "ended"
    UNKNOWN = "unknown"


class StageState(StrEnum):
    """A startup stage's state (``Stage.status``). The string values are the ones ``--json`` carries."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"

    @property
    def style(self) -> str:
        """The Rich style every screen draws this state (its mark, its name) in."""
        return STAGE_STYLES[self]

    @property
    def mark(self) -> str:
        """The one-character mark in front of a stage's name."""
        return STAGE_MARKS[self]


#: One style per stage state, for the run screen's stage bars and the multi-node lanes.
STAGE_STYLES: dict[StageState, str] = {
    StageState.PENDING: "dim",
    StageState.RUNNING: "bold cyan",
    StageState.DONE: "bold green",
    StageState.FAILED: "bold red",
}
#: The mark drawn before a stage's name, in its style.
STAGE_MARKS: dict[StageState, str] = {
    StageState.PENDING: "·",
    StageState.RUNNING: "▶",
    StageState.DONE: "✓",
    StageState.FAILED: "✗",
}


class CampaignState(StrEnum):
    """A campaign's, a load's or a point's state, as the host's supervisor writes them into
    ``state.json`` (``engines/helpers/campaignctl.py`` spells the same strings; it runs with the
    host's Python and cannot import servelab), plus the ones servelab says itself: ``interrupted``
    (the supervisor is gone mid-way), ``starting``, ``not started`` and ``unknown``."""

    # a point's
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"
    BLOCKED = "blocked"
    STOPPED = "stopped"
    # a load's (beside done, skipped)
    LAUNCHING = "launching"
    READY = "ready"
    CRASHED = "crashed"
    REFUSED = "refused"
    # the campaign's (beside running, done, stopped, failed)
    WAITING = "waiting"
    INTERRUPTED = "interrupted"
    STARTING = "starting"
    NOT_STARTED = "not started"
    UNKNOWN = "unknown"

    @property
    def style(self) -> str:
        """The Rich style every screen draws this state in ("" where it is drawn plain)."""
        return CAMPAIGN_STYLES.get(self, "")

    @classmethod
    def parse(cls, value: object, default: CampaignState | None = None) -> CampaignState:
        """A state from ``state.json``: ``default`` (else ``unknown``) when missing, ``unknown`` when unrecognised."""
        if value is None or value == "":
            return default if default is not None else cls.UNKNOWN
        try:
            return cls(str(value))
        except ValueError:
            return cls.UNKNOWN


#: One style per campaign state, for the campaigns list, the campaign screen and ``servelab campaign``.
CAMPAIGN_STYLES: dict[CampaignState, str] = {
    CampaignState.DONE: "green",
    CampaignState.RUNNING: "bold yellow",
    CampaignState.PENDING: "dim",
    CampaignState.SKIPPED: "magenta",
    CampaignState.BLOCKED: "magenta",
    CampaignState.FAILED: "bold red",
    CampaignState.CRASHED: "bold red",
    CampaignState.STOPPED: "yellow",
    CampaignState.INTERRUPTED: "bold yellow",
    CampaignState.WAITING: "cyan",
    CampaignState.NOT_STARTED: "dim",
}
