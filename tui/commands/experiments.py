"""``servelab list``, ``show`` and ``check``: the experiment definitions."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from servelab.engines.adapters.base import speculative_flags
from servelab.engines.campaign.check import campaign_files, check_campaign, find_campaign
from servelab.engines.catalog.folder import Catalog, check, load_catalog
from servelab.engines.catalog.experiment import SourcedExperiment
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.catalog.loader import display_path
from servelab.engines.runs.records import runs_root
from servelab.engines.placements.base import placement_for
from servelab.engines.adapters.exchange import LaunchSpec


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("list", help="list the experiments")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="show an experiment's resolved command line, environment, patches, probe")
    p.add_argument("experiment")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("check", help="validate definitions: exit 1 with FILE:LINE: key: message per problem")
    p.add_argument("experiments", nargs="*", metavar="EXP", help="names or files (default: all)")
    p.set_defaults(func=cmd_check)


def cmd_list(args: argparse.Namespace) -> int:
    cat = load_catalog(args.dir)
    rows: list[dict[str, Any]] = []
    for exp in cat.experiments:
        e = exp.experiment
        rows.append(
            {
                "name": e.name,
                "engine": e.engine,
                "host": e.host,
                "model": e.model,
                "file": display_path(exp.path),
                "speculative": {"method": e.speculative.method, "num_tokens": e.speculative.num_tokens, "label": e.speculative.label},
                "patches": len(e.patches),
                "baseline": e.baseline,
                "tags": e.tags,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for col in ("NAME", "ENGINE", "HOST", "SPECULATIVE", "PATCHES", "FILE"):
        table.add_column(col, no_wrap=col in ("NAME", "FILE"))
    for r in rows:
        table.add_row(r["name"], r["engine"], r["host"], r["speculative"]["label"], str(r["patches"] or "-"), r["file"])
    # a pipe gets full names on one line each (for grep); a terminal gets its own width
    Console(width=None if sys.stdout.isatty() else 240).print(table)
    broken = [e for e in cat.entries if e.experiment is None]
    if broken:
        print(f"{len(broken)} invalid definition(s) not listed: run 'servelab check'", file=sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    cat = load_catalog(args.dir)
    exp = cat.get(args.experiment)
    e = exp.experiment
    host = cat.host(e.host)
    spec = cat.launch_spec(exp, host)
    patches = [
        {"file": p.file, "path": str(exp.patch_path(p)), "sha256": digest, "description": p.description}
        for p, digest in exp.patch_hashes()
    ]
    preview = placement_for(host).preview(host, cat, exp, spec)
    if args.json:
        print(
            json.dumps(
                {
                    "name": e.name,
                    **({preview.key: preview.text} if preview is not None else {}),
                    "file": display_path(exp.path),
                    "host": host.model_dump(),
                    "argv": spec.argv,
                    "env": spec.env,
                    "patches": patches,
                    "probe": e.probe.model_dump(),
                    "nodes": [
                        {
                            "rank": plan.node.rank,
                            "host": plan.node.host,
                            "address": plan.node.address,
                            "processes": [{"role": p.role, "argv": p.spec.argv, "env": p.spec.env, "serves": p.serves} for p in plan.processes],
                        }
                        for plan in cat.node_plans(exp)
                    ],
                },
                indent=2,
            )
        )
        return 0
    print(f"{e.name}  ({display_path(exp.path)})")
    if e.description:
        print(f"  {e.description}")
    where = f"ssh {host.ssh}" if host.ssh else "this machine"
    print(f"\nhost      {host.name} ({where}), runs in {host.workdir}")
    print(f"baseline  {e.baseline or '-'}")
    if e.speculative.method != "none":
        print(f"speculation  {e.speculative.method} K={e.speculative.num_tokens} (tokens drafted per step) -> {shlex.join(speculative_flags(e))}")
    print("\ncommand")
    print("  " + " \\\n      ".join(_chunks(spec.argv)))
    print("\nenvironment")
    for k, v in spec.env.items():
        print(f"  {k}={shlex.quote(v)}")
    for plan in cat.node_plans(exp):
        node = plan.node
        print(f"\nnode {node.rank} {'(head) ' if node.rank == 0 else ''}{node.host} at {node.address}")
        for proc in plan.processes:
            own = {k: v for k, v in proc.spec.env.items() if spec.env.get(k) != v}
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in own.items())
            print(f"  {proc.role}{'  (serves HTTP)' if proc.serves else ''}")
            print(f"    {(env + ' ') if env else ''}{shlex.join(proc.spec.argv)}")
    print("\npatches" + ("" if patches else "  none"))
    for p in patches:
        print(f"  {p['file']}  sha256 {(p['sha256'] or 'MISSING')[:16]}  {p['description']}")
    if preview is not None:
        print(f"\n{preview.heading}")
        print("  " + "\n  ".join(preview.text.rstrip("\n").splitlines()))
    pr = e.probe
    print(f"\nprobe     prompts={pr.prompts} max_tokens={pr.max_tokens} concurrency={pr.concurrency} repeats={pr.repeats} warmup={pr.warmup} auto={pr.auto}")
    return 0


def _chunks(argv: list[str]) -> list[str]:
    """Group ``--flag value`` pairs for a readable multi-line command."""
    out: list[str] = []
    i = 0
    head = [shlex.quote(a) for a in argv[:3]]
    out.append(" ".join(head))
    i = 3
    while i < len(argv):
        part = [argv[i]]
        i += 1
        while i < len(argv) and not argv[i].startswith("--"):
            part.append(argv[i])
            i += 1
        out.append(shlex.join(part))
    return out


def cmd_check(args: argparse.Namespace) -> int:
    cat = load_catalog(args.dir)
    campaigns = [c for c in (find_campaign(cat, n) for n in args.experiments) if c is not None]
    names = [n for n in args.experiments if find_campaign(cat, n) is None]
    problems = check(args.dir, names)[1] if names or not args.experiments else []
    for path in campaigns if args.experiments else campaign_files(cat.folder):
        problems.extend(check_campaign(cat, path))
    for p in problems:
        print(p)
    for w in cat.warnings(names or None) if names or not args.experiments else []:
        print(f"{w.file}:{w.line}: {w.path}: warning: {' '.join(w.message.split())}", file=sys.stderr)  # stdout: problems only
    if problems:
        return 1
    n = len(args.experiments) if args.experiments else len(cat.experiments) + len(campaign_files(cat.folder))
    print(f"{n} definition(s) OK", file=sys.stderr)
    return 0
