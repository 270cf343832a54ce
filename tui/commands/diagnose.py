"""``servelab diagnose RUN``: why acceptance is what it is on a live run, and what to try next."""

from __future__ import annotations

import argparse
import json
import sys

from servelab.engines.diagnosis.artifacts import diagnose_run
from servelab.engines.diagnosis.stored import DIAGNOSIS_JSON
from servelab.engines.diagnosis.report import lines
from servelab.tui.commands.probe import _run


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("diagnose", help="probe suite on a live speculative run: ranked causes of its acceptance and the next setting to try")
    p.add_argument("run")
    p.add_argument("--json", action="store_true", help=f"print {DIAGNOSIS_JSON} instead of the findings")
    p.set_defaults(func=cmd_diagnose)


def cmd_diagnose(args: argparse.Namespace) -> int:
    def say(msg: str) -> None:
        print(f"diagnose: {msg}", file=sys.stderr, flush=True)

    diag = _run(args, lambda runs: diagnose_run(runs, args.run, progress=say))
    if args.json:
        sys.stdout.write(json.dumps(diag.to_dict(), indent=2) + "\n")
    else:
        print("\n".join(lines(diag)))
        print(f"saved {DIAGNOSIS_JSON} in the run's folder")
    return 0
