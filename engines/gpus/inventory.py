"""The typed values of a host's GPUs (what ``helpers/gpusample.py`` prints, parsed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Holder(str, Enum):
    """Whose a process holding GPU memory is, as seen from one run (or from no run: the host view)."""

    THIS_RUN = "this run"
    OTHER_RUN = "other run"
    FOREIGN = "foreign"


@dataclass(frozen=True)
class GpuProcess:
    """One compute process on one GPU, with what the host's /proc says of it."""

    pid: int | None
    name: str
    gpu_uuid: str
    used_mib: int | None
    pgid: int | None = None
    #: The servelab run marker (``SERVELAB_RUN_ID``) in its environment; None for a foreign process
    #: (or one whose environment this user cannot read).
    run_id: str | None = None
    cmd: str | None = None


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one moment."""

    index: int
    uuid: str
    name: str
    memory_used_mib: int | None
    memory_total_mib: int | None
    util_pct: int | None = None
    power_w: float | None = None
    temp_c: int | None = None
    pstate: str = ""

    @property
    def used_fraction(self) -> float:
        if not self.memory_total_mib or self.memory_used_mib is None:
            return 0.0
        return min(1.0, max(0.0, self.memory_used_mib / self.memory_total_mib))


@dataclass(frozen=True)
class GpuLockHolder:
    """A held GPU-set lock of the host's campaigns (``<workdir>/campaigns/gpu*.lock``) and who holds it."""

    gpus: str  # "all" or "0,1"
    campaign: str | None = None
    pid: int | None = None
    since: str | None = None


@dataclass(frozen=True)
class HostGpus:
    """One sample of a host: every GPU and its compute processes; ``gpu`` False on a CPU host."""

    host: str
    gpu: bool
    t: float = 0.0
    gpus: tuple[GpuSample, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    #: Why there is no GPU (no nvidia-smi, no driver, no device); "" when there are GPUs.
    reason: str = ""
    #: CPU seconds this sample cost the host.
    cpu_s: float = 0.0
    locks: tuple[GpuLockHolder, ...] = field(default=())

    def on(self, gpu: GpuSample) -> list[GpuProcess]:
        """The processes on ``gpu``."""
        return [p for p in self.processes if p.gpu_uuid == gpu.uuid]

    def gpu_of(self, uuid: str) -> GpuSample | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)
