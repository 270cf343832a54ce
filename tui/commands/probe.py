"""``servelab probe RUN`` and ``servelab compare RUN...``: the acceptance probe and the verdict."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import Any

from servelab.engines.verdict.align import write_twins
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.verdict.compare import FORMATS, compare_runs, render, speed_words, wrap_verdict
from servelab.engines.probe.paired import AB_JSON, measure
from servelab.engines.probe.artifacts import PROBE_JSON, REQUESTS_JSONL, probe_run, wait_for_ready
from servelab.engines.nodes.resolve import resolve_run
from servelab.engines.runs.manager import Runs
from servelab.tui.commands.hostloop import run_on_hosts

#: Figures the human summary of ``probe`` prints: (label, key, digits).
SUMMARY: tuple[tuple[str, str, int], ...] = (
    ("output tok/s", "output_throughput", 1),
    ("requests/s", "request_throughput", 2),
    ("TTFT p50 / p99 (ms)", "median_ttft_ms", 1),
    ("TPOT p50 / p99 (ms)", "median_tpot_ms", 2),
    ("acceptance rate (%)", "spec_decode_acceptance_rate", 1),
    ("acceptance length", "spec_decode_acceptance_length", 2),
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("probe", help="measure acceptance and speed of a running server; results go to the run's folder")
    p.add_argument("run")
    p.add_argument("--json", action="store_true", help="print probe.json instead of a summary")
    p.add_argument("--wait", action="store_true", help="first wait until the log analysis says the server is ready")
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("compare", help="probed runs side by side, speedup vs baseline, and a verdict")
    p.add_argument("runs", nargs="+", metavar="RUN")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--diff-only", action="store_true", help="identity rows only where the runs differ")
    p.add_argument("--baseline-run", metavar="RUN", help="measure speedups against this probed run (any host; the verdict marks a cross-host pair)")
    p.add_argument("--align", action="store_true",
                   help="write <experiment>-aligned.toml for each run whose resolved settings make it not comparable with the first run")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("ab", help="paired measurement: time CAND against BASE in interleaved rounds (A B B A ...), speedup from per-pair ratios")
    p.add_argument("base", metavar="BASE", help="the baseline: a run id, or an experiment (its latest run; launched when it does not serve)")
    p.add_argument("cand", metavar="CAND", help="the candidate: a run id or an experiment, likewise")
    p.add_argument("--pairs", type=int, default=6, help="pairs of rounds (default 6); each round sends the candidate's [probe] prompts once")
    p.add_argument("--json", action="store_true", help="print ab.json instead of the verdict")
    p.set_defaults(func=cmd_ab)


def _run(args: argparse.Namespace, body: Any) -> Any:
    return run_on_hosts(lambda: body(Runs(load_catalog(args.dir))))


def cmd_probe(args: argparse.Namespace) -> int:
    def say(msg: str) -> None:
        print(f"probe: {msg}", file=sys.stderr, flush=True)

    async def body(runs: Runs) -> int:
        target = await resolve_run(runs, args.run)  # once: the wait and the probe act on the run it names
        if args.wait:
            say("waiting for the server to be ready")
            await wait_for_ready(runs, target)
        result = await probe_run(runs, target, progress=say)
        s = result.summary
        if args.json:
            sys.stdout.write(result.summary_json())
            return 0
        print(f"{args.run}: {s.figure('num_prompts')} prompts ({s.figure('prompt_set')}, hash {s.figure('prompt_set_hash')}), max_tokens {s.max_tokens}, {s.repeats} repeats")
        for label, key, digits in SUMMARY:
            value = s.figure(key)
            if value is None:
                continue
            text = f"{value:.{digits}f}"
            if key in ("median_ttft_ms", "median_tpot_ms"):
                p99 = s.figure(key.replace("median_", "p99_"))
                text += f" / {p99:.{digits}f}" if p99 is not None else ""
            mad = s.stat(key).get("mad")
            if mad:
                text += f"  (MAD {mad:.{digits}f}{', unstable' if key in s.unstable else ''})"
            print(f"  {label:<22} {text}")
        if s.per_position:
            print("  per-position           " + " ".join(f"{v:.2f}" for v in s.per_position))
        if s.figure("server_mean_ttft_ms") is not None or s.server_mean_itl_ms is not None:
            def ms(key: str, digits: int) -> str:
                value = s.figure(key)
                return "-" if value is None else f"{value:.{digits}f}"

            print(f"  TTFT mean probe/server {ms('mean_ttft_ms', 1)} / {ms('server_mean_ttft_ms', 1)}  (server: its own histogram)")
            print(f"  TPOT/ITL probe/server  {ms('mean_tpot_ms', 2)} / {ms('server_mean_itl_ms', 2)}")
        if s.latency_source:
            print(f"  times from             {s.latency_source}")
        if s.acceptance_source:
            print(f"  acceptance from        {s.acceptance_source}")
        elif s.figure("acceptance"):
            print(f"  acceptance             {s.figure('acceptance')}")
        print(f"saved {PROBE_JSON} and {REQUESTS_JSONL} in the run's folder")
        return 0

    return int(_run(args, body))


def cmd_compare(args: argparse.Namespace) -> int:
    async def body(runs: Runs) -> str:
        comp = await compare_runs(runs, args.runs, baseline_run=args.baseline_run)
        out = render(comp, args.format, diff_only=args.diff_only)
        if args.align:
            twins = await write_twins(runs, args.runs)
            for t in twins:
                print(f"wrote {t.path}: {t.run} was {t.why}" + (f"; not aligned: {'; '.join(t.left)}" if t.left else ""), file=sys.stderr)
            if not twins:
                print("nothing to align: no run's resolved settings make it not comparable with the first", file=sys.stderr)
        return out

    out = _run(args, body)
    sys.stdout.write(out)
    return 0




def cmd_ab(args: argparse.Namespace) -> int:
    def say(msg: str) -> None:
        print(f"ab: {msg}", file=sys.stderr, flush=True)

    async def body(runs: Runs) -> str:
        result = await measure(runs, args.base, args.cand, pairs=args.pairs, progress=say)
        if args.json:
            return json.dumps(result.to_dict(), indent=1) + "\n"
        value, low, high = result.band
        lines = [result.line(speed_words(value, low, high))]
        for r in result.rounds:
            lines.append(f"  pair {r.pair + 1} ({' '.join(r.order)}): {r.base_tput:.1f} vs {r.cand_tput:.1f} output tok/s = {r.ratio:.2f}x; "
                         f"host load {r.base.load1 if r.base.load1 is not None else '-'} / {r.cand.load1 if r.cand.load1 is not None else '-'}")
        lines.append(f"saved {AB_JSON} in {result.cand_run}'s folder; 'servelab compare {result.cand_run}' shows it beside the unpaired verdict")
        return "\n".join(wrap_verdict(lines[:1], shutil.get_terminal_size((80, 24)).columns)) + "\n" + "\n".join(lines[1:]) + "\n"

    sys.stdout.write(_run(args, body))
    return 0
