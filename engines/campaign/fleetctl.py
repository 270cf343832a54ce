"""Start and resume a fleet campaign: its files in the local campaigns folder, its detached coordinator.

``control.start``/``resume`` hand a campaign with ``hosts = [...]`` here. Start asks every host of
the fleet whether it answers (all down: one line, nothing started; some down: their loads go to the
others at once), writes ``plan.json`` (each load's experiment and points, the points' request
bodies, as the host supervisor's plan has them) and ``state.json`` (the :class:`Fleet`) under
``<local workdir>/campaigns/<id>/``, and starts the coordinator as its own session
(``servelab campaign coordinate DIR``, ``engines/campaign/coordinator.py``), so closing the
terminal or the dashboard does not end it. Status and stop are the one-host campaign's: the
coordinator records its pid as the supervisor does.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from servelab.engines.campaign.document import (
    FORMAT,
    PID_JSON,
    PLAN_JSON,
    READY_TIMEOUT_S,
    STATE_JSON,
    Located,
    Progress,
    campaigns_root,
    load_name,
    new_campaign_id,
    point_doc,
    sourced_load,
)
from servelab.engines.campaign.fleet import new_fleet
from servelab.engines.campaign.plan import Plan
from servelab.engines.catalog.folder import Catalog
from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.hosts.registry import open_host
from servelab.engines.hosts.hostsfile import LOCAL
from servelab.engines.runs.records import unreachable_reason

LOG = "supervisor.log"
#: How long a new coordinator has to record its pid.
SPAWN_TIMEOUT_S = 60.0


def is_fleet_document(doc: Any) -> bool:
    return isinstance(doc, dict) and bool(doc.get("fleet"))


async def unreachable_hosts(catalog: Catalog, names: list[str]) -> dict[str, str]:
    """The hosts of ``names`` that do not answer now, each with the one-line reason."""

    async def one(name: str) -> tuple[str, str | None]:
        cfg = catalog.host(name)
        try:
            await asyncio.wait_for(open_host(cfg).exists("/"), timeout=cfg.connect_timeout + 20)
        except HostUnreachable as exc:
            return name, f"{name}: {unreachable_reason(cfg, exc)}"
        except (TimeoutError, OSError) as exc:
            return name, f"{name}: no answer ({type(exc).__name__})"
        return name, None

    return {n: why for n, why in await asyncio.gather(*(one(n) for n in names)) if why is not None}


async def fleet_document(catalog: Catalog, p: Plan, camp_id: str, *, skip_preflight: bool) -> dict[str, Any]:
    """``plan.json`` of a fleet campaign: what every host needs to run any load (the host is picked later)."""
    by_name = {pt.name: pt for pt in p.points}
    loads = []
    for load in p.loads:
        first = by_name[load.points[0]]
        exp = load.experiment.model_copy(update={"name": load_name(p, first)})
        sourced = sourced_load(catalog, first.base, exp)
        loads.append({
            "index": load.index, "key": load.key, "experiment": exp.name, "experiment_toml": sourced.text, "base": first.base,
            "points": list(load.points), "speculative_flags": load.speculative_flags, "skip": None,
        })
    return {
        "format": FORMAT,
        "fleet": True,
        "id": camp_id,
        "campaign": p.campaign,
        "host": LOCAL,
        "hosts": [h.name for h in p.fleet],
        "experiments": str(catalog.folder.resolve()),
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "skip_preflight": skip_preflight,
        "ready_timeout_s": READY_TIMEOUT_S,
        "loads": loads,
        "points": [await point_doc(catalog, pt) for pt in p.points],
    }


def _local_dir(catalog: Catalog, camp_id: str) -> Path:
    return Path(os.path.expanduser(campaigns_root(catalog.host(LOCAL)))) / camp_id


async def start(catalog: Catalog, p: Plan, *, skip_preflight: bool = False, progress: Progress | None = None) -> Located:
    """Write the fleet campaign's files here and start its coordinator; where they are."""
    say = progress or (lambda _m: None)
    names = [h.name for h in p.fleet]
    down = await unreachable_hosts(catalog, names)
    if len(down) == len(names):
        raise ServelabError(f"campaign {p.campaign}: every host of the fleet is unreachable: " + "; ".join(down.values()))
    camp_id = new_campaign_id(p.campaign)
    camp_dir = _local_dir(catalog, camp_id)
    camp_dir.mkdir(parents=True)
    doc = await fleet_document(catalog, p, camp_id, skip_preflight=skip_preflight)
    fleet = new_fleet(p.fleet, p.assignments, {ld.index: list(ld.points) for ld in p.loads}, p.needs())
    for name, why in down.items():
        moved = fleet.drop(name, why)
        say(f"{name} is unreachable ({why}): its {len(moved)} load(s) go to the other hosts")
    state = {"id": camp_id, "campaign": p.campaign, "created_at": doc["created_at"], "status": "starting", **fleet.to_json()}
    (camp_dir / PLAN_JSON).write_text(json.dumps(doc, indent=1) + "\n")
    (camp_dir / STATE_JSON).write_text(json.dumps(state, indent=1) + "\n")
    return await _spawn(catalog, camp_dir, camp_id)


async def resume(catalog: Catalog, where: Located) -> Located:
    """A new coordinator on the same files: done points kept, every host tried again."""
    return await _spawn(catalog, Path(where.dir), where.id)


def coordinator_argv(folder: Path, camp_dir: Path) -> list[str]:
    """The detached coordinator's command line (``servelab campaign coordinate DIR``)."""
    return [sys.executable, "-m", "servelab", "--dir", str(folder), "campaign", "coordinate", str(camp_dir)]


async def _spawn(catalog: Catalog, camp_dir: Path, camp_id: str) -> Located:
    import servelab

    env = dict(os.environ)
    root = str(Path(servelab.__file__).resolve().parent.parent)  # this servelab, whichever the interpreter would find first
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    pid_file = camp_dir / PID_JSON
    old = pid_file.read_bytes() if pid_file.exists() else b""
    with open(camp_dir / LOG, "ab") as log:
        proc = subprocess.Popen(
            coordinator_argv(catalog.folder.resolve(), camp_dir), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env=env, cwd=str(camp_dir),
        )
    deadline = time.monotonic() + SPAWN_TIMEOUT_S
    while True:
        if pid_file.exists() and pid_file.read_bytes() != old:
            break
        if proc.poll() is not None:
            tail = [ln for ln in (camp_dir / LOG).read_text(errors="replace").splitlines() if ln.strip()]
            raise ServelabError(f"the coordinator of {camp_id} exited at once ({tail[-1] if tail else f'exit code {proc.returncode}'})")
        if time.monotonic() > deadline:
            raise ServelabError(f"the coordinator of {camp_id} did not start within {SPAWN_TIMEOUT_S:.0f} s (see {camp_dir / LOG})")
        await asyncio.sleep(0.1)
    return Located(open_host(catalog.host(LOCAL)), camp_id, str(camp_dir))
