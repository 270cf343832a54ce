"""``servelab drafter DRAFT --target MODEL``: the drafter checks on their own, before any load."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from servelab.engines.adapters.base import ENGINE_MODULES, get_adapter
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.drafter.facts import FactsError
from servelab.engines.drafter.run import DrafterReport, check_drafter
from servelab.engines.errors import ServelabError
from servelab.engines.helpers import HelperError
from servelab.tui.commands.hostloop import run_on_hosts

METHODS = ("eagle3", "eagle", "draft_model", "mtp")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("drafter", help="check a drafter against its target on a host: configs, vocab map, aux layers, engine rules")
    p.add_argument("draft", metavar="DRAFT", help="the drafter folder, as the host sees it")
    p.add_argument("--target", required=True, metavar="MODEL", help="the target model folder, as the host sees it")
    p.add_argument("--engine", choices=sorted(ENGINE_MODULES), default="vllm")
    p.add_argument("--method", choices=METHODS, default="eagle3")
    p.add_argument("--max-model-len", type=int, metavar="N", help="the context length the server will be started with")
    p.add_argument("--num-tokens", type=int, metavar="K", help="tokens drafted per step (num_speculative_tokens)")
    p.add_argument("--host", default="local", help="a host of hosts.toml (default: local)")
    p.add_argument("--json", action="store_true", help='print {"findings": [...]}')
    p.set_defaults(func=cmd_drafter)


def cmd_drafter(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.dir)
    cfg = catalog.host(args.host)
    adapter = get_adapter(args.engine)
    draft, target = args.draft, args.target
    if cfg.is_local:  # relative paths are relative to where the command runs
        draft, target = os.path.abspath(draft), os.path.abspath(target)

    async def go() -> DrafterReport:
        from servelab.engines.hosts.registry import open_host

        return await check_drafter(open_host(cfg), adapter, python=cfg.python, method=args.method, draft_path=draft, target_path=target,
                                   max_model_len=args.max_model_len, num_tokens=args.num_tokens)

    try:
        report = run_on_hosts(go)
    except (FactsError, HelperError) as exc:
        raise ServelabError(str(exc)) from None
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        _print(report)
    return 1 if report.blocking() else 0


def _print(report: DrafterReport) -> None:
    for f in report.findings:
        print(f.line())
        print(f"        evidence: {f.evidence}")
        print(f"        fix: {f.fix}")
    rules: Any = report.rules
    source = f"; rules {rules.source}" if rules is not None else ""
    print(f"drafter check: {report.summary()} in {report.seconds:.1f} s{source}")
