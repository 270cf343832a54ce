"""What a run's placement recorded of where it put the run, as one typed field of its record.

A plain host starts the engine as a process group and needs nothing beyond the record's pid; a
scheduler's placement (a batch job today; a pod or a container later) records the handle it
was given and what the scheduler said of it: the job's id, the nodes it was placed on, its last
state and reason as servelab saw them, and how many nodes it asked for. ``run.json`` keeps them
under ``placement``; records written before placements were one field kept them as flat
``<kind>_job``, ``<kind>_nodes``, ``<kind>_state``, ``<kind>_reason`` and ``<kind>_node_count`` keys,
which :func:`placed_of` still reads (a job submitted by an older servelab is still found and stopped).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from servelab.engines.runs.state import RunState

__all__ = ["KEY", "JobView", "Placed", "placed_of", "without_flat_keys"]

#: The field's key in ``run.json``.
KEY = "placement"
#: The flat keys of older records: ``<kind>_`` then the field's name.
_FLAT = ("job", "nodes", "state", "reason", "node_count")


@dataclass(frozen=True)
class Placed:
    """A run as its placement placed it ("" / 1 everywhere for a run started as a process)."""

    #: The scheduler's handle for the run ("" until submitted; none for a plain run).
    job: str = ""
    #: The nodes it runs on, in the scheduler's notation (``n[1-2]``), once placed.
    nodes: str = ""
    #: The scheduler's last state as servelab saw it (``RUNNING``, ``COMPLETED``; ``gone`` once forgotten).
    state: str = ""
    reason: str = ""
    #: Nodes the job asked for (a multi-node experiment's tasks, one per node).
    node_count: int = 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Placed:
        if not data:
            return cls()
        known = {f.name for f in fields(cls)}
        got = {k: v for k, v in data.items() if k in known}
        got["job"] = str(got.get("job") or "")
        got["node_count"] = max(1, int(got.get("node_count") or 1))
        for k in ("nodes", "state", "reason"):
            got[k] = str(got.get(k) or "")
        return cls(**got)


def _flat_kind(record: Mapping[str, Any]) -> str | None:
    """The ``<kind>`` of an older record's flat ``<kind>_job`` key (None: there is none)."""
    for key in record:
        if key.endswith("_job") and key != "_job" and record[key]:
            return key.removesuffix("_job")
    return None


def placed_of(record: Mapping[str, Any]) -> Placed:
    """The placement's facts of a ``run.json`` (or runctl's status) of any servelab version."""
    if isinstance(record.get(KEY), Mapping):
        return Placed.from_json(record[KEY])
    kind = _flat_kind(record)
    if kind is None:
        return Placed()
    return Placed.from_json({name: record.get(f"{kind}_{name}") for name in _FLAT})


def without_flat_keys(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record without an older version's flat keys (they now live under :data:`KEY`)."""
    kind = _flat_kind(record)
    drop = {f"{kind}_{name}" for name in _FLAT} if kind is not None else set()
    return {k: v for k, v in record.items() if k not in drop}


@dataclass(frozen=True)
class JobView:
    """A run placed as a scheduler's job, as servelab says it: the run's state, the words, and the times that
    matter (one mapping per scheduler, beside its placement)."""

    job_id: str
    state: RunState
    #: One line: "queued: Resources", "time limit reached", "running", ...
    words: str
    #: The scheduler's own state word and reason, as it gave them.
    scheduler_state: str
    reason: str
    #: The engine may be running on the job's nodes (its log and port are worth reading).
    alive: bool
    #: When the job started on its nodes (the ETA's origin), None while queued.
    started_at: str | None
    submitted_at: str | None
    node_list: str
    batch_host: str
    exit_code: int | None
    #: Position among the partition's pending jobs (1: next), None when not pending.
    queue_position: int | None = None
    #: The scheduler's name, as a status line labels its view (and ``status --json`` keys it).
    scheduler: str = ""

    @property
    def is_queued(self) -> bool:
        return self.state is RunState.QUEUED

    def to_json(self) -> dict[str, object]:
        return {
            "job_id": self.job_id, "state": str(self.state), "words": self.words, "scheduler_state": self.scheduler_state,
            "reason": self.reason, "alive": self.alive, "started_at": self.started_at, "submitted_at": self.submitted_at,
            "node_list": self.node_list, "batch_host": self.batch_host, "exit_code": self.exit_code,
            "queue_position": self.queue_position,
        }
