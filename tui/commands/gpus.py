"""``servelab gpus HOST [--json]``: every GPU of a host, its memory and holders (servelab runs by id
and experiment, the rest foreign) and the campaign holding each GPU-set lock. A CPU host says "no GPU"."""

from __future__ import annotations

import argparse
import json

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.gpus.sample import sample_host
from servelab.engines.gpus.view import GpuView
from servelab.engines.runs.manager import Runs
from servelab.tui.commands.hostloop import run_on_hosts


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("gpus", help="what every GPU of a host holds: memory, processes (servelab run or foreign), GPU locks")
    p.add_argument("host")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_gpus)


def cmd_gpus(args: argparse.Namespace) -> int:
    async def body(runs: Runs) -> GpuView:
        runs.catalog.host(args.host)  # an unknown host is one clean line
        sample = await sample_host(runs.host(args.host))
        records = await runs.list(args.host) if sample.gpu and sample.processes else []
        return GpuView.of(sample, records)

    view = run_on_hosts(lambda: body(Runs(load_catalog(args.dir))))
    if args.json:
        print(json.dumps(view.to_json()))
    else:
        print("\n".join(view.lines()))
    return 0
