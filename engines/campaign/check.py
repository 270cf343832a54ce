"""``servelab check`` for campaigns: the file's own rules, then every point it expands to."""

from __future__ import annotations

from pathlib import Path

from servelab.engines.campaign.definition import Campaign, load_campaign
from servelab.engines.campaign.plan import plan
from servelab.engines.catalog.folder import Catalog
from servelab.engines.errors import Problem, ServelabError

#: Campaign files live here, inside the experiments folder.
CAMPAIGNS_DIR = "campaigns"


def campaign_files(folder: Path) -> list[Path]:
    return sorted((folder / CAMPAIGNS_DIR).glob("*.toml"))


def find_campaign(catalog: Catalog, name: str) -> Path | None:
    """A campaign by file path or by name (its file stem), else None."""
    path = Path(name)
    if path.suffix == ".toml" and path.is_file() and path.parent.name == CAMPAIGNS_DIR:
        return path
    for candidate in campaign_files(catalog.folder):
        if candidate.stem == name or candidate.name == name:
            return candidate
    return None


def check_campaign(catalog: Catalog, path: Path) -> list[Problem]:
    campaign, problems = load_campaign(path)
    if campaign is None:
        return problems
    return plan(campaign, catalog).problems


def load_checked(catalog: Catalog, name: str) -> Campaign:
    """A campaign ready to plan, or one line saying why not."""
    path = find_campaign(catalog, name)
    if path is None:
        known = ", ".join(p.stem for p in campaign_files(catalog.folder)) or "none"
        raise ServelabError(f"no campaign {name!r} in {catalog.folder / CAMPAIGNS_DIR} (known: {known})")
    campaign, problems = load_campaign(path)
    if campaign is None:
        extra = f" (and {len(problems) - 1} more: servelab check {name})" if len(problems) > 1 else ""
        raise ServelabError(f"{problems[0]}{extra}")
    return campaign
