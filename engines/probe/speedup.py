"""A run's speedup against its baseline: the output tok/s ratio, its noise band and the refusal that
names what differs (the rules are in ``engines/verdict/compare.py``'s docstring). The probe's own
figures against each other; the diagnosis and the verdict read it, and it imports neither.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from servelab.engines.errors import ServelabError
from servelab.engines.probe.artifacts import load_probe
from servelab.engines.probe.conditions import gap
from servelab.engines.probe.paired import PairedResult
from servelab.engines.probe.stats import MAD_TO_SIGMA
from servelab.engines.probe.summary import ProbeSummary

if TYPE_CHECKING:
    from servelab.engines.runs.records import RunsAPI

#: The verdict on a speedup measured on looping output.
NOT_MEANINGFUL = "not meaningful on this output"

HELPS_ABOVE = 1.10
HURTS_BELOW = 1.00

#: Settings that must be equal for a speedup to mean anything: (label, getter).
_MATCH_KEYS: tuple[tuple[str, str], ...] = (
    ("prompts", "prompt_set_hash"),
    ("max_tokens", "max_tokens"),
    ("model", "model"),
    ("concurrency", "max_concurrency"),
)


#: A probe summary, or (from a script or a test) its keys as a plain mapping.
SummaryLike = Mapping[str, Any]


def _setting(summary: ProbeSummary, key: str) -> Any:
    return summary.model if key == "model" else summary.figure(key)


def mismatches(a: SummaryLike, b: SummaryLike) -> list[str]:
    """Why two probes cannot be compared (empty when they can)."""
    out = []
    sa, sb = ProbeSummary.of(a), ProbeSummary.of(b)
    for label, key in _MATCH_KEYS:
        va, vb = _setting(sa, key), _setting(sb, key)
        if va != vb:
            out.append(f"different {label} ({va} vs {vb})")
    return out


def figure(summary: ProbeSummary, key: str) -> tuple[float | None, float]:
    """(median, MAD) of a figure; MAD 0 when the file has no stats for it."""
    value = summary.figure(key)
    if not isinstance(value, (int, float)):
        return None, 0.0
    mad = summary.stat(key).get("mad")
    return float(value), float(mad) if isinstance(mad, (int, float)) and not math.isnan(mad) else 0.0


def conservative(summary: SummaryLike, key: str = "output_throughput") -> float | None:
    m, d = figure(ProbeSummary.of(summary), key)
    return None if m is None else m - MAD_TO_SIGMA * d


def optimistic(summary: SummaryLike, key: str = "output_throughput") -> float | None:
    m, d = figure(ProbeSummary.of(summary), key)
    return None if m is None else m + MAD_TO_SIGMA * d


@dataclass(frozen=True)
class Speedup:
    """Speedup of one run against its baseline, or why there is none."""

    value: float | None
    band: float | None = None
    baseline_run: str | None = None
    reason: str = ""
    #: Set when the baseline ran on another host than the run (chosen with ``--baseline-run``).
    cross_host: str = ""
    #: The share of distinct output bigrams when the run's diagnosis found its output looping.
    looping: float | None = None
    #: The gap in time and host conditions between the two probes (``conditions.gap``; "" when none is known).
    gap: str = ""
    #: The paired measurement of this run against the same baseline (``servelab ab``), when one was made.
    paired: PairedResult | None = None

    @property
    def verdict(self) -> str | None:
        if self.value is None or self.band is None:
            return None
        if self.looping is not None:
            return NOT_MEANINGFUL
        if self.value - self.band > HELPS_ABOVE:
            return "helps"
        if self.value + self.band < HURTS_BELOW:
            return "hurts"
        return "inconclusive"


def speedup(run: SummaryLike, base: SummaryLike, base_run: str) -> Speedup:
    """Output tok/s ratio with its noise band, or a refusal naming what differs."""
    why = mismatches(run, base)
    if why:
        return Speedup(None, baseline_run=base_run, reason=f"refused against {base_run}: " + ", ".join(why))
    (r, rd), (b, bd) = figure(ProbeSummary.of(run), "output_throughput"), figure(ProbeSummary.of(base), "output_throughput")
    if not r or not b:
        return Speedup(None, baseline_run=base_run, reason="no output throughput to compare")
    value = r / b
    rel = math.sqrt((rd / r) ** 2 + (bd / b) ** 2)
    return Speedup(value, MAD_TO_SIGMA * rel * value, base_run, "", gap=gap(ProbeSummary.of(base), ProbeSummary.of(run)))



async def baseline_speedup(runs: RunsAPI, run_id: str, summary: ProbeSummary, baseline_run: str | None = None) -> Speedup | None:
    """Speedup against the baseline experiment's latest probed run on the same host with the same
    prompts and settings, or against ``baseline_run`` when the user chose one (any host: the verdict
    then carries the cross-host caveat). A refusal says where it looked and what it found."""
    host = summary.host
    if baseline_run is not None:
        probe = await load_probe(runs, baseline_run)
        if probe is None:
            raise ServelabError(f"baseline run {baseline_run} has no probe results (run 'servelab probe {baseline_run}' while it serves)")
        sp = speedup(summary, probe, baseline_run)
        base_host = probe.host
        if host and base_host and base_host != host:
            sp = replace(sp, cross_host=f"baseline {baseline_run} ran on {base_host}, this run on {host}")
        return sp
    base_exp = summary.baseline_experiment
    if not base_exp:
        return None
    same_host = host if host in runs.catalog.hosts.names() else None
    listed = await runs.list(same_host)
    candidates = sorted((r for r in listed if r.experiment == base_exp and not r.rehearsal), key=lambda r: (r.started_at, r.id), reverse=True)
    first_reason = ""
    for rec in candidates:
        probe = await load_probe(runs, rec.id)
        if probe is None:
            continue
        sp = speedup(summary, probe, rec.id)
        if sp.value is not None:
            return sp
        first_reason = first_reason or sp.reason
    if first_reason:
        return Speedup(None, reason=first_reason + f" (no probed run of {base_exp} with the same prompts and settings on {host})")
    where = f" on {same_host}" if same_host else ""
    elsewhere: dict[str, str] = {}
    if same_host is not None:  # say what the other hosts hold, so the user can choose one knowingly
        for rec in sorted((r for r in await runs.list() if r.experiment == base_exp and not r.rehearsal and r.host != same_host), key=lambda r: (r.started_at, r.id), reverse=True):
            if rec.host not in elsewhere and await load_probe(runs, rec.id) is not None:
                elsewhere[rec.host] = rec.id
    down = f"; {', '.join(sorted(runs.unreachable))} could not be asked" if runs.unreachable else ""
    if elsewhere:
        found = ", ".join(f"{h} ({r})" for h, r in sorted(elsewhere.items()))
        pick = next(iter(elsewhere.values()))
        return Speedup(
            None,
            reason=f"baseline {base_exp} has a probed run on {found}, not on {same_host}; speedups compare runs on the same host "
            f"(choose one anyway with --baseline-run {pick}){down}",
        )
    return Speedup(None, reason=f"refused: no probed run of baseline experiment {base_exp}{where} (looked on {', '.join(runs.catalog.hosts.names()) if not same_host else same_host}){down}")
