"""Runs side by side: identity rows, metric rows, speedup against the baseline, and a verdict.

The verdict follows explicit rules, and each one is printed with its reason:

- a speedup is output tok/s of the run / output tok/s of the baseline experiment's latest probed
  run that asked the same prompts with the same max_tokens, model and concurrency; if none
  matches, the speedup is refused and the reason is shown;
- noise band = 1.4826 x the combined relative MAD of both runs x the speedup;
- speculation HELPS when speedup - band > 1.10, HURTS when speedup + band < 1.00, else INCONCLUSIVE;
  but a speedup measured on output the run's diagnosis found looping is "not meaningful on this
  output", whatever its size: the verdict and the diagnosis are one decision, one line per run,
  and every figure in it is the one the table shows (same value, same rounding);
- across engines, the configuration with the best conservative throughput (median - 1.4826 x MAD)
  wins; switching engine is warranted only when the winner's conservative throughput beats the
  other engine's best optimistic throughput by more than 10 %.
"""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from servelab.engines.verdict import fairness
from servelab.engines.diagnosis.verdict import diagnosis_clause, looping_share, suite_acceptance
from servelab.engines.probe.speedup import HELPS_ABOVE, HURTS_BELOW, NOT_MEANINGFUL, Speedup, SummaryLike, figure, baseline_speedup, conservative, mismatches, optimistic, speedup
from servelab.engines.errors import ServelabError
from servelab.engines.runs.loadtime import load_seconds
from servelab.engines.probe.stats import UNSTABLE_RATIO
from servelab.engines.probe.conditions import gap
from servelab.engines.probe.paired import load_paired
from servelab.engines.probe.artifacts import load_probe
from servelab.engines.probe.summary import ProbeSummary

if TYPE_CHECKING:
    from servelab.engines.diagnosis.model import Diagnosis
    from servelab.engines.runs.records import ResolvedRun, RunsAPI

SWITCH_MARGIN = 1.10
FORMATS = ("table", "markdown", "json", "csv")


@dataclass
class Row:
    """One line of the comparison: the cells as shown, and for a figure its numbers and direction."""

    label: str
    values: list[str]
    kind: str  # identity | metric
    #: The figure of each run as shown (rounded like the cell), None where the run has none.
    numbers: list[float | None] = field(default_factory=list)
    #: Which way is better: "higher", "lower", or None when the row has no direction.
    better: str | None = None

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1

    def best(self) -> int | None:
        """Index of the best run of a figure (None without a direction, or with fewer than two distinct numbers)."""
        known = {i: v for i, v in enumerate(self.numbers) if v is not None}
        if self.better is None or len(known) < 2 or len(set(known.values())) < 2:
            return None
        pick = max if self.better == "higher" else min
        top = pick(known.values())
        return next(i for i, v in known.items() if v == top)


@dataclass
class Comparison:
    runs: list[str]
    rows: list[Row]
    speedups: dict[str, Speedup]
    verdict: list[str] = field(default_factory=list)


# -- building the rows ----------------------------------------------------------------------------
def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt(v, digits) for v in value) if value else "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={str(v)[:12]}" for k, v in sorted(value.items())) if value else "-"
    return str(value)


def _nodes(value: Any) -> str:
    """A multi-node run's ``nodes``: ``n0 gpu-a server <run id>; n1 gpu-b worker <run id>``; ``-`` for one host."""
    if not isinstance(value, list) or not value:
        return "-"
    return "; ".join(
        f"n{n.get('rank')} {n.get('host')} {n.get('role')} {n.get('run')}" if isinstance(n, dict) else str(n) for n in value
    )


def _peak_total(value: object) -> int | None:
    """A run's peak GPU memory over all its GPUs (``gpu_peak_mib``: MiB by GPU index); None when not sampled (CPU hosts)."""
    if not isinstance(value, dict) or not value:
        return None
    mibs = [v for v in value.values() if isinstance(v, int) and not isinstance(v, bool)]
    return sum(mibs) if mibs else None


