"""``servelab rehearse EXP``: the launch's start-up with dummy weights, up to one generation, then stop
(``engines/rehearsal``). Exit 0 when it reached ready and answered, 1 otherwise."""

from __future__ import annotations

import argparse
import json
import sys

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.runs.rehearsal import READY_TIMEOUT_S, rehearse
from servelab.engines.runs.manager import Runs
from servelab.tui.commands.hostloop import run_on_hosts


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("rehearse", help="rehearse a launch: the same start-up with dummy weights, one generation, then stop")
    p.add_argument("experiment")
    p.add_argument("--host", help="rehearse on this host instead of the experiment's (a multi-node experiment rehearses on its own hosts)")
    p.add_argument("--skip-preflight", action="store_true", help="start without servelab's preflight (as launch --skip-preflight)")
    p.add_argument("--timeout", type=float, default=READY_TIMEOUT_S, help=f"seconds to wait for ready (default {READY_TIMEOUT_S:.0f})")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_rehearse)


def cmd_rehearse(args: argparse.Namespace) -> int:
    def said(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    async def body() -> int:
        result = await rehearse(Runs(load_catalog(args.dir)), args.experiment, args.host, progress=said, ready_timeout=args.timeout, skip_preflight=args.skip_preflight)
        if args.json:
            print(json.dumps(result.to_json()), flush=True)
        else:
            print("\n".join(result.lines()), flush=True)
        return 0 if result.ok else 1

    return run_on_hosts(body)
