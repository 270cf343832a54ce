"""The one mapping from Slurm's view of a job to servelab's: a :class:`JobView`.

Every reader (``servelab status``, the run record, the dashboard's state column) takes a Slurm
run's state from here: PENDING is "queued" with its reason in plain words (never a load that
never starts), RUNNING hands over to the engine's own stages, TIMEOUT is a time-limit end (not a
crash), and OUT_OF_MEMORY, NODE_FAIL, PREEMPTED and CANCELLED are each said in their own words.
"""

from __future__ import annotations

from servelab.engines.runs.placed import JobView
from servelab.engines.runs.state import RunState
from servelab.engines.slurm.scontrol import JobState, SlurmJob

#: Slurm's state -> (servelab's state, the words for it). PENDING's words come from its reason.
_STATES: dict[JobState, tuple[RunState, str]] = {
    JobState.PENDING: (RunState.QUEUED, "queued"),
    JobState.REQUEUED: (RunState.QUEUED, "queued again (requeued)"),
    JobState.REQUEUE_HOLD: (RunState.QUEUED, "held after a requeue"),
    JobState.REQUEUE_FED: (RunState.QUEUED, "queued again (requeued by the federation)"),
    JobState.RESV_DEL_HOLD: (RunState.QUEUED, "held: its reservation was deleted"),
    JobState.CONFIGURING: (RunState.QUEUED, "nodes allocated, booting"),
    JobState.RUNNING: (RunState.RUNNING, "running"),
    JobState.COMPLETING: (RunState.RUNNING, "ending (Slurm is cleaning up)"),
    JobState.SIGNALING: (RunState.RUNNING, "being signalled by Slurm"),
    JobState.STAGE_OUT: (RunState.RUNNING, "ending (staging out)"),
    JobState.RESIZING: (RunState.RUNNING, "running (being resized)"),
    JobState.SUSPENDED: (RunState.RUNNING, "suspended by Slurm"),
    JobState.STOPPED: (RunState.RUNNING, "stopped by Slurm (SIGSTOP), holding its nodes"),
    JobState.COMPLETED: (RunState.EXITED, "ended (exit code 0)"),
    JobState.FAILED: (RunState.EXITED, "ended with a failure"),
    JobState.SPECIAL_EXIT: (RunState.EXITED, "ended (special exit)"),
    JobState.CANCELLED: (RunState.CANCELLED, "cancelled outside servelab"),
    JobState.REVOKED: (RunState.CANCELLED, "revoked (ran on another cluster of the federation)"),
    JobState.TIMEOUT: (RunState.TIMED_OUT, "time limit reached"),
    JobState.DEADLINE: (RunState.TIMED_OUT, "deadline reached"),
    JobState.OUT_OF_MEMORY: (RunState.OUT_OF_MEMORY, "killed by Slurm: out of memory (the job's memory limit)"),
    JobState.NODE_FAIL: (RunState.NODE_FAILED, "ended: a node of the job failed"),
    JobState.BOOT_FAIL: (RunState.NODE_FAILED, "ended: a node failed to boot"),
    JobState.PREEMPTED: (RunState.PREEMPTED, "preempted by a higher-priority job"),
}

#: A pending job's reason (its first word, as ``scontrol`` gives it) -> what "queued: ..." says.
_REASONS: dict[str, str] = {
    "Resources": "Resources",
    "Priority": "Priority (behind higher-priority jobs)",
    "ReqNodeNotAvail": "drained",
    "Nodes": "drained",  # "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    "NodeDown": "drained",
    "PartitionDown": "partition down",
    "PartitionInactive": "partition inactive",
    "PartitionNodeLimit": "more nodes than the partition allows",
    "PartitionTimeLimit": "time limit above the partition's",
    "Dependency": "waiting on a dependency",
    "DependencyNeverSatisfied": "its dependency can never be satisfied",
    "BeginTime": "waiting for its begin time",
    "JobHeldUser": "held by its user",
    "JobHeldAdmin": "held by an administrator",
    "Reservation": "waiting for its reservation",
    "BadConstraints": "its constraints match no node",
    "Licenses": "waiting for licenses",
    "None": "waiting to be scheduled",
    "Cleaning": "nodes being cleaned",
    "launch": "launch failed, requeued",
}


def reason_words(reason: str) -> str:
    """A pending reason in plain words: ``Resources``, ``drained``, a QOS or account limit by name."""
    # scontrol writes a reason's spaces as "_" ("Nodes_required_for_job_are_DOWN,_DRAINED_or_...")
    words = reason.replace("_", " ").split(",")[0].split()
    word = words[0] if words else "None"
    if word in _REASONS:
        return _REASONS[word]
    if word.startswith("QOS"):
        return f"QOS limit ({word})"
    if word.startswith("Assoc"):
        return f"account limit ({word})"
    return word


def view(job: SlurmJob, *, stop_requested: bool = False, queue_position: int | None = None) -> JobView:
    """What a job is, in servelab's words. ``stop_requested``: servelab cancelled it (``servelab stop``)."""
    state, words = _STATES.get(job.state, (RunState.LOST, f"in a state servelab does not know: {job.state_text}")) if job.state else (
        RunState.LOST, f"in a state servelab does not know: {job.state_text or '?'}")
    if job.state is JobState.PENDING:
        words = f"queued: {reason_words(job.reason)}"
        if queue_position is not None:
            words += f" (position {queue_position})"
    elif job.state is JobState.CANCELLED and stop_requested:
        state, words = RunState.STOPPED, "cancelled by servelab stop"
    elif job.state is JobState.FAILED and job.exit_code:
        words = f"ended with exit code {job.exit_code}"
    elif job.state is JobState.TIMEOUT and job.time_limit:
        words = f"time limit reached ({job.time_limit})"
    alive = state is RunState.RUNNING
    started = job.start_time if state is not RunState.QUEUED else None  # a pending job's StartTime is Slurm's guess
    return JobView(
        job_id=job.job_id, state=state, words=words, scheduler_state=job.state_text, reason=job.reason, alive=alive,
        started_at=started, submitted_at=job.submit_time, node_list=job.node_list, batch_host=job.batch_host,
        exit_code=job.exit_code, queue_position=queue_position if job.state is JobState.PENDING else None,
        scheduler="slurm",
    )


def gone(job_id: str, *, stop_requested: bool) -> JobView:
    """A job Slurm no longer knows (past ``MinJobAge``) and servelab never saw end: its end is unknown."""
    state, words = (RunState.STOPPED, "cancelled by servelab stop") if stop_requested else (RunState.LOST, "no longer known to Slurm (its end was not seen)")
    return JobView(job_id, state, words, "", "", False, None, None, "", "", None, scheduler="slurm")
