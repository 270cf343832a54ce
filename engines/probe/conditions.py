"""The host's conditions during each probe round, and the gap between two probes' conditions.

Each round the timed client (on the server's host) samples ``/proc`` just before and just after its
requests: the load average, the CPU every process used, the server's session and the client's own.
What is left is what *other* processes used during the round, in cores. Beside it, the GPU sampler's
utilisation and memory where the host has GPUs, and the other servelab runs alive on the host.

The timed client also counts the host's runnable tasks every 0.1 s during the round: a load average
reacts over a minute, and on a saturated host the CPU others use is capped by the cores, while the
queue of tasks wanting a CPU keeps growing with each new burner.

Two probes taken apart (``gap``) are compared on the time between them and on these conditions:
"probed 14 min apart; host load 0.5 against 2.1; other processes 0.1 against 1.3 cores".
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from servelab.engines.probe.summary import ProbeSummary
from servelab.engines.adapters.exchange import AsDict

#: Conditions differ when the load average moved by this much (absolute) and by a quarter of the larger.
LOAD_GAP = 0.5
#: ... or the runnable tasks during the rounds moved by this many (and a quarter of the larger) ...
RUNNABLE_GAP = 1.0
#: ... or other processes' CPU moved by this many cores.
OTHER_CPU_GAP = 0.3
#: Probes further apart than this (seconds) are named as apart even when their conditions agree.
TIME_GAP_S = 120.0


@dataclass(frozen=True)
class RoundConditions(AsDict):
    """One round's host conditions. ``other_cores``: CPU cores used by processes other than the server
    (its whole session) and the timed client, averaged over the round."""

    load1: float | None = None
    #: The mean count of runnable tasks on the host during the round (sampled every 0.1 s).
    runnable: float | None = None
    cpus: int | None = None
    other_cores: float | None = None
    server_cores: float | None = None
    gpu_util_pct: float | None = None
    gpu_mem_mib: int | None = None
    other_runs: list[str] = field(default_factory=list)


def _num(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def from_samples(host: dict[str, Any] | None) -> RoundConditions:
    """The round's conditions from the timed client's ``host`` samples (before and after)."""
    if not isinstance(host, dict):
        return RoundConditions()
    before, after = host.get("before") or {}, host.get("after") or {}
    if not isinstance(before, dict) or not isinstance(after, dict):
        return RoundConditions()
    load = after.get("load") or before.get("load")
    load1 = float(load[0]) if isinstance(load, list) and load and isinstance(load[0], (int, float)) else None
    cpus = after.get("cpus") if isinstance(after.get("cpus"), int) else None
    other = server = None
    deltas = {k: (a - b) if (a := _num(after, k)) is not None and (b := _num(before, k)) is not None else None
              for k in ("total", "busy", "self", "server")}
    total, busy = deltas["total"], deltas["busy"]
    if total and total > 0 and busy is not None and cpus:
        mine = (deltas["self"] or 0.0) + (deltas["server"] or 0.0)
        other = max(0.0, busy - mine) / total * cpus
        if deltas["server"] is not None:
            server = deltas["server"] / total * cpus
    runnable = host.get("runnable")
    runnable = float(runnable) if isinstance(runnable, (int, float)) and not isinstance(runnable, bool) else None
    return RoundConditions(load1, runnable, cpus, other, server)


def summary_conditions(summary: ProbeSummary) -> list[RoundConditions]:
    """A probe's rounds' conditions (empty for a file made before they were kept)."""
    out = []
    for r in summary.data.get("host_conditions") or []:
        if isinstance(r, dict):
            known = {k: v for k, v in r.items() if k in RoundConditions.__dataclass_fields__}
            try:
                out.append(RoundConditions(**known))
            except TypeError:
                continue
    return out


def probed_at(summary: ProbeSummary) -> dt.datetime | None:
    """When the probe was saved (its ``date``, UTC)."""
    raw = summary.data.get("date")
    if not isinstance(raw, str):
        return None
    try:
        return dt.datetime.strptime(raw, "%Y%m%d-%H%M%S").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def median(values: list[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def load_of(summary: ProbeSummary) -> float | None:
    return median([c.load1 for c in summary_conditions(summary) if c.load1 is not None])


def runnable_of(summary: ProbeSummary) -> float | None:
    return median([c.runnable for c in summary_conditions(summary) if c.runnable is not None])


def other_cpu_of(summary: ProbeSummary) -> float | None:
    return median([c.other_cores for c in summary_conditions(summary) if c.other_cores is not None])


def _apart(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def gap(base: ProbeSummary, run: ProbeSummary) -> str:
    """The gap in time and conditions between a baseline's probe and a run's, in words ("" when none
    is known): ``probed 14 min apart; host load 0.5 against 2.1; other processes 0.1 against 1.3 cores``."""
    parts: list[str] = []
    a, b = probed_at(base), probed_at(run)
    seconds = abs((b - a).total_seconds()) if a is not None and b is not None else None
    la, lb = load_of(base), load_of(run)
    oa, ob = other_cpu_of(base), other_cpu_of(run)
    ra, rb = runnable_of(base), runnable_of(run)
    load_differs = la is not None and lb is not None and abs(la - lb) >= LOAD_GAP and abs(la - lb) >= 0.25 * max(la, lb)
    other_differs = oa is not None and ob is not None and abs(oa - ob) >= OTHER_CPU_GAP
    queue_differs = ra is not None and rb is not None and abs(ra - rb) >= RUNNABLE_GAP and abs(ra - rb) >= 0.25 * max(ra, rb)
    if seconds is not None and (seconds > TIME_GAP_S or load_differs or other_differs or queue_differs):
        parts.append(f"probed {_apart(seconds)} apart")
    if load_differs:
        parts.append(f"host load {la:.1f} against {lb:.1f}")
    if queue_differs:
        parts.append(f"{ra:.1f} against {rb:.1f} tasks wanting a CPU")
    if other_differs:
        parts.append(f"other processes used {oa:.1f} against {ob:.1f} cores")
    if la is None or lb is None:
        missing = [name for name, v in (("the baseline", la), ("the run", lb)) if v is None]
        if parts:
            parts.append(f"no host conditions recorded for {' and '.join(missing)}")
    return "; ".join(parts)
