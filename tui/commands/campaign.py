"""``servelab campaign plan``: a campaign's points, its loads and their engine flags."""

from __future__ import annotations

import argparse
import json

from engines.campaign.check import load_checked
from engines.campaign.plan import describe, plan
from engines.catalog import load_catalog


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("campaign", help="campaigns: a matrix of experiments run as one queue")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True, parser_class=type(p))
    q = verbs.add_parser("plan", help="the points, the loads they share, and the estimated duration")
    q.add_argument("campaign", metavar="FILE", help="a file in experiments/campaigns/, or its name")
    q.add_argument("--json", action="store_true", help="print {points, loads, estimate_s, problems}")
    q.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.dir)
    result = plan(load_checked(catalog, args.campaign), catalog)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print("\n".join(describe(result)))
    return 1 if result.problems else 0
