"""What samples over time say about a run: its first allocation and peak memory, whether its GPUs came
back after a stop, and memory staying flat while a load's shards advance."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from servelab.engines.gpus.holders import HeldBy, RunProcesses, held_by, run_memory
from servelab.engines.gpus.inventory import Holder, HostGpus

#: Memory within this of the pre-launch figure counts as returned (driver bookkeeping moves a few MiB).
RETURN_SLACK_MIB = 64
#: How long after a stop the GPUs have to come back.
RETURN_WITHIN_S = 30.0
#: Shards advancing while memory moves less than this for FLAT_S seconds earns a hint.
FLAT_MIB = 256
FLAT_S = 180.0


def epoch_of(started_at: str) -> float | None:
    """A run record's ``started_at`` (ISO, UTC) as epoch seconds; None when unreadable."""
    try:
        return dt.datetime.fromisoformat(started_at).timestamp()
    except ValueError:
        return None


@dataclass
class GpuFigures:
    """A run's GPU figures for its record: its own processes' peak MiB per GPU index it held memory on
    (the figure the supervisor records in ``gpu_peak_mib``, not the GPU's whole use), and the
    seconds from its start to the first sample where one of its processes held memory."""

    peak_mib: dict[int, int] = field(default_factory=dict)
    first_alloc_s: float | None = None

    def to_json(self) -> dict[str, object]:
        return {"peak_mib": {str(k): v for k, v in sorted(self.peak_mib.items())}, "first_alloc_s": self.first_alloc_s}

    @classmethod
    def from_json(cls, data: object) -> GpuFigures:
        if not isinstance(data, dict):
            return cls()
        peak = data.get("peak_mib") if isinstance(data.get("peak_mib"), dict) else {}
        first = data.get("first_alloc_s")
        return cls(
            peak_mib={int(k): int(v) for k, v in (peak or {}).items() if str(k).isdigit() and isinstance(v, int)},
            first_alloc_s=float(first) if isinstance(first, (int, float)) else None,
        )


@dataclass
class GpuTrack:
    """Samples of a run's host fed in order: the pre-launch baseline (the first sample), the run's
    figures, and the latest sample."""

    run: RunProcesses
    started: float | None = None
    baseline: HostGpus | None = None
    #: Per GPU uuid, the MiB used by others than this run in the first sample: the pre-launch
    #: memory (a screen opened after the launch subtracts what the run already holds).
    baseline_mib: dict[str, int] = field(default_factory=dict)
    latest: HostGpus | None = None
    figures: GpuFigures = field(default_factory=GpuFigures)

    def feed(self, sample: HostGpus) -> None:
        if not sample.gpu:
            self.latest = sample
            return
        mine = run_memory(sample, self.run)
        if self.baseline is None:
            self.baseline = sample
            self.baseline_mib = {g.uuid: max(0, (g.memory_used_mib or 0) - mine.get(g.uuid, 0)) for g in sample.gpus}
        self.latest = sample
        for gpu in sample.gpus:
            if gpu.uuid in mine:  # the run's own processes' memory, as its record keeps it: never a foreign holder's
                self.figures.peak_mib[gpu.index] = max(self.figures.peak_mib.get(gpu.index, 0), mine[gpu.uuid])
        if self.figures.first_alloc_s is None and any(v > 0 for v in mine.values()) and self.started is not None:
            self.figures.first_alloc_s = round(max(0.0, sample.t - self.started), 3)


@dataclass(frozen=True)
class Release:
    """After a stop or crash: did the run's GPUs come back to their pre-launch memory, how fast, and
    who still holds memory there (classified: this run's group can be ended by ``s``, foreign never)."""

    returned: bool
    seconds: float | None
    still: tuple[HeldBy, ...]
    within_s: float

    @property
    def message(self) -> str:
        if self.returned:
            return f"GPUs back to their pre-launch memory {self.seconds:.1f} s after the stop"
        if not self.still:
            return f"GPU memory not back to its pre-launch figure within {self.within_s:g} s (no process listed holds it)"
        names = "; ".join(h.label for h in self.still[:3])
        mine = self.mine_still
        others = any(h.holder is not Holder.THIS_RUN for h in self.still)
        if mine and others:
            tail = " (this run's group: s ends it; the others are not this run's: servelab leaves them alone)"
        else:
            tail = " (this run's group: s ends it)" if mine else " (not this run's: servelab leaves it alone)"
        return f"GPU memory still held {self.within_s:g} s after the stop: {names}{tail}"

    @property
    def mine_still(self) -> bool:
        """A process of this run's group still holds GPU memory: stopping the run again ends it."""
        return any(h.holder is Holder.THIS_RUN for h in self.still)


def release(
    baseline: HostGpus | dict[str, int],
    after: list[HostGpus],
    run: RunProcesses,
    stopped_at: float,
    within_s: float = RETURN_WITHIN_S,
    slack_mib: int = RETURN_SLACK_MIB,
) -> Release:
    """Read samples taken after ``stopped_at`` (epoch) against the pre-launch ``baseline`` (a sample,
    or MiB per GPU uuid: :attr:`GpuTrack.baseline_mib`). The GPUs that count: those the run held
    memory on in any sample, else all of the baseline's."""
    if isinstance(baseline, HostGpus):
        before = {g.uuid: g.memory_used_mib or 0 for g in baseline.gpus}
        seen = [baseline, *after]
    else:
        before, seen = dict(baseline), list(after)
    used = {g.uuid for s in seen for g in s.gpus if g.uuid in run_memory(s, run)}
    watched = used or set(before)
    last: HostGpus | None = None
    for s in sorted((s for s in after if s.gpu and s.t >= stopped_at), key=lambda s: s.t):
        if s.t - stopped_at > within_s:
            break
        last = s
        now = {g.uuid: g.memory_used_mib or 0 for g in s.gpus}
        if all(now.get(u, 0) <= before.get(u, 0) + slack_mib for u in watched):
            return Release(True, round(s.t - stopped_at, 3), (), within_s)
    still = tuple(h for h in held_by(last, run) if h.process.gpu_uuid in watched) if last is not None else ()
    return Release(False, None, still, within_s)


@dataclass
class LoadWatch:
    """During a load: shards done and GPU memory used, over time; a hint when the shards advance while
    the memory stays flat for ``flat_s`` seconds (weights going somewhere else than the GPU, or a
    loader reading without copying)."""

    flat_s: float = FLAT_S
    flat_mib: int = FLAT_MIB
    points: list[tuple[float, int, int]] = field(default_factory=list)

    def feed(self, t: float, shards_done: int, used_mib: int) -> None:
        self.points.append((t, shards_done, used_mib))
        while len(self.points) > 2 and self.points[1][0] <= t - self.flat_s:
            self.points.pop(0)  # keep one point at or before the window's start

    def hint(self) -> str | None:
        if len(self.points) < 2:
            return None
        t0, s0, _ = self.points[0]
        t1, s1, _ = self.points[-1]
        mem = [m for _, _, m in self.points]
        if t1 - t0 >= self.flat_s and s1 > s0 and max(mem) - min(mem) < self.flat_mib:
            return (
                f"shards advanced {s0}->{s1} in {(t1 - t0) / 60:.0f} min while GPU memory stayed at "
                f"{mem[-1]} MiB: the weights are not reaching the GPU (CPU offload, a wrong device, or a loader that only reads)"
            )
        return None
