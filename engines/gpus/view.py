"""What the host view, ``servelab gpus HOST`` and the run screen's GPU rows show: per GPU its memory,
utilisation and power, and its holders classified; the campaign holding each GPU-set lock.
Text is made here so the CLI and the screen say the same thing; the TUI only draws it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from servelab.engines.gpus.holders import HeldBy, RunProcesses, held_by, run_groups
from servelab.engines.gpus.inventory import GpuLockHolder, GpuSample, Holder, HostGpus
from servelab.engines.runs.records import RunRecord

BAR_WIDTH = 16


def memory_bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """``[█████···········]``: the used share of a GPU's memory."""
    full = round(max(0.0, min(1.0, fraction)) * width)
    return "[" + "█" * full + "·" * (width - full) + "]"


def gpu_line(g: GpuSample, width: int = BAR_WIDTH) -> str:
    """``GPU 0 NVIDIA H200 [██··] 10861/143771 MiB util 1% 96 W 43°C P0``."""
    used = "?" if g.memory_used_mib is None else str(g.memory_used_mib)
    total = "?" if g.memory_total_mib is None else str(g.memory_total_mib)
    util = "-" if g.util_pct is None else f"{g.util_pct}%"
    power = "-" if g.power_w is None else f"{g.power_w:.0f} W"
    temp = "" if g.temp_c is None else f" {g.temp_c}°C"
    return f"GPU {g.index} {g.name} {memory_bar(g.used_fraction, width)} {used}/{total} MiB util {util} {power}{temp} {g.pstate}".rstrip()


@dataclass(frozen=True)
class GpuRow:
    gpu: GpuSample
    holders: tuple[HeldBy, ...]
    locks: tuple[GpuLockHolder, ...]

    @property
    def line(self) -> str:
        return gpu_line(self.gpu)


@dataclass(frozen=True)
class GpuView:
    """One sample of a host, seen from one run (``run`` set: its processes are "this run") or from none."""

    host: str
    sample: HostGpus
    rows: tuple[GpuRow, ...]
    #: run id -> experiment, for the servelab runs of the host that hold a GPU.
    experiments: dict[str, str]

    @classmethod
    def of(cls, sample: HostGpus, records: Iterable[RunRecord] = (), run: RunProcesses | None = None) -> GpuView:
        recs = {r.id: r for r in records}
        everyone = held_by(sample, run, run_groups(recs.values()))
        rows = []
        for g in sample.gpus:
            locks = tuple(k for k in sample.locks if k.gpus == "all" or str(g.index) in k.gpus.split(","))
            rows.append(GpuRow(g, tuple(h for h in everyone if h.process.gpu_uuid == g.uuid), locks))
        experiments = {h.run_id: recs[h.run_id].experiment for h in everyone if h.run_id is not None and h.run_id in recs}
        return cls(sample.host, sample, tuple(rows), experiments)

    def holder_text(self, h: HeldBy) -> str:
        if h.holder is Holder.OTHER_RUN and h.run_id in self.experiments:
            return f"{h.label[:-1]}, {self.experiments[h.run_id]})"
        return h.label

    def lines(self) -> list[str]:
        """The text of ``servelab gpus HOST``: a CPU host says "no GPU" once."""
        return [text for text, _ in self.entries()]

    def entries(self) -> list[tuple[str, Holder | None]]:
        """:meth:`lines` with whose each holder line is (None: a GPU's line, a lock, a note), for a
        screen that colours them (the host view)."""
        s = self.sample
        if not s.gpu:
            return [(f"{self.host}: no GPU ({s.reason})", None)]
        out: list[tuple[str, Holder | None]] = [(f"{self.host}: {len(s.gpus)} GPU{'s' if len(s.gpus) != 1 else ''}", None)]
        for row in self.rows:
            out.append((row.line, None))
            out += [(f"  {self.holder_text(h)}", h.holder) for h in row.holders] or [("  no process", None)]
            out += [(f"  GPU lock: campaign {k.campaign or '?'} (pid {k.pid or '?'}, since {k.since or '?'}, GPUs {k.gpus})", None) for k in row.locks]
        return out

    def to_json(self) -> dict[str, Any]:
        s = self.sample
        return {
            "host": self.host,
            "gpu": s.gpu,
            "reason": s.reason,
            "gpus": [
                {
                    **asdict(row.gpu),
                    "holders": [{**asdict(h.process), "holder": h.holder.value, "run": h.run_id, "experiment": self.experiments.get(h.run_id or "")} for h in row.holders],
                    "locks": [asdict(k) for k in row.locks],
                }
                for row in self.rows
            ],
        }


def unnamed_runs(sample: HostGpus, records: Iterable[RunRecord]) -> set[str]:
    """Servelab run ids holding a GPU in ``sample`` that ``records`` does not name (a view lists the
    host's runs again, to say each one's experiment)."""
    known = {r.id for r in records}
    return {p.run_id for p in sample.processes if p.run_id is not None and p.run_id not in known}
