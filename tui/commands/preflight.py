"""``servelab preflight EXP`` and ``servelab patches check|apply|revert EXP``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from servelab.engines.adapters.base import get_adapter
from servelab.engines.catalog.folder import Catalog, load_catalog
from servelab.engines.errors import ServelabError
from servelab.engines.catalog.experiment import SourcedExperiment
from servelab.engines.helpers import HelperError
from servelab.engines.hosts.base import Host, HostUnreachable
from servelab.engines.catalog.patches import PatchReport, apply_patches, check_patches, load_patch_set, revert_patches
from servelab.engines.preflight.checks import Check, PreflightReport, read_hostinfo, run_preflight
from servelab.tui.commands.hostloop import run_on_hosts


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("preflight", help="check an experiment on its host before launch (seconds, not minutes)")
    p.add_argument("experiment", metavar="EXP")
    _common(p)
    p.set_defaults(func=cmd_preflight)

    p = sub.add_parser("patches", help="check, apply or revert an experiment's patch set on its host")
    p.add_argument("action", choices=("check", "apply", "revert"))
    p.add_argument("experiment", metavar="EXP")
    _common(p)
    p.set_defaults(func=cmd_patches)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="run on this host instead of the experiment's own")
    p.add_argument("--root", help="the folder holding the engine's package (default: found by the host's python)")
    p.add_argument("--no-imports", action="store_true", help="skip importing the patched modules (faster, less sure)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _preflight_nodes(catalog: Catalog, exp: SourcedExperiment, as_json: bool) -> int:
    """A multi-node experiment: each node's own checks (e.g. Ray importable with that node's Python),
    then servelab's preflight on every node's host; the same round a launch runs first."""
    from servelab.engines.nodes.run import MultiNodeRuns
    from servelab.engines.runs.manager import Runs

    checks = run_on_hosts(lambda: MultiNodeRuns(Runs(catalog)).preflight(exp))
    if as_json:
        print(json.dumps({"nodes": [asdict(c) for c in checks], "ok": all(c.ok for c in checks)}, indent=2))
    else:
        for c in checks:
            print(f"node {c.rank} ({c.host}): {'ok' if c.ok else c.detail}", file=sys.stdout if c.ok else sys.stderr)
    return 0 if all(c.ok for c in checks) else 1


def _host(catalog: Catalog, exp: SourcedExperiment, name: str | None) -> Host:
    from servelab.engines.hosts.registry import open_host

    return open_host(catalog.host(name or exp.experiment.host))


def cmd_preflight(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.dir)
    exp = catalog.get(args.experiment)
    if exp.experiment.spans_hosts and args.host is None:
        return _preflight_nodes(catalog, exp, args.json)

    def show(check: Check) -> None:
        if not args.json:
            print(check.line(), flush=True)

    async def go() -> PreflightReport:
        host = _host(catalog, exp, args.host)
        return await run_preflight(catalog, exp, host, progress=show, package_root=args.root, imports=not args.no_imports)

    report: PreflightReport = run_on_hosts(go)
    if args.json:
        print(json.dumps(_preflight_json(report), indent=2))
    else:
        print(report.summary(), file=sys.stderr if not report.ok else sys.stdout)
    return 0 if report.ok else 1


def _preflight_json(report: PreflightReport) -> dict[str, Any]:
    return {
        "experiment": report.experiment,
        "host": report.host,
        "ok": report.ok,
        "seconds": round(report.seconds, 3),
        "checks": [{**asdict(c), "seconds": round(c.seconds, 3)} for c in report],
        "hostinfo": asdict(report.hostinfo) if report.hostinfo else None,
        "patches": report.patches.record() if report.patches else None,
    }


def cmd_patches(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.dir)
    exp = catalog.get(args.experiment)
    patches = load_patch_set(exp)
    if not patches and args.action != "revert":
        print(f"{exp.name} has no patches")
        return 0
    action = {"check": check_patches, "apply": apply_patches, "revert": revert_patches}[args.action]

    async def go() -> PatchReport:
        host = _host(catalog, exp, args.host)
        root = args.root
        if root is None:
            package = get_adapter(exp.experiment.engine).package
            try:
                info = await read_hostinfo(host, host.config.python, package)
            except (HelperError, HostUnreachable) as exc:
                raise ServelabError(str(exc)) from None
            if info.root is None:
                raise ServelabError(info.error or f"{package} is not installed for {host.config.python} on {host.name}")
            root = info.root
        return await action(host, patches, root, imports=not args.no_imports)

    report: PatchReport = run_on_hosts(go)
    if args.json:
        print(json.dumps({**asdict(report), "record": report.record()}, indent=2))
        return 0 if report.ok else 1
    for p in report.patches:
        detail = f"  {p.detail}" if p.detail else ""
        print(f"{p.status:<11} {p.name}  sha256 {p.sha256[:16]}{detail}")
    for f in report.files:
        before = (f.sha256_before or "absent")[:16]
        after = (f.sha256_after or "absent")[:16]
        print(f"{'changed' if f.changed else 'same':<11} {report.root.rstrip('/')}/{f.path}  {before} -> {after}")
    for c in report.compile_errors:
        print(f"SyntaxError {report.root.rstrip('/')}/{c}")
    for i in report.imports:
        if not i.ok:
            print(f"import      {i.module}: {i.message}")
    if report.pycache_removed:
        print(f"removed {len(report.pycache_removed)} stale .pyc file(s)")
    if not report.ok:
        raise ServelabError(f"patches {args.action} {exp.name}: {report.error}")
    verb = {"check": "check passed", "apply": "applied" if report.changed else "already applied, nothing changed",
            "revert": "reverted" if report.changed else "nothing to restore"}[args.action]
    print(f"patches {args.action} {exp.name}: {verb} ({report.seconds:.1f} s, state in {report.state})")
    return 0
