"""A run's GPUs, live, for the run screen: sampled about once a second while the run is open, until
its GPUs have come back after a stop (or ``RETURN_WITHIN_S`` has passed). A CPU host is sampled
once and says "no GPU". The screen feeds it samples, shard progress and the stop; it answers the
rows to draw (:class:`GpuPanel`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from servelab.engines.gpus.holders import RunProcesses, run_memory
from servelab.engines.gpus.readings import RETURN_WITHIN_S, GpuTrack, LoadWatch, Release, epoch_of, release
from servelab.engines.gpus.inventory import Holder, HostGpus
from servelab.engines.gpus.view import GpuView, gpu_line
from servelab.engines.runs.records import RunRecord

#: Seconds between samples while a run's screen is open.
SAMPLE_S = 1.0


@dataclass(frozen=True)
class PanelLine:
    """One line of the GPU rows: its text and whose it is (None: a GPU's own line or a note)."""

    text: str
    holder: Holder | None = None
    note: bool = False


@dataclass(frozen=True)
class GpuPanel:
    lines: tuple[PanelLine, ...] = ()


@dataclass
class RunGpus:
    """The GPU side of one open run (a multi-node group: one per node, each on its own host)."""

    record: RunRecord
    track: GpuTrack = field(init=False)
    load: LoadWatch = field(default_factory=LoadWatch)
    stopped_at: float | None = None
    after: list[HostGpus] = field(default_factory=list)
    outcome: Release | None = None
    no_gpu: str | None = None
    #: Run records of the host, for naming another run's experiment.
    others: tuple[RunRecord, ...] = ()
    #: Samples fed so far.
    fed: int = 0
    #: Seconds the GPUs have after the end to come back to their pre-launch memory.
    within_s: float = field(default_factory=lambda: RETURN_WITHIN_S)
    #: The other processes of its group (a multi-node run's other nodes): theirs count as this run's too.
    group: tuple[RunRecord, ...] = ()

    def __post_init__(self) -> None:
        self.track = GpuTrack(RunProcesses.of([self.record, *self.group]), started=epoch_of(self.record.started_at))

    @property
    def done(self) -> bool:
        """Nothing more to sample: a CPU host, or the run's GPUs have been judged after its end."""
        return self.no_gpu is not None or self.outcome is not None

    def feed(self, sample: HostGpus, shards_done: int | None = None) -> None:
        self.fed += 1
        if not sample.gpu:
            self.no_gpu = sample.reason or "no GPU"
            return
        self.track.feed(sample)
        if self.stopped_at is None:
            if shards_done is not None:
                mine = run_memory(sample, self.track.run)
                self.load.feed(sample.t, shards_done, sum(mine.values()))
            return
        self.after.append(sample)
        decided = release(self.track.baseline_mib, self.after, self.track.run, self.stopped_at, within_s=self.within_s)
        if decided.returned or sample.t - self.stopped_at > decided.within_s:
            self.outcome = decided

    def ended(self, at: float | None = None) -> None:
        """The run stopped or crashed (first seen now, or at ``at``): watch its GPUs come back."""
        if self.stopped_at is None:
            self.stopped_at = time.time() if at is None else at

    @property
    def held_by_this_run(self) -> bool:
        """After the end, a process of this run's group still holds GPU memory (judged, or in the
        latest sample): ``s`` can end it, though the run's own process has gone."""
        if self.stopped_at is None:
            return False
        if self.outcome is not None:
            return self.outcome.mine_still
        latest = self.track.latest
        return latest is not None and latest.gpu and bool(run_memory(latest, self.track.run))

    def stopped_again(self, at: float | None = None) -> None:
        """Its leftover processes were stopped (``s`` after the end): judge the GPUs' return afresh."""
        self.stopped_at = time.time() if at is None else at
        self.after, self.outcome = [], None

    def panel(self) -> GpuPanel:
        if self.no_gpu is not None:
            return GpuPanel((PanelLine(f"no GPU ({self.no_gpu})", note=True),))
        latest = self.track.latest
        if latest is None or not latest.gpu:
            return GpuPanel((PanelLine("GPUs: sampling…", note=True),))
        view = GpuView.of(latest, self.others, self.track.run)
        lines: list[PanelLine] = []
        mine_any = run_memory(latest, self.track.run)
        for row in view.rows:
            # the run's GPUs first; with CUDA_VISIBLE_DEVICES unset every GPU is the run's
            lines.append(PanelLine(gpu_line(row.gpu, 12)))
            lines += [PanelLine(f"  {view.holder_text(h)}", h.holder) for h in row.holders]
        figures = self.track.figures
        if figures.first_alloc_s is not None:
            peak = ", ".join(f"GPU {i} {v} MiB" for i, v in sorted(figures.peak_mib.items()))
            lines.append(PanelLine(f"first allocation {figures.first_alloc_s:.1f} s after start · peak {peak}", note=True))
        hint = self.load.hint() if self.stopped_at is None else None
        if hint:
            lines.append(PanelLine(f"hint: {hint}", note=True))
        if self.stopped_at is not None:
            if self.outcome is not None:
                lines.append(PanelLine(self.outcome.message, note=True))
            elif not mine_any:
                lines.append(PanelLine(f"after the stop: waiting for the GPUs' memory (up to {self.within_s:g} s)", note=True))
            else:
                lines.append(PanelLine("after the stop: the run's processes still hold memory", note=True))
        return GpuPanel(tuple(lines))
