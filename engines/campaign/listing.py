"""What a campaign screen lists: the campaign files with their plans, and the campaigns started on the hosts.

Typed accessors over ``check``/``plan``/``control`` so the dashboard draws these objects and
decides nothing: a broken file is an entry with its problems (never an exception), a host that
does not answer is named in ``unreachable`` (its campaigns are not "none"), and the supervisor's
current step is a ``CurrentStep`` rather than the raw ``state.json`` mapping.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from servelab.engines.campaign import control
from servelab.engines.campaign.check import campaign_files
from servelab.engines.campaign.control import CampaignStatus
from servelab.engines.campaign.document import campaigns_root
from servelab.engines.campaign.definition import load_campaign
from servelab.engines.campaign.plan import Plan, plan
from servelab.engines.catalog.folder import Catalog
from servelab.engines.errors import Problem, ServelabError
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.hosts.registry import open_host

#: A started campaign's folder name: ``NAME-YYYYmmdd-HHMMSS-xxxx`` (``control.new_campaign_id``).
CAMPAIGN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*-\d{8}-\d{6}-[0-9a-f]{4}$")

if TYPE_CHECKING:
    from servelab.engines.runs.records import RunsAPI


@dataclass(frozen=True)
class CampaignEntry:
    """One file of ``experiments/campaigns/``: its plan, or the problems that keep it from planning."""

    name: str
    path: Path
    plan: Plan | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.plan is not None and not self.problems


def campaign_entries(catalog: Catalog, estimates: dict[tuple[str, str], float] | None = None) -> list[CampaignEntry]:
    """Every campaign file, planned against ``catalog`` (with load estimates when given)."""
    out: list[CampaignEntry] = []
    for path in campaign_files(catalog.folder):
        campaign, problems = load_campaign(path)
        if campaign is None:
            out.append(CampaignEntry(path.stem, path, None, problems))
            continue
        try:
            planned = plan(campaign, catalog, (lambda h, m: estimates.get((h, m))) if estimates is not None else None)
        except ServelabError as exc:
            out.append(CampaignEntry(campaign.name, path, None, [Problem(str(path), 1, "<campaign>", str(exc))]))
            continue
        out.append(CampaignEntry(campaign.name, path, planned, list(planned.problems)))
    return out


async def campaign_entries_with_history(catalog: Catalog, runs: RunsAPI) -> list[CampaignEntry]:
    """``campaign_entries`` with each load estimated from earlier loads (``plan_with_history``'s rule, one listing for all)."""
    from servelab.engines.runs.history import load_estimates

    hosts = {load.experiment.host for e in campaign_entries(catalog) if e.plan is not None for load in e.plan.loads}
    seconds = await load_estimates(runs, hosts) if hosts else {}
    return campaign_entries(catalog, seconds)


@dataclass
class StartedCampaigns:
    """Campaigns started on the configured hosts, newest first, and the hosts that did not answer."""

    campaigns: list[CampaignStatus] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)

    def latest_of(self, name: str) -> CampaignStatus | None:
        """The newest started run of the campaign called ``name`` (what ``campaign status NAME`` reads)."""
        return next((c for c in self.campaigns if c.campaign == name or c.id.startswith(name + "-")), None)


async def _ids_on(catalog: Catalog, host_name: str) -> list[str]:
    cfg = catalog.host(host_name)
    host = open_host(cfg)
    root = campaigns_root(cfg)
    if not await host.exists(root):
        return []
    return [n for n in await host.listdir(root) if CAMPAIGN_ID.match(n)]  # not the GPU-set lock files beside them


async def started_campaigns(catalog: Catalog) -> StartedCampaigns:
    """Each host's ``<workdir>/campaigns/*`` with its status (the same calls ``servelab campaign status`` makes)."""
    out = StartedCampaigns()
    names = catalog.hosts.names()

    async def ids(name: str) -> list[str]:
        try:
            return await _ids_on(catalog, name)
        except (HostUnreachable, ServelabError, OSError) as exc:
            out.unreachable[name] = str(exc)
            return []

    listed = await asyncio.gather(*(ids(n) for n in names))
    unique = sorted({i for found in listed for i in found}, key=_started_key, reverse=True)

    async def one(camp_id: str) -> CampaignStatus | None:
        try:
            return await control.status(catalog, camp_id)
        except (ServelabError, HostUnreachable, OSError):
            return None

    for st in await asyncio.gather(*(one(i) for i in unique)):
        if st is not None:
            out.campaigns.append(st)
    return out


def _started_key(camp_id: str) -> str:
    """Ids end in ``-YYYYmmdd-HHMMSS-xxxx``: newest first whatever the campaign's name."""
    parts = camp_id.rsplit("-", 3)
    return "-".join(parts[1:3]) if len(parts) == 4 else camp_id


@dataclass(frozen=True)
class CurrentStep:
    """What the supervisor does now: load ``load`` (0-based), maybe probing ``point``."""

    load: int | None
    point: str | None
    step: str


def current_step(st: CampaignStatus) -> CurrentStep | None:
    """The supervisor's current step as ``state.json`` records it, or None between steps or when it is gone."""
    cur = st.current
    if not isinstance(cur, dict) or not st.supervisor_alive:
        return None
    load = cur.get("load")
    point = cur.get("point")
    return CurrentStep(load if isinstance(load, int) else None, point if isinstance(point, str) else None, str(cur.get("step") or ""))
