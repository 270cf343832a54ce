"""``servelab history EXP``: an experiment's runs over time, each with who launched it, when, its
load time, acceptance, tok/s and verdict (``engines.runs.history.run_history``); ``--json`` too."""

from __future__ import annotations

import argparse
import json

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.errors import ServelabError
from servelab.engines.runs.history import HistoryRow, accept_text, run_history, speedup_text
from servelab.engines.runs.loadtime import load_text
from servelab.engines.runs.manager import Runs
from servelab.tui.commands.hostloop import run_on_hosts

COLUMNS = ("RUN", "STARTED", "BY", "STATE", "LOAD", "ACCEPT (RATE · LEN)", "TOK/S", "SPEEDUP", "VERDICT", "TARGET · DRAFTER")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("history", help="an experiment's runs over time: who, when, load, acceptance, tok/s, verdict")
    p.add_argument("experiment")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_history)


def _cells(r: HistoryRow) -> list[str]:
    return [
        r.run_id,
        r.started_at.replace("T", " ")[:19],
        r.owner or "-",
        str(r.state) + (" (rehearsal)" if r.rehearsal else ""),
        load_text(r.load_s) or "-",
        accept_text(r.acceptance_rate, r.acceptance_length) or "-",
        f"{r.output_throughput:.1f}" if r.output_throughput is not None else "-",
        speedup_text(r.speedup, r.speedup_band) or "-",
        r.verdict or "-",
        f"{r.target_fingerprint[:12] or '-'} · {r.drafter_fingerprint[:12] or '-'}",
    ]


def cmd_history(args: argparse.Namespace) -> int:
    async def body(runs: Runs) -> list[HistoryRow]:
        runs.catalog.get(args.experiment)  # an unknown name is one line
        return await run_history(runs, args.experiment)

    def opened() -> Runs:
        return Runs(load_catalog(args.dir))

    rows = run_on_hosts(lambda: body(opened()))
    if args.json:
        print(json.dumps({"experiment": args.experiment, "runs": [r.to_json() for r in rows]}, indent=2))
        return 0
    if not rows:
        raise ServelabError(f"no runs of {args.experiment} yet (start one: servelab launch {args.experiment})")
    table = [list(COLUMNS), *(_cells(r) for r in rows)]
    widths = [max(len(c) for c in col) for col in zip(*table, strict=True)]
    for cells in table:
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    return 0
