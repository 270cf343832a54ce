"""How often following a run id from a probe entry point to the probe's result climbs back into
``engines/runs/manager.py``: figures for this tree and, with ``--against REV``, for a ``git worktree`` of REV
(the same script, the same runs, on this machine).

Real runs of the StubEngine (tests/stub_engine, serving HTTP) on this machine: an ordinary run on
``local`` and a two-node group over ``local`` and ``local2`` (two workdirs). For each id (the
ordinary run's, the group's id, the worker node's id) and each entry point, one probe (4 tokens),
counted by ``sys.setprofile`` filtered on ``engines/runs/manager.py``'s file name:

- ``entries``: calls of public ``Runs`` methods from outside runs.py (each a climb back into runs.py);
- ``by id``: those of them handed a run id string (each makes runs.py look the id up again);
- ``find``: ``Runs.find`` calls (each asks the hosts where a run id lives: "group or node?" again);
- ``reads``: ``Runs._read_record`` calls (each reads a ``run.json``);
- ``resolves``: outermost calls of the run-id resolvers (``resolve_run``, ``resolve_group``, ``head_run_id``).

Entry points: ``servelab probe RUN --json`` (in this process, ``servelab.tui.cli.main``), and the
dashboard's probe action as tui/app.py makes its calls (``load_probe`` then ``probe_run``; in a tree
with ``engines.nodes.resolve`` it resolves first and hands the result to both, as that tree's app does).

    .venv/bin/python bench/runid_path.py [--against a3ea7ba]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PROBE = '[probe]\nprompts = "builtin:mixed"\nmax_tokens = 4\nrepeats = 1\nwarmup = 0\n'
RESOLVERS = frozenset({"resolve_run", "resolve_group", "head_run_id"})
FIGURES = ("entries", "by id", "find", "reads", "resolves")
#: A run id (``engines.runs.manager.RUN_ID_RE``), copied so this file runs against any tree.
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*-\d{8}-\d{6}-[0-9a-f]{4}$")


class Profile:
    """Counts first entries (a coroutine's frame is entered again at each resume) into runs.py's ``Runs``."""

    def __init__(self, runs_file: str) -> None:
        self.runs_file = runs_file
        self.counts: Counter[str] = Counter()
        self._seen: set[int] = set()
        self._keep: list[FrameType] = []  # holds the frames seen, so an id is never reused meanwhile

    def _first(self, frame: FrameType) -> bool:
        if id(frame) in self._seen:
            return False
        self._seen.add(id(frame))
        self._keep.append(frame)
        return True

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        back = frame.f_back
        if code.co_filename == self.runs_file:
            qual = code.co_qualname
            if not qual.startswith("Runs.") or not self._first(frame):
                return
            name = qual[len("Runs.") :]
            if name == "find":
                self.counts["find"] += 1
            elif name == "_read_record":
                self.counts["reads"] += 1
            if not name.startswith("_") and (back is None or back.f_code.co_filename != self.runs_file):
                self.counts["entries"] += 1
                first = frame.f_locals.get(code.co_varnames[1]) if code.co_argcount > 1 else None
                if isinstance(first, str) and RUN_ID.match(first):
                    self.counts["by id"] += 1
        elif code.co_name in RESOLVERS and "/engines/nodes/" in code.co_filename and self._first(frame):
            if back is None or back.f_code.co_name not in RESOLVERS:
                self.counts["resolves"] += 1


def inner() -> None:
    """Run in the tree on PYTHONPATH: start the runs, count each path, print one JSON line."""
    sys.path.insert(0, os.environ["RUNID_TREE"])
    from servelab.engines.hosts.registry import close_all
    from servelab.engines.nodes.run import MultiNodeRuns
    from servelab.engines.probe import artifacts

    try:  # the tree's layout: packages by area (#33), or the flat engines/ before it
        from servelab.engines.catalog.folder import load_catalog
        from servelab.engines.runs import manager as runs_mod
    except ImportError:
        from servelab.engines import runs as runs_mod  # type: ignore[no-redef]
        from servelab.engines.catalog import load_catalog  # type: ignore[no-redef,attr-defined]
    Runs = runs_mod.Runs
    from servelab.tui.cli import main as cli_main
    from tests.fixtures.ports import free_port
    from tests.fixtures.runlab import STUB_PATH, make_lab, toml_value

    resolve_run: Any = None  # a tree from before engines.nodes.resolve has none
    with contextlib.suppress(ImportError):
        from servelab.engines.nodes import resolve

        resolve_run = resolve.resolve_run

    root = Path(tempfile.mkdtemp(prefix="runid-path-"))
    os.environ["SERVELAB_STATE_DIR"] = str(root / "state")
    os.environ["SERVELAB_CACHE"] = str(root / "cache")
    lab = make_lab(root, None)
    with (lab.folder / "hosts.toml").open("a") as f:
        f.write(f"\n[hosts.local2]\npython = {toml_value(sys.executable)}\nworkdir = {toml_value(str(root / 'work2'))}\n")
    env = {"PYTHONPATH": STUB_PATH, "STUB_INTERVAL": "0.05", "STUB_HTTP": "1"}
    env_toml = "[env]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in env.items())
    (lab.folder / "solo.toml").write_text(
        f'engine = "vllm"\nhost = "local"\nmodel = {toml_value(str(lab.folder / "no-model"))}\nport = {free_port()}\n' + env_toml + PROBE
    )
    (lab.folder / "grp.toml").write_text(
        f'engine = "vllm"\nhosts = ["local", "local2"]\nmodel = {toml_value(str(lab.folder / "no-model"))}\n'
        f'served_model_name = "stub-model"\nport = {free_port()}\n[multinode]\nbackend = "native"\nport = {free_port()}\n'
        '[parallel]\ntensor = 2\n' + env_toml + '[engine_args]\nhost = "127.0.0.1"\n' + PROBE
    )
    profile_file = runs_mod.__file__  # as code objects name it (the tree's servelab/engines link, not resolved)

    async def start() -> tuple[str, str, str, Any]:
        runs = Runs(load_catalog(lab.folder))
        solo = await runs.launch("solo", skip_preflight=True)
        group = await MultiNodeRuns(runs).launch("grp", skip_preflight=True)
        await artifacts.probe_run(runs, solo.id, ready_timeout_s=60)  # both servers answer before anything is counted
        await artifacts.probe_run(runs, group.nodes[0].run_id, ready_timeout_s=60)
        await close_all()
        return solo.id, group.id, group.nodes[1].run_id, group

    async def dashboard(run_id: str) -> None:  # tui/app.py's _probe, its calls as that tree makes them
        runs = Runs(load_catalog(lab.folder))
        try:
            target: Any = await resolve_run(runs, run_id) if resolve_run is not None else run_id
            await artifacts.load_probe(runs, target)
            await artifacts.probe_run(runs, target, ready_timeout_s=60)
        finally:
            await close_all()

    async def stop(ids: tuple[str, Any]) -> None:
        runs = Runs(load_catalog(lab.folder))
        await runs.stop(ids[0], grace=2)
        await MultiNodeRuns(runs).stop(ids[1], grace=2)
        await close_all()

    def counted(body: Any) -> dict[str, int]:
        prof = Profile(profile_file)
        sys.setprofile(prof)
        try:
            body()
        finally:
            sys.setprofile(None)
        return {k: prof.counts[k] for k in FIGURES}

    solo, gid, worker, group = asyncio.run(start())
    out: dict[str, dict[str, dict[str, int]]] = {}
    try:
        for kind, rid in (("ordinary", solo), ("group id", gid), ("worker node id", worker)):
            def cli(rid: str = rid) -> None:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    code = cli_main(["--dir", str(lab.folder), "probe", rid, "--json"])
                if code != 0:
                    raise SystemExit(f"servelab probe {rid} failed ({code})")

            out[kind] = {"servelab probe": counted(cli), "dashboard probe": counted(lambda rid=rid: asyncio.run(dashboard(rid)))}
    finally:
        asyncio.run(stop((solo, group)))
    print(json.dumps(out))


def measure(tree: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "RUNID_TREE": str(tree)}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--inner"], cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"runid_path: the count in {tree} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", metavar="REV", help="also count on a git worktree of REV (e.g. a3ea7ba)")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        inner()
        return
    trees: list[tuple[str, Path]] = []
    tmp = None
    if args.against:
        tmp = Path(tempfile.mkdtemp(prefix="runid-against-")) / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tmp), args.against], check=True, capture_output=True)
        trees.append((args.against, tmp))
    trees.append(("this tree", REPO))
    try:
        results = [(label, measure(tree)) for label, tree in trees]
    finally:
        if tmp is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tmp)], check=False, capture_output=True)
    labels = " -> ".join(label for label, _ in results)
    print(f"run-id path into engines/runs/manager.py, per probe ({labels}):")
    first = results[0][1]
    for kind in first:
        for entry in first[kind]:
            cells = ", ".join(f"{f} " + " -> ".join(str(res[kind][entry][f]) for _, res in results) for f in FIGURES)
            print(f"  {kind:<15} {entry:<15} {cells}")

if __name__ == "__main__":
    main()
