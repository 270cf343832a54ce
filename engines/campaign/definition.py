"""A campaign file: base experiments, axes over any experiment key, links and exclusions.

A campaign is a TOML file in ``experiments/campaigns/``. It names existing experiments as its bases
and the keys to vary; ``engines.campaign.plan`` turns it into points and loads. The file is checked
as strictly as an experiment: unknown keys, axis paths the experiment schema does not have, links
over unknown axes or of unequal lengths, and exclusions naming keys no axis varies are each one
``FILE:LINE: key.path: message`` problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field, model_validator

from servelab.engines.errors import Problem
from servelab.engines.catalog.experiment import Experiment, ProbeSettings, Strict
from servelab.engines.catalog.loader import display_path, load_model, locate, parse_toml

#: Scalar values an axis can take (what a TOML experiment key can hold).
AxisValue = str | int | float | bool

#: Keys a campaign may not vary: they identify the experiment rather than configure it.
FIXED_KEYS: frozenset[str] = frozenset({"name", "description", "tags", "baseline", "patches", "host"})
#: Top-level tables whose keys are free-form (flag names, variable names).
FREE_TABLES: frozenset[str] = frozenset({"engine_args", "env"})


class Link(Strict):
    """Axes zipped together (value i of each goes with value i of the others) instead of crossed."""

    axes: Annotated[list[str], Field(min_length=2)]


class CampaignFile(Strict):
    """The campaign as written. ``axes`` maps a dotted experiment key to the values it takes."""

    name: Annotated[str, Field(min_length=1, max_length=60, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    description: str = ""
    base: Annotated[list[str], Field(min_length=1)]
    baseline: str | None = None
    axes: dict[str, Annotated[list[AxisValue], Field(min_length=1)]] = Field(default_factory=dict)
    links: list[Link] = Field(default_factory=list)
    exclude: list[dict[str, AxisValue]] = Field(default_factory=list)
    #: A fleet: the hosts of hosts.toml the loads are spread over (plain and scheduler hosts alike).
    #: Empty: every load runs on its experiment's own host, one queue there (``campaignctl``).
    hosts: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    #: A fleet's pins: base experiment -> the host of ``hosts`` its loads must run on.
    pin: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> CampaignFile:
        if len(set(self.hosts)) != len(self.hosts):
            raise ValueError("hosts names a host twice")
        for base, host in self.pin.items():
            if base not in self.base:
                raise ValueError(f"pin names {base!r}, which is not one of base ({', '.join(self.base)})")
            if host not in self.hosts:
                raise ValueError(f"pin puts {base} on {host!r}, which is not one of hosts ({', '.join(self.hosts) or 'none'})")
        if self.baseline is not None and self.baseline not in self.base:
            raise ValueError(f"baseline {self.baseline!r} must be one of base ({', '.join(self.base)})")
        if len(set(self.base)) != len(self.base):
            raise ValueError("base names an experiment twice")
        return self


@dataclass(frozen=True)
class Campaign:
    """A checked campaign and where it came from."""

    spec: CampaignFile
    path: Path
    text: str

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def is_fleet(self) -> bool:
        """Loads spread over ``hosts`` by a local coordinator (``engines/campaign/fleet*.py``)."""
        return bool(self.spec.hosts)


def axis_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be an axis (None when the experiment schema has that key)."""
    parts = path.split(".")
    top = parts[0]
    if top in FIXED_KEYS:
        return f"{top!r} identifies the experiment; a campaign cannot vary it"
    field = Experiment.model_fields.get(top)
    if field is None:
        return f"experiments have no key {top!r}"
    if top in FREE_TABLES:
        return None if len(parts) == 2 and parts[1] else f"write {top}.<name>, e.g. {top}.max-num-seqs"
    table = field.annotation
    if isinstance(table, type) and issubclass(table, BaseModel):
        if len(parts) < 2:
            return f"{top!r} is a table: name one of its keys ({', '.join(table.model_fields)})"
        if parts[1] == "extra" and top == "speculative":
            return None if len(parts) == 3 and parts[2] else "write speculative.extra.<key>"
        if parts[1] not in table.model_fields or len(parts) > 2:
            return f"{top} has no key {'.'.join(parts[1:])!r} (keys: {', '.join(table.model_fields)})"
        return None
    return None if len(parts) == 1 else f"{top!r} is not a table"


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``[axes.speculative] num_tokens = [..]`` and ``"speculative.num_tokens" = [..]`` mean the same."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        full = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out.update(_flatten(value, full))
        else:
            out[full] = value
    return out


def axis_line(text: str, path: str) -> int:
    """The line of an axis, written quoted (``"probe.concurrency" = [..]``) or as a nested table."""
    quoted = re.compile(rf"""^\s*["']{re.escape(path)}["']\s*=""")
    for lineno, line in enumerate(text.splitlines(), start=1):
        if quoted.match(line):
            return lineno
    return locate(text, ("axes", *path.split(".")))


def _file_problems(spec: CampaignFile, text: str, shown: str) -> list[Problem]:
    problems: list[Problem] = []
    for path in spec.axes:
        why = axis_path_problem(path)
        if why:
            problems.append(Problem(shown, axis_line(text, path), f"axes.{path}", why))
    for i, link in enumerate(spec.links):
        line = locate(text, ("links", i, "axes"))
        unknown = [a for a in link.axes if a not in spec.axes]
        if unknown:
            problems.append(Problem(shown, line, f"links[{i}].axes", f"not an axis of this campaign: {', '.join(unknown)}"))
            continue
        lengths = {a: len(spec.axes[a]) for a in link.axes}
        if len(set(lengths.values())) > 1:
            sizes = ", ".join(f"{a} has {n}" for a, n in lengths.items())
            problems.append(Problem(shown, line, f"links[{i}].axes", f"linked axes need the same number of values ({sizes})"))
    linked = [a for link in spec.links for a in link.axes]
    twice = sorted({a for a in linked if linked.count(a) > 1})
    if twice:
        problems.append(Problem(shown, locate(text, ("links",)), "links", f"an axis can be in one link only: {', '.join(twice)}"))
    for i, rule in enumerate(spec.exclude):
        for key in rule:
            if key not in spec.axes:
                problems.append(Problem(shown, locate(text, ("exclude", i)), f"exclude[{i}].{key}", "not an axis of this campaign"))
    return problems


def load_campaign(path: Path) -> tuple[Campaign | None, list[Problem]]:
    """Read and check one campaign file: a campaign, or its problems (never an exception)."""
    shown = display_path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, [Problem(shown, 1, "<file>", f"cannot read: {exc.strerror or exc}")]
    parsed, text, problems = parse_toml(data, shown)
    if parsed is None:
        return None, problems
    parsed.setdefault("name", path.stem)
    if isinstance(parsed.get("axes"), dict):
        parsed["axes"] = _flatten(parsed["axes"])
    if isinstance(parsed.get("exclude"), list):
        parsed["exclude"] = [_flatten(r) if isinstance(r, dict) else r for r in parsed["exclude"]]
    spec, problems = load_model(CampaignFile, parsed, text, shown)
    if spec is None:
        return None, problems
    problems = _file_problems(spec, text, shown)
    if problems:
        return None, problems
    return Campaign(spec=spec, path=path, text=text), []


#: Probe keys: an axis over one of these never needs a new load.
PROBE_KEYS: frozenset[str] = frozenset(f"probe.{k}" for k in ProbeSettings.model_fields)
