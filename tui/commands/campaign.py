"""``servelab campaign plan|start|status|stop|resume|report``: a campaign's plan, and its queue on the host.

Thin: planning is ``engines.campaign.plan``, the queue is ``engines.campaign.control`` (which
starts the supervisor on the host). Every expected failure is a ``ServelabError`` (one line, exit 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from servelab.engines.campaign import control
from servelab.engines.campaign.check import load_checked
from servelab.engines.campaign.control import CampaignStatus
from servelab.engines.campaign.plan import Plan, describe, plan_with_history
from servelab.engines.campaign.plots import plot_series, write_plots
from servelab.engines.campaign.report import FORMATS, build_report, render
from servelab.engines.runs.manager import Runs
from servelab.engines.catalog.folder import Catalog, load_catalog
from servelab.engines.errors import ServelabError
from servelab.tui.commands.hostloop import run_on_hosts

T = TypeVar("T")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("campaign", help="campaigns: a matrix of experiments run as one queue on the host")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True, parser_class=type(p))
    q = verbs.add_parser("plan", help="the points, the loads they share, and the estimated duration")
    q.add_argument("campaign", metavar="FILE", help="a file in experiments/campaigns/, or its name")
    q.add_argument("--json", action="store_true", help="print {points, loads, estimate_s, problems}")
    q.set_defaults(func=cmd_plan)

    q = verbs.add_parser("start", help="preflight every load, then run the queue detached on the host")
    q.add_argument("campaign", metavar="FILE", help="a file in experiments/campaigns/, or its name")
    q.add_argument("--skip-preflight", action="store_true", help="launch the loads without the preflight checks")
    q.add_argument("--json", action="store_true", help="print the status document")
    q.set_defaults(func=cmd_start)

    for verb, helptext, func in (
        ("status", "where the queue is: each load and point, and whether the supervisor lives", cmd_status),
        ("stop", "stop the supervisor and its current run (resume continues later)", cmd_stop),
        ("resume", "continue after the supervisor was killed or the host rebooted (finished points are kept)", cmd_resume),
    ):
        q = verbs.add_parser(verb, help=helptext)
        q.add_argument("campaign", metavar="FILE|ID", help="a campaign file or name (its latest run), or a campaign id")
        q.add_argument("--json", action="store_true", help="print the status document")
        q.set_defaults(func=func)


    q = verbs.add_parser("coordinate", help="(started by 'campaign start' for a fleet campaign) run its queues from this machine")
    q.add_argument("camp_dir", metavar="DIR", help="the fleet campaign's folder under the local campaigns folder")
    q.set_defaults(func=cmd_coordinate)

    q = verbs.add_parser("report", help="every point: acceptance, output tok/s with its band, TTFT/TPOT, load time, speedup")
    q.add_argument("campaign", metavar="FILE|ID", help="a campaign file or name (its latest run), or a campaign id")
    q.add_argument("--format", choices=FORMATS, default="table")
    q.add_argument("--json", action="store_true", help="same as --format json")
    q.add_argument("--plots", metavar="DIR", help="also write speedup/acceptance/throughput charts as DIR/<chart>.svg and .png")
    q.set_defaults(func=cmd_report)


def _run(args: argparse.Namespace, body: Callable[[Catalog], Awaitable[T]]) -> T:
    return run_on_hosts(lambda: body(load_catalog(args.dir)))


def _show(args: argparse.Namespace, st: CampaignStatus) -> int:
    if args.json:
        print(json.dumps(st.to_json(), indent=2))
    else:
        print("\n".join(control.describe_status(st)))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    async def body(catalog: Catalog) -> Plan:
        from servelab.engines.runs.manager import Runs

        runs = Runs(catalog)
        planned = await plan_with_history(load_checked(catalog, args.campaign), catalog, runs)
        for host, why in runs.unreachable.items():
            print(f"servelab: no load-time estimate from {host}: {why}", file=sys.stderr)
        return planned

    result = _run(args, body)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print("\n".join(describe(result)))
    return 1 if result.problems else 0


def cmd_start(args: argparse.Namespace) -> int:
    say = (lambda m: print(m, file=sys.stderr)) if args.json else print
    st = _run(args, lambda cat: control.start(cat, args.campaign, skip_preflight=args.skip_preflight, progress=say))
    return _show(args, st)


def cmd_status(args: argparse.Namespace) -> int:
    return _show(args, _run(args, lambda cat: control.status(cat, args.campaign)))


def cmd_stop(args: argparse.Namespace) -> int:
    return _show(args, _run(args, lambda cat: control.stop(cat, args.campaign)))


def cmd_resume(args: argparse.Namespace) -> int:
    return _show(args, _run(args, lambda cat: control.resume(cat, args.campaign)))


def cmd_coordinate(args: argparse.Namespace) -> int:
    """The detached coordinator of a fleet campaign (``engines/campaign/coordinator.py``)."""
    from servelab.engines.campaign.coordinator import coordinate

    return _run(args, lambda cat: coordinate(Runs(cat), Path(args.camp_dir)))


def cmd_report(args: argparse.Namespace) -> int:
    report = _run(args, lambda cat: build_report(Runs(cat), args.campaign))
    written = write_plots(plot_series(report), Path(args.plots)) if args.plots else []
    print(render(report, "json" if args.json else args.format))
    for path in written:  # stderr: stdout stays the report in its format
        print(f"plot: {path}", file=sys.stderr)
    return 0
