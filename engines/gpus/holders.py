"""Whose a GPU process is: this run's, another servelab run's, or foreign.

A run's processes are known by what runctl gave them: the ``SERVELAB_RUN_ID`` marker in their
environment (inherited by every child), and the run's own process group (``RunRecord.pgid``, the
engine being its group's leader). A process carrying another run's marker is that run's, and so is
one without a marker in another run's group (a worker its engine started with a fresh environment);
anything else is foreign, which servelab never signals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from servelab.engines.gpus.inventory import GpuProcess, Holder, HostGpus
from servelab.engines.runs.records import RunRecord


@dataclass(frozen=True)
class RunProcesses:
    """What marks a run's processes: its run ids (a multi-node group's node ids too), pids and groups."""

    ids: frozenset[str] = frozenset()
    pids: frozenset[int] = frozenset()
    pgids: frozenset[int] = field(default=frozenset())

    @classmethod
    def of(cls, records: Iterable[RunRecord]) -> RunProcesses:
        recs = list(records)
        return cls(
            ids=frozenset(r.id for r in recs),
            pids=frozenset(r.pid for r in recs if r.pid),
            pgids=frozenset(r.pgid for r in recs if r.pgid),
        )


def holder(proc: GpuProcess, run: RunProcesses | None, groups: Mapping[int, str] | None = None) -> Holder:
    """This run's (its marker, pid or process group), another servelab run's (another marker, or
    another run's group in ``groups``: pgid -> run id), else foreign."""
    if run is not None:
        if proc.run_id is not None and proc.run_id in run.ids:
            return Holder.THIS_RUN
        if proc.pid is not None and proc.pid in run.pids:
            return Holder.THIS_RUN
        if proc.pgid is not None and proc.pgid in run.pgids:
            return Holder.THIS_RUN
    if owner_of(proc, groups) is not None:
        return Holder.OTHER_RUN
    return Holder.FOREIGN


def owner_of(proc: GpuProcess, groups: Mapping[int, str] | None = None) -> str | None:
    """The servelab run a process is of: its marker, else the run whose process group it is in."""
    if proc.run_id is not None:
        return proc.run_id
    if groups and proc.pgid is not None:
        return groups.get(proc.pgid)
    return None


def run_groups(records: Iterable[RunRecord]) -> dict[int, str]:
    """pgid -> run id, for the runs that recorded their group (the engine leads it)."""
    return {r.pgid: r.id for r in records if r.pgid}


@dataclass(frozen=True)
class HeldBy:
    """A process with its holder class, as a screen or the CLI shows it."""

    process: GpuProcess
    holder: Holder
    #: The servelab run it is of (its marker, or the group it is in), None for a foreign process.
    run_id: str | None = None

    @property
    def label(self) -> str:
        p = self.process
        mem = f"{p.used_mib} MiB" if p.used_mib is not None else "? MiB"
        whose = self.holder.value if self.holder is not Holder.OTHER_RUN else f"run {self.run_id}"
        return f"pid {p.pid if p.pid is not None else '?'} {short_name(p)} {mem} ({whose})"


def short_name(p: GpuProcess) -> str:
    name = p.name or (p.cmd or "?").split(" ", 1)[0]
    return name.rsplit("/", 1)[-1] or name


def held_by(sample: HostGpus, run: RunProcesses | None, groups: Mapping[int, str] | None = None) -> list[HeldBy]:
    """Every process of the sample, classified, biggest first (``groups``: :func:`run_groups` of the
    host's runs, so an unmarked worker in a run's group is that run's)."""
    out = [HeldBy(p, holder(p, run, groups), owner_of(p, groups)) for p in sample.processes]
    return sorted(out, key=lambda h: -(h.process.used_mib or 0))


def run_memory(sample: HostGpus, run: RunProcesses) -> dict[str, int]:
    """MiB the run's processes hold, per GPU uuid (only GPUs where they hold some)."""
    out: dict[str, int] = {}
    for p in sample.processes:
        if holder(p, run) is Holder.THIS_RUN:
            out[p.gpu_uuid] = out.get(p.gpu_uuid, 0) + (p.used_mib or 0)
    return out
