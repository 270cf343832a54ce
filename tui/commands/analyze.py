"""``servelab analyze LOG``: a post-mortem of a saved engine log (stages, state, root cause, hint)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from servelab.engines.adapters.base import ENGINE_MODULES
from servelab.engines.errors import ServelabError
from servelab.engines.logs.files import analyze_file
from servelab.engines.logs.analysis import Analysis
from servelab.engines.runs.state import RunState


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("analyze", help="post-mortem of a saved engine log: stages, state, root cause and hint")
    p.add_argument("log", metavar="LOG", help="the log file")
    p.add_argument("--engine", choices=sorted(ENGINE_MODULES), help="the engine that wrote it (default: guessed from the log)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_analyze)


def cmd_analyze(args: argparse.Namespace) -> int:
    path = Path(args.log)
    if not path.is_file():
        raise ServelabError(f"{args.log}: no such file" if not path.exists() else f"{args.log}: not a file")
    try:
        analysis = analyze_file(path, args.engine)
    except OSError as exc:
        raise ServelabError(f"{args.log}: cannot read: {exc.strerror or exc}") from None
    if args.json:
        json.dump(analysis.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(analysis))
    return 0


def _progress(a: Analysis, name: str) -> str:
    p = a.stage(name).progress
    if p is None:
        return ""
    out = f"{p.done}/{p.total}"
    if p.rate:
        out += f"  {p.rate:.2f}/s"
    if p.eta_s is not None and p.done < p.total:
        out += f"  eta {p.eta_s:.0f} s"
    return out


def render(a: Analysis) -> str:
    """The human post-mortem: timeline, state, root cause with its hint, figures."""
    lines: list[str] = []
    ready = "was ready" if a.was_ready else "never ready"
    state = f"state {a.state} ({ready})" if a.engine_output else "no engine output"
    lines.append(f"engine {a.engine}   {state}   {a.lines} lines")
    if a.prefix is not None:
        p = a.prefix
        said = []
        if p.stripped:
            said.append(f"line prefix stripped from {p.stripped} lines ({', '.join(repr(e) for e in p.examples[:3]) or ', '.join(p.shapes)})")
        if p.dropped:
            said.append(f"{p.dropped} platform lines (a timestamp and names, no engine text) dropped")
        if said:
            lines.append("; ".join(said))
    lines.append("")
    lines.append("stages")
    for s in a.stages:
        when = ""
        if s.started_at or s.ended_at:
            when = f"{s.started_at or '?'} -> {s.ended_at or '...'}"
        parts = [f"  {s.name:<12}", f"{s.status:<8}", f"{when:<32}", _progress(a, s.name), s.detail]
        lines.append(" ".join(p for p in parts if p is not None).rstrip())
    rc = a.root_cause
    lines.append("")
    if rc is not None:
        what = rc.exception or "(exception not in the log)"
        proc = f" in {rc.process}" if rc.process else ""
        where = f" at {rc.where}" if rc.where else ""
        lines.append(f"root cause: {what}{proc}, line {rc.line}{where}")
        if rc.evidence:
            lines.append(f"evidence: {rc.evidence}")
        for m in rc.message.splitlines()[:12]:
            lines.append(f"  {m}")
    elif a.state is RunState.CRASHED:
        lines.append("root cause: not in this log")
    else:
        lines.append("root cause: none (no failure seen)")
    if a.hint:
        lines.append(f"hint: {a.hint}")
    if a.spec_decode is not None:
        sd = a.spec_decode
        rate = f"{sd.acceptance_rate * 100:.1f}%" if sd.acceptance_rate is not None else "n/a"
        mal = f"{sd.mean_acceptance_length:.2f}" if sd.mean_acceptance_length is not None else "n/a"
        pos = (", per position " + " ".join(f"{x:.2f}" for x in sd.per_position)) if sd.per_position else ""
        lines.append(f"spec decode (last figures): acceptance {rate}, mean acceptance length {mal}{pos}")
    if a.throughput_series:
        gens = [p.generation_tps for p in a.throughput_series if p.generation_tps]
        if gens:
            lines.append(f"generation throughput: last non-zero {gens[-1]:.1f} tok/s, peak {max(gens):.1f} tok/s ({len(a.throughput_series)} samples)")
    return "\n".join(lines) + "\n"
