"""Slurm's view of a job, typed: its state (every state ``squeue``/``scontrol`` name) and the fields
servelab reads from ``scontrol show job -o``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class JobState(StrEnum):
    """Slurm's job states (``man squeue``, JOB STATE CODES), as ``scontrol`` spells them."""

    BOOT_FAIL = "BOOT_FAIL"
    CANCELLED = "CANCELLED"
    COMPLETED = "COMPLETED"
    CONFIGURING = "CONFIGURING"
    COMPLETING = "COMPLETING"
    DEADLINE = "DEADLINE"
    FAILED = "FAILED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    PENDING = "PENDING"
    PREEMPTED = "PREEMPTED"
    RUNNING = "RUNNING"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    REQUEUE_FED = "REQUEUE_FED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    REQUEUED = "REQUEUED"
    RESIZING = "RESIZING"
    REVOKED = "REVOKED"
    SIGNALING = "SIGNALING"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    STAGE_OUT = "STAGE_OUT"
    STOPPED = "STOPPED"
    SUSPENDED = "SUSPENDED"
    TIMEOUT = "TIMEOUT"

    @classmethod
    def parse(cls, value: str) -> JobState | None:
        """``JobState=CANCELLED by 0`` reads CANCELLED; an unknown word is None."""
        word = value.split()[0] if value.split() else ""
        try:
            return cls(word)
        except ValueError:
            return None


#: States after which nothing more happens to a job.
ENDED = frozenset({
    JobState.BOOT_FAIL, JobState.CANCELLED, JobState.COMPLETED, JobState.DEADLINE, JobState.FAILED, JobState.NODE_FAIL,
    JobState.OUT_OF_MEMORY, JobState.PREEMPTED, JobState.REVOKED, JobState.SPECIAL_EXIT, JobState.TIMEOUT,
})


def has_ended(state_text: str) -> bool:
    """Whether a recorded Slurm state (``run.json``'s ``placement.state``) is a job's end ("gone": Slurm forgot it)."""
    return state_text == "gone" or JobState.parse(state_text) in ENDED


#: ``scontrol -o`` prints ``Key=value`` pairs on one line; a value may hold spaces (a reason, a path).
_PAIR_START = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=")


def parse_pairs(line: str) -> dict[str, str]:
    """``Key=value ...`` of one ``scontrol show ... -o`` line; a value runs to the next `` Key=``."""
    starts = list(_PAIR_START.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(line)
        out.setdefault(m.group(1), line[m.end() : end].strip())
    return out


def _time(value: str | None) -> str | None:
    return None if value in (None, "", "None", "Unknown", "N/A") else value


@dataclass(frozen=True)
class SlurmJob:
    """One job as ``scontrol show job -o JOBID`` shows it."""

    job_id: str
    name: str
    state: JobState | None
    #: The raw state word(s) (``CANCELLED by 0``) and the reason Slurm gives (``Resources``, ``None``).
    state_text: str
    reason: str
    submit_time: str | None
    start_time: str | None
    end_time: str | None
    time_limit: str
    #: The allocation (``n[1-2]``) and the node running the batch script; "" while pending.
    node_list: str
    batch_host: str
    #: ``ExitCode=code:signal``.
    exit_code: int | None
    exit_signal: int | None
    partition: str

    @classmethod
    def from_scontrol(cls, line: str) -> SlurmJob:
        kv = parse_pairs(line)
        code, _, sig = kv.get("ExitCode", "").partition(":")
        nodes = kv.get("NodeList", "")
        return cls(
            job_id=kv.get("JobId", ""),
            name=kv.get("JobName", ""),
            state=JobState.parse(kv.get("JobState", "")),
            state_text=kv.get("JobState", ""),
            reason=kv.get("Reason", "None"),
            submit_time=_time(kv.get("SubmitTime")),
            start_time=_time(kv.get("StartTime")),
            end_time=_time(kv.get("EndTime")),
            time_limit=kv.get("TimeLimit", ""),
            node_list="" if nodes in ("(null)", "") else nodes,
            batch_host="" if kv.get("BatchHost", "(null)") == "(null)" else kv.get("BatchHost", ""),
            exit_code=int(code) if code.isdigit() else None,
            exit_signal=int(sig) if sig.isdigit() else None,
            partition=kv.get("Partition", ""),
        )