def _shown(value: object, digits: int) -> float | None:
    """A number as its cell shows it (so two equal-looking cells tie), None when not a number."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        return None
    return round(float(value), digits)


def _metric(summary: ProbeSummary, key: str, digits: int = 2, scale: float = 1.0) -> str:
    m, d = figure(summary, key)
    if m is None:
        return "-"
    text = f"{m * scale:.{digits}f}"
    if d:
        text += f" ±{d * scale:.{digits}f}"
    if summary.stat(key).get("unstable"):
        text += " (unstable)"
    return text


IDENTITY_ROWS: tuple[tuple[str, str], ...] = (
    ("experiment", "experiment"),
    ("engine", "engine"),
    ("engine version", "engine_version"),
    ("model", "model"),
    ("target weights", "target_fingerprint"),
    ("served model", "served_model"),
    ("spec method", "spec_method"),
    ("drafter", "drafter"),
    ("drafter weights", "drafter_fingerprint"),
    ("k (draft tokens)", "num_speculative_tokens"),
    ("tensor parallel", "tensor_parallel"),
    ("data parallel", "data_parallel"),
    ("expert parallel", "expert_parallel"),
    ("pipeline parallel", "pipeline_parallel"),
    ("patches", "patch_hashes"),
    ("prompt set", "prompt_set"),
    ("prompt-set hash", "prompt_set_hash"),
    ("host", "host"),
    ("nodes", "nodes"),
    ("GPUs", "gpus"),
    ("probed at", "date"),
)

#: (label, probe.json key, digits, scale, which way is better).
METRIC_ROWS: tuple[tuple[str, str, int, float, str | None], ...] = (
    ("acceptance rate (%)", "spec_decode_acceptance_rate", 1, 1.0, "higher"),
    ("acceptance length", "spec_decode_acceptance_length", 2, 1.0, "higher"),
    ("output tok/s", "output_throughput", 1, 1.0, "higher"),
    ("requests/s", "request_throughput", 2, 1.0, "higher"),
    ("TPOT p50 (ms)", "median_tpot_ms", 2, 1.0, "lower"),
    ("TPOT p99 (ms)", "p99_tpot_ms", 2, 1.0, "lower"),
    ("TTFT p50 (ms)", "median_ttft_ms", 1, 1.0, "lower"),
    ("TTFT p99 (ms)", "p99_ttft_ms", 1, 1.0, "lower"),
    # The same window by source: the probe's timed client, then the server's own histograms.
    ("TTFT mean, probe (ms)", "mean_ttft_ms", 1, 1.0, "lower"),
    ("TTFT mean, server histogram (ms)", "server_mean_ttft_ms", 1, 1.0, "lower"),
    ("TPOT mean, probe (ms)", "mean_tpot_ms", 2, 1.0, "lower"),
    ("ITL mean, server histogram (ms)", "server_mean_itl_ms", 2, 1.0, "lower"),
    ("ITL per chunk p50 (ms)", "median_itl_ms", 2, 1.0, "lower"),
    ("tokens per chunk", "mean_tokens_per_chunk", 2, 1.0, "higher"),
    ("requests ended by EOS", "eos_fraction", 2, 1.0, None),
    # What else the host did while each probe ran (median over its rounds).
    ("host load, 1 min", "host_load1", 1, 1.0, None),
    ("other processes' CPU (cores)", "host_other_cores", 2, 1.0, None),
)


#: The figures an "unstable" note names first: what a verdict rests on.
_UNSTABLE_FIRST = ("output_throughput", "spec_decode_acceptance_rate", "spec_decode_acceptance_length", "median_tpot_ms", "median_ttft_ms")


def unstable_note(keys: Sequence[str], most: int = 2) -> str:
    """``unstable across repeats (MAD > 10%): 13 figures: output tok/s · TPOT p50 and 11 more``:
    the count and the few that matter most (the verdict's figures first, then the table's order); "" when none."""
    if not keys:
        return ""
    labels = {key: label.removesuffix(" (ms)").removesuffix(" (%)") for label, key, *_ in METRIC_ROWS}
    order = [*_UNSTABLE_FIRST, *(key for _, key, *_ in METRIC_ROWS if key not in _UNSTABLE_FIRST)]
    ranked = sorted(dict.fromkeys(keys), key=lambda k: (order.index(k) if k in order else len(order), k))
    named = [labels.get(k, k) for k in ranked[:most]]
    rest = len(ranked) - len(named)
    head = f"unstable across repeats (MAD > {UNSTABLE_RATIO:.0%}): "
    if rest <= 0:
        return head + " · ".join(named)
    return head + f"{len(ranked)} figures: " + " · ".join(named) + f" and {rest} more"


def build(columns: Sequence[tuple[str, SummaryLike]], speedups: dict[str, Speedup], diagnoses: Mapping[str, Diagnosis] | None = None) -> Comparison:
    """Rows and verdict for probed runs given as (run id, probe.json) pairs (with their diagnoses, when made)."""
    runs = [r for r, _ in columns]
    sums = [ProbeSummary.of(s) for _, s in columns]
    rows: list[Row] = []
    for label, key in IDENTITY_ROWS:
        fmt = _nodes if key == "nodes" else _fmt
        vals = [fmt(s.identity.get(key)) for s in sums]
        rows.append(Row(label, vals, "identity"))
    settings = [s.identity.get("resolved_settings") or {} for s in sums]
    if any(s.identity.get("settings_source") for s in sums):
        rows.append(Row("resolved settings from", [_fmt(s.identity.get("settings_source")) for s in sums], "identity"))
    for key in dict.fromkeys(k for st in settings for k in st):  # what each server said it resolved
        rows.append(Row(f"resolved: {fairness.label(key)}", [str(st.get(key, "-")) for st in settings], "identity"))
    rows.append(Row("max_tokens", [_fmt(s.max_tokens) for s in sums], "identity"))
    rows.append(Row("concurrency", [_fmt(s.max_concurrency) for s in sums], "identity"))
    rows.append(Row("repeats", [_fmt(s.repeats) for s in sums], "identity"))
    stages: list[str] = []
    for s in sums:
        for name in s.load_stages_s or {}:
            if name not in stages:
                stages.append(name)
    loads = [load_seconds(None, s) for s in sums]
    rows.append(Row("load: start to ready (s)", [_fmt(v, 1) for v in loads], "metric", [_shown(v, 1) for v in loads], "lower"))
    for name in stages:
        secs = [(s.load_stages_s or {}).get(name) for s in sums]
        rows.append(Row(f"load: {name} (s)", [_fmt(v, 1) for v in secs], "metric", [_shown(v, 1) for v in secs], "lower"))
    for label, key, digits, scale, better in METRIC_ROWS:
        figures = [figure(s, key)[0] for s in sums]
        shown = [_shown(m * scale if m is not None else None, digits) for m in figures]
        rows.append(Row(label, [_metric(s, key, digits, scale) for s in sums], "metric", shown, better))
    peaks = [_peak_total(s.identity.get("gpu_peak_mib")) for s in sums]
    rows.append(Row("peak GPU memory, all GPUs (MiB)", [_fmt(v) for v in peaks], "metric", [_shown(v, 0) for v in peaks], "lower"))
    rows.append(Row("per-position acceptance", [_fmt(s.figure("spec_decode_per_position_acceptance_rates")) for s in sums], "metric"))
    cats: list[str] = []
    for s in sums:
        cats.extend(c for c in s.per_category if c not in cats)
    for cat in cats:
        per_cat = [(s.per_category.get(cat) or {}).get("tokens_per_chunk") for s in sums]
        rows.append(Row(f"tokens/chunk: {cat}", [_fmt(v) for v in per_cat], "metric"))
    rows.append(Row("acceptance source", [_fmt(s.acceptance_source) for s in sums], "metric"))
    rows.append(Row("probe latency source", [_fmt(s.latency_source) for s in sums], "metric"))
    rows.append(Row("server latency source", [_fmt(s.server_latency_source) for s in sums], "metric"))
    sp_vals = []
    for run in runs:
        sp = speedups.get(run)
        if sp is None:
            sp_vals.append("- (no baseline)")
        elif sp.value is None:
            sp_vals.append(sp.reason)
        else:
            sp_vals.append(f"{sp.value:.2f}x ±{sp.band:.2f}")
    sp_nums = [_shown(sp.value, 2) if sp is not None else None for sp in (speedups.get(run) for run in runs)]
    rows.append(Row("speedup vs baseline", sp_vals, "metric", sp_nums, "higher"))
    if diagnoses:
        speedups = {run: replace(sp, looping=looping_share(diagnoses.get(run))) for run, sp in speedups.items()}
    comp = Comparison(runs=runs, rows=rows, speedups=speedups)
    comp.verdict = verdict(list(zip(runs, sums, strict=True)), speedups, diagnoses, rows)
    return comp


# -- the verdict ----------------------------------------------------------------------------------
def _row_number(rows: Sequence[Row] | None, label: str, index: int) -> float | None:
    row = next((r for r in rows or () if r.label == label), None)
    return row.numbers[index] if row is not None and index < len(row.numbers) else None


def _table_acceptance(rows: Sequence[Row] | None, index: int, s: ProbeSummary) -> tuple[str | None, str]:
    """The run's acceptance rate and length as the table's cells round them: ("66.8%", "; acceptance rate 66.8%, acceptance length 3.42")."""
    rate = _row_number(rows, "acceptance rate (%)", index) if rows is not None else _shown(s.acceptance_rate, 1)
    length = _row_number(rows, "acceptance length", index) if rows is not None else _shown(s.acceptance_length, 2)
    rate_txt = f"{rate:.1f}%" if rate is not None else None
    if rate_txt is None and length is None:
        return None, ""
    return rate_txt, f"; acceptance rate {rate_txt or '-'}" + (f", acceptance length {length:.2f}" if length is not None else "")


def verdict(
    columns: Sequence[tuple[str, SummaryLike]],
    speedups: dict[str, Speedup],
    diagnoses: Mapping[str, Diagnosis] | None = None,
    rows: Sequence[Row] | None = None,
) -> list[str]:
    """Each conclusion with the rule and the numbers behind it: one line per run, its diagnosis in it.

    ``rows``: the table the verdict sits under; its figures are quoted as its cells round them."""
    lines: list[str] = []
    diagnoses = diagnoses or {}
    for index, (run, summary) in enumerate(columns):
        s = ProbeSummary.of(summary)
        sp = speedups.get(run)
        diag = diagnoses.get(run)
        if sp is not None and diag is not None and sp.looping is None:
            sp = replace(sp, looping=looping_share(diag))
        rate_txt, acc_txt = _table_acceptance(rows, index, s)
        diagnosed = f"; diagnosis: {diagnosis_clause(diag, rate_txt or suite_acceptance(diag))}" if diag is not None else ""
        if sp is None:
            if diag is not None:
                lines.append(f"{run}: no speed verdict (no baseline to measure against){diagnosed}")
            continue
        if sp.value is None:
            lines.append(f"{run}: no verdict on speculation: {sp.reason}{diagnosed}")
            continue
        v = sp.verdict
        low, high = sp.value - (sp.band or 0), sp.value + (sp.band or 0)
        caveat = f"; CAVEAT: {sp.cross_host}, so hardware and load may differ" if sp.cross_host else ""
        caveat += unpaired_note(run, sp)
        if v == NOT_MEANINGFUL:
            lines.append(
                f"{run}: speedup vs {sp.baseline_run} {NOT_MEANINGFUL}: {sp.value:.2f}x was measured on repetitive output "
                f"(the diagnosis found the output looping), which any drafter predicts well; probe real prompts before "
                f"judging speculation{acc_txt}{caveat}{diagnosed}"
            )
        else:
            rule = f"speedup {sp.value:.2f}x (noise band {low:.2f}-{high:.2f}x); {speed_words(sp.value, low, high)}"
            lines.append(f"{run}: speculation {str(v).upper()} vs {sp.baseline_run}: {rule}{acc_txt}{caveat}{diagnosed}")
        if sp.paired is not None:
            value, low, high = sp.paired.band
            lines.append(sp.paired.line(speed_words(value, low, high)))
        if "output_throughput" in s.unstable:
            lines.append(f"{run}: output tok/s is unstable (MAD > 10 % of median): repeat the probe before deciding")
    lines.extend(engine_verdict(columns))
    if not lines:
        lines.append(no_verdict_reason(columns, speedups))
    return lines


def unpaired_note(run: str, sp: Speedup) -> str:
    """What an unpaired speedup rests on, never silently: the gap between its probes, and the paired
    measurement that removes it."""
    offer = f"servelab ab {sp.baseline_run} {run}"
    if sp.paired is not None:
        return f"; unpaired probes{': ' + sp.gap if sp.gap else ''} (the paired measurement follows)"
    if sp.gap:
        return f"; UNPAIRED: {sp.gap}, so part of the difference may be the host's: measure them paired ({offer})"
    return f"; unpaired probes, each band from its own repeats ({offer} pairs them)"


def speed_words(value: float, low: float, high: float) -> str:
    """What a speedup and its band say, in plain words and without a double negative."""
    gain, loss = f"{HELPS_ABOVE:.2f}x", f"{HURTS_BELOW:.2f}x"
    value = round(value, 2)  # as the sentence shows it: "1.00x" is never "slower"
    if low > HELPS_ABOVE:
        return f"faster: even the band's low end is above the {gain} that calls it a gain"
    if high < HURTS_BELOW:
        return f"slower: even the band's high end is below {loss}"
    if value >= HELPS_ABOVE:
        return f"faster, but the band reaches below the {gain} that would call it a gain"
    if value == HURTS_BELOW:
        return "about as fast as the baseline, within its band"
    if value >= HURTS_BELOW:
        return f"faster by less than the {gain} that would call it a gain"
    return f"slower, but the band reaches above {loss}, so it may be no loss"


def no_verdict_reason(columns: Sequence[tuple[str, SummaryLike]], speedups: Mapping[str, Speedup]) -> str:
    """Why a comparison has no verdict at all (never an empty "Verdict:")."""
    runs = [run for run, _ in columns]
    if len(runs) == 1:
        run, summary = columns[0]
        base = ProbeSummary.of(summary).baseline_experiment
        if base:
            return f"no verdict: {run} was compared with nothing; its baseline {base} has no comparable probed run here"
        return f"no verdict: {run} alone, and its experiment names no baseline: compare it with another probed run (servelab compare {run} RUN)"
    return (f"no verdict: none of {', '.join(runs)} names a baseline experiment and they share one engine: "
            "set baseline in a speculative experiment, or compare runs of two engines")


def engine_verdict(columns: Sequence[tuple[str, SummaryLike]]) -> list[str]:
    """Across engines: the best configuration and whether switching engine is warranted."""
    by_engine: dict[str, list[tuple[str, ProbeSummary]]] = {}
    for run, summary in columns:
        s = ProbeSummary.of(summary)
        engine = s.engine or "?"
        by_engine.setdefault(str(engine), []).append((run, s))
    if len(by_engine) < 2:
        return []
    first = columns[0][1]
    for run, other in columns[1:]:
        why = mismatches(first, other)
        if why:
            return [f"engines: no verdict across engines: {run} vs {columns[0][0]}: " + ", ".join(why)]
        fa, fo = ProbeSummary.of(first), ProbeSummary.of(other)
        sa, so = fa.identity.get("resolved_settings") or {}, fo.identity.get("resolved_settings") or {}
        need = fairness.need_tokens(fa.max_concurrency, [sa, so], fa.max_tokens)
        unfair = fairness.not_comparable(sa, so, need)
        if unfair and ProbeSummary.of(other).engine != ProbeSummary.of(first).engine:
            return [f"engines: {columns[0][0]} vs {run}: {unfair}; servelab compare {columns[0][0]} {run} --align writes the aligned twin"]
    best: dict[str, tuple[str, ProbeSummary, float]] = {}
    for engine, items in by_engine.items():
        scored = [(run, s, score) for run, s in items if (score := conservative(s)) is not None]
        if scored:
            best[engine] = max(scored, key=lambda t: t[2])
    if len(best) < 2:
        return ["engines: no verdict across engines: missing output throughput"]
    winner_engine, (w_run, w_sum, w_cons) = max(best.items(), key=lambda kv: kv[1][2])
    lines = [
        f"engines: best configuration is {w_run} ({winner_engine}) with {w_sum.output_throughput:.1f} output tok/s "
        f"(conservative {w_cons:.1f} = median - 1.4826 x MAD)"
    ]
    for engine, (run, s, _cons) in best.items():
        if engine == winner_engine:
            continue
        opt = optimistic(s) or 0.0
        ratio = w_cons / opt if opt > 0 else math.inf
        if ratio > SWITCH_MARGIN:
            lines.append(
                f"engines: switching from {engine} to {winner_engine} is WARRANTED: {w_run}'s conservative throughput is "
                f"{ratio:.2f}x {run}'s optimistic throughput (> {SWITCH_MARGIN:.2f}x)"
            )
        else:
            lines.append(
                f"engines: switching from {engine} to {winner_engine} is NOT warranted: {w_run}'s conservative throughput is "
                f"{ratio:.2f}x {run}'s optimistic throughput (needs > {SWITCH_MARGIN:.2f}x)"
            )
    return lines


# -- output formats -------------------------------------------------------------------------------
def wrap_verdict(lines: Sequence[str], width: int) -> list[str]:
    """Each verdict line as a bullet wrapped at ``width`` columns between words (never cut)."""
    out: list[str] = []
    for line in lines:
        out.extend(textwrap.wrap(line, width=max(width, 20), initial_indent="  - ", subsequent_indent="    ",
                                 break_long_words=False, break_on_hyphens=False) or ["  -"])
    return out


def render(comp: Comparison, fmt: str = "table", diff_only: bool = False, width: int | None = None) -> str:
    """The comparison as table (rich), markdown, json or csv; ``width``: the table's verdict wraps at
    it (default: the terminal's width)."""
    if fmt not in FORMATS:
        raise ServelabError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    rows = [r for r in comp.rows if not (diff_only and r.kind == "identity" and not r.differs)]
    if fmt == "json":
        data = {
            "runs": comp.runs,
            "rows": [{"label": r.label, "kind": r.kind, "values": dict(zip(comp.runs, r.values, strict=True))} for r in rows],
            "speedups": {
                run: {"value": sp.value, "band": sp.band, "baseline_run": sp.baseline_run, "verdict": sp.verdict, "reason": sp.reason,
                      "gap": sp.gap, "paired": sp.paired.to_dict() | {"speedup": sp.paired.band} if sp.paired is not None else None}
                for run, sp in comp.speedups.items()
            },
            "verdict": comp.verdict,
        }
        return json.dumps(data, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["row", *comp.runs])
        for r in rows:
            w.writerow([r.label, *r.values])
        for line in comp.verdict:
            w.writerow(["verdict", line])
        return buf.getvalue()
    if fmt == "markdown":
        out = ["| | " + " | ".join(comp.runs) + " |", "|---|" + "---|" * len(comp.runs)]
        for r in rows:
            cells = [v.replace("|", "\\|") for v in r.values]
            out.append(f"| {r.label} | " + " | ".join(cells) + " |")
        out += ["", "**Verdict**", ""] + [f"- {line}" for line in comp.verdict]
        return "\n".join(out) + "\n"
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Text, never markup: advice names config sections ("[speculative] num_tokens = 2") that rich would read as tags
    table = Table(box=None, header_style="bold", show_lines=False)
    table.add_column("")
    for run in comp.runs:
        table.add_column(Text(run), overflow="fold")
    last_kind = None
    for r in rows:
        if last_kind is not None and r.kind != last_kind:
            table.add_section()
        last_kind = r.kind
        table.add_row(Text(r.label), *(Text(v) for v in r.values))
    console = Console(file=io.StringIO(), width=max(120, 40 + 34 * len(comp.runs)), force_terminal=False, color_system=None,
                      markup=False, highlight=False)
    console.print(table)
    text: str = console.file.getvalue()  # type: ignore[attr-defined]
    wrap_at = width if width is not None else shutil.get_terminal_size((80, 24)).columns
    return text + "Verdict:\n" + "".join(f"{line}\n" for line in wrap_verdict(comp.verdict, wrap_at))


# -- from the runs' folders -----------------------------------------------------------------------
async def compare_runs(runs: RunsAPI, run_ids: Sequence[str], baseline_run: str | None = None) -> Comparison:
    """Load every run's probe.json and build the comparison."""
    from servelab.engines.probe.artifacts import load_probe

    if not run_ids:
        raise ServelabError("compare needs at least one run id")
    columns: list[tuple[str, ProbeSummary]] = []
    resolved: dict[str, ResolvedRun] = {}
    for run_id in run_ids:
        resolved[run_id] = await runs.resolve(run_id)  # once: the probe and the diagnosis are its head's
        probe = await load_probe(runs, resolved[run_id])
        if probe is None:
            raise ServelabError(f"run {run_id} has no probe results (run 'servelab probe {run_id}' while it serves)")
        columns.append((run_id, probe))
    speedups: dict[str, Speedup] = {}
    for run_id, summary in columns:
        if run_id == baseline_run:
            continue
        sp = await baseline_speedup(runs, run_id, summary, baseline_run)
        if sp is not None:
            speedups[run_id] = await with_paired(runs, resolved[run_id], sp, summary)
    return build(columns, speedups, await run_diagnoses(runs, run_ids, resolved))


async def with_paired(runs: RunsAPI, run: ResolvedRun, sp: Speedup, summary: ProbeSummary) -> Speedup:
    """``sp`` with the run's paired measurement (``ab.json``) when it was made against a run of the same
    baseline experiment with the same prompts and max_tokens."""
    paired = await load_paired(runs, run)
    if paired is None or paired.prompt_set_hash != summary.figure("prompt_set_hash") or paired.max_tokens != summary.max_tokens:
        return sp
    base_exp = summary.baseline_experiment
    same_base = paired.base_run == sp.baseline_run or (bool(base_exp) and paired.base_run.startswith(f"{base_exp}-"))
    return replace(sp, paired=paired) if same_base else sp


async def run_diagnoses(runs: RunsAPI, run_ids: Sequence[str], resolved: Mapping[str, ResolvedRun] | None = None) -> dict[str, Diagnosis]:
    """Each diagnosed run's stored diagnosis: its verdict line then names the likely cause and the next setting.
    ``resolved``: the runs as resolved before (a run missing from it is resolved here)."""
    from servelab.engines.diagnosis.stored import load_diagnosis

    out: dict[str, Diagnosis] = {}
    for run_id in run_ids:
        target = (resolved or {}).get(run_id) or await runs.resolve(run_id)
        diag = await load_diagnosis(runs, target.head)  # a multi-node run's diagnosis is its head's
        if diag is not None:
            out[run_id] = diag
    return out
