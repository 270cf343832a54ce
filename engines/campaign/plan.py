"""From a campaign to its points and loads: the fewest model loads that cover every point.

Rules, each tested in ``tests/test_campaign_plan.py``:
- every base experiment is crossed with the axes that apply to it; linked axes are zipped;
- an axis over ``speculative.*`` (other than ``method``) does not apply to a base without
  speculation, so the baseline is not multiplied by K;
- an exclusion drops every point whose values match all of its keys;
- points that differ only in ``probe.*`` keys share one load (one server, several probes);
- the campaign baseline's loads come first, so every speedup has its reference before it;
- each point derived from a speculative base is paired with the baseline point of the same probe
  settings; a point whose baseline point failed is marked, not run.

K is engine-neutral (``speculative.num_tokens``: tokens drafted per step on a chain); each load
shows the engine's own flags for it, which is where SGLang's ``num_draft_tokens = steps + 1``
appears.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from servelab.engines.adapters.base import ENGINE_MODULES, get_adapter, speculative_flags
from servelab.engines.campaign.definition import PROBE_KEYS, AxisValue, Campaign
from servelab.engines.campaign.fleet import Assignment, FleetHost, LoadNeed, assign, fleet_host
from servelab.engines.catalog.folder import Catalog
from servelab.engines.errors import Problem, ServelabError
from servelab.engines.catalog.experiment import Experiment, SourcedExperiment
from servelab.engines.catalog.loader import display_path, locate
from servelab.engines.placements.base import placement_for

if TYPE_CHECKING:
    from servelab.engines.runs.records import RunsAPI

#: Keys that never change what is loaded.
_NOT_SERVED = ("name", "description", "tags", "baseline", "probe")
#: ``(host, model) -> seconds`` of earlier loads, or None when there were none.
LoadEstimate = Callable[[str, str], float | None]


@dataclass(frozen=True)
class Point:
    """One measurement: an experiment derived from a base, probed once."""

    name: str
    base: str
    values: dict[str, AxisValue]
    experiment: Experiment
    load: int
    baseline_point: str | None = None

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items()) or "as defined"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "base": self.base,
            "engine": self.experiment.engine,
            "values": self.values,
            "load": self.load,
            "baseline_point": self.baseline_point,
        }


@dataclass(frozen=True)
class Load:
    """One server start, shared by the points that differ only in probe settings."""

    index: int
    key: str
    experiment: Experiment
    points: list[str]
    speculative_flags: list[str]
    estimate_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "key": self.key,
            "engine": self.experiment.engine,
            "host": self.experiment.host,
            "model": self.experiment.model,
            "speculative": self.experiment.speculative.model_dump(mode="json", exclude_defaults=True),
            "speculative_flags": self.speculative_flags,
            "points": self.points,
            "estimate_s": self.estimate_s,
        }


@dataclass
class Plan:
    """Points and loads in run order, plus the problems that keep points from running."""

    campaign: str
    points: list[Point] = field(default_factory=list)
    loads: list[Load] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    #: A fleet campaign's hosts (``hosts = [...]``) and each load's first host with its reason.
    fleet: list[FleetHost] = field(default_factory=list)
    assignments: list[Assignment] = field(default_factory=list)
    pins: dict[str, str] = field(default_factory=dict)

    @property
    def is_fleet(self) -> bool:
        return bool(self.fleet)

    def needs(self) -> dict[int, LoadNeed]:
        """What placing each load needs: its GPUs, estimate and pin (the base's ``pin`` entry)."""
        base_of = {pt.load: pt.base for pt in self.points}
        return {ld.index: LoadNeed(ld.index, ld.experiment.parallel.gpus, ld.estimate_s, self.pins.get(base_of.get(ld.index, ""))) for ld in self.loads}

    @property
    def estimate_s(self) -> float | None:
        """Total of the loads' estimates; None when any load has no earlier run to go by."""
        values = [load.estimate_s for load in self.loads]
        return None if not values or any(v is None for v in values) else float(sum(v for v in values if v is not None))

    def to_json(self) -> dict[str, Any]:
        return {
            "campaign": self.campaign,
            "points": [p.to_json() for p in self.points],
            "loads": [load.to_json() for load in self.loads],
            "estimate_s": self.estimate_s,
            "problems": [str(p) for p in self.problems],
        } | ({"hosts": [h.name for h in self.fleet], "assignments": [vars(a) for a in self.assignments]} if self.fleet else {})


def _applies(path: str, base: Experiment) -> bool:
    """A K-like axis means nothing without speculation."""
    if path.startswith("speculative.") and path != "speculative.method":
        return base.speculative.method != "none"
    return True


def _set(data: dict[str, Any], path: str, value: AxisValue) -> None:
    node = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _get(exp: Experiment, path: str) -> Any:
    node: Any = exp.model_dump(mode="json")
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _combos(campaign: Campaign, paths: list[str]) -> list[dict[str, AxisValue]]:
    """Cartesian product over groups, where a link is one group whose values move together."""
    spec = campaign.spec
    groups: list[list[dict[str, AxisValue]]] = []
    seen: set[str] = set()
    for link in spec.links:
        members = [a for a in link.axes if a in paths]
        if not members:
            continue
        seen.update(members)
        n = len(spec.axes[members[0]])
        groups.append([{a: spec.axes[a][i] for a in members} for i in range(n)])
    for path in paths:
        if path not in seen:
            groups.append([{path: v} for v in spec.axes[path]])
    out: list[dict[str, AxisValue]] = []
    for parts in itertools.product(*groups):
        merged: dict[str, AxisValue] = {}
        for part in parts:
            merged.update(part)
        out.append(merged)
    return out


def _excluded(campaign: Campaign, values: dict[str, AxisValue], exp: Experiment) -> bool:
    for rule in campaign.spec.exclude:
        if all((values[k] if k in values else _get(exp, k)) == v for k, v in rule.items()):
            return True
    return False


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def point_name(campaign: str, base: str, values: dict[str, AxisValue]) -> str:
    """A readable experiment name; long ones end in a hash so they stay unique and within 100 characters."""
    parts = [campaign, base] + [f"{k.rsplit('.', 1)[-1]}-{v}" for k, v in values.items()]
    name = _UNSAFE.sub("_", ".".join(parts))
    if len(name) > 100:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[:90]}.{digest}"
    return name


def serve_key(exp: Experiment) -> str:
    """What a load is: the experiment without its name, notes and probe settings."""
    data = exp.model_dump(mode="json", exclude=set(_NOT_SERVED))
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def _derive(base: SourcedExperiment, name: str, values: dict[str, AxisValue]) -> tuple[Experiment | None, str | None]:
    data = base.experiment.model_dump(mode="json", exclude_unset=True)
    data["name"] = name
    for path, value in values.items():
        _set(data, path, value)
    try:
        exp = Experiment.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        return None, f"{where}: {first['msg'].removeprefix('Value error, ')}"
    if exp.engine not in ENGINE_MODULES:
        return None, f"engine: unknown engine {exp.engine!r} (known: {', '.join(sorted(ENGINE_MODULES))})"
    adapter = get_adapter(exp.engine)
    bad = adapter.problems(exp)
    if bad:
        return None, f"{bad[0].path}: {exp.engine}: {bad[0].message}"
    extra = {k: v for k, v in adapter.metrics_args if k not in exp.engine_args}  # what the records are replayed from
    if extra:
        exp = exp.model_copy(update={"engine_args": {**exp.engine_args, **extra}})
    return exp, None


def _host_model(catalog: Catalog, base: SourcedExperiment, model: str) -> str:
    """The model path as its host sees it (how run records name it), or as written if the host is unknown."""
    try:
        return catalog.host_path(base, model)
    except ServelabError:
        return model


async def plan_with_history(campaign: Campaign, catalog: Catalog, runs: RunsAPI) -> Plan:
    """The plan, each load estimated from earlier probed loads of its model on its host."""
    from servelab.engines.runs.history import load_estimates

    hosts = {load.experiment.host for load in plan(campaign, catalog).loads} | set(campaign.spec.hosts)
    seconds = await load_estimates(runs, hosts)
    if campaign.is_fleet:  # a load may go to any host of the fleet: the first one that has loaded its model says
        fleet = campaign.spec.hosts

        def first_known(host: str, model: str) -> float | None:
            return next((seconds[(h, model)] for h in [host, *fleet] if (h, model) in seconds), None)

        return plan(campaign, catalog, first_known)
    return plan(campaign, catalog, lambda host, model: seconds.get((host, model)))


def plan(campaign: Campaign, catalog: Catalog, estimate: LoadEstimate | None = None) -> Plan:
    """Expand a campaign against the experiments of ``catalog``."""
    spec = campaign.spec
    shown = display_path(campaign.path)
    out = Plan(campaign=spec.name)
    bases: list[SourcedExperiment] = []
    for i, name in enumerate(spec.base):
        found = next((e for e in catalog.experiments if e.name == name), None)
        if found is None:
            known = ", ".join(sorted(e.name for e in catalog.experiments)) or "none"
            out.problems.append(Problem(shown, locate(campaign.text, ("base",)), f"base[{i}]", f"no experiment named {name!r} (known: {known})"))
        else:
            if campaign.is_fleet and (found.experiment.spans_hosts or found.experiment.multinode is not None):
                out.problems.append(Problem(shown, locate(campaign.text, ("base",)), f"base[{i}]",
                                            f"{name} is a multi-node experiment: a fleet campaign spreads single-node loads (not supported yet)"))
                continue
            host = catalog.hosts.get(found.experiment.host)
            refusal = placement_for(host).campaign_refusal(found.experiment.host, name) if host is not None and not campaign.is_fleet else None
            if refusal is not None:
                out.problems.append(Problem(shown, locate(campaign.text, ("base",)), f"base[{i}]", refusal))
                continue
            bases.append(found)
    baseline = spec.baseline
    bases.sort(key=lambda b: b.name != baseline)  # the baseline's loads run first

    probe_axes = [a for a in spec.axes if a in PROBE_KEYS]
    by_key: dict[str, Load] = {}
    baseline_by_probe: dict[str, str] = {}
    for base in bases:
        paths = [a for a in spec.axes if _applies(a, base.experiment)]
        for values in _combos(campaign, paths):
            name = point_name(spec.name, base.name, values)
            exp, why = _derive(base, name, values)
            if exp is None:
                out.problems.append(Problem(shown, locate(campaign.text, ("axes",)), f"point {name}", why or "invalid"))
                continue
            if _excluded(campaign, values, exp):
                continue
            key = serve_key(exp)
            load = by_key.get(key)
            if load is None:
                est = estimate(exp.host, _host_model(catalog, base, exp.model)) if estimate else None
                load = Load(len(by_key), key, exp, [], speculative_flags(exp), est)
                by_key[key] = load
            load.points.append(name)
            probe_id = json.dumps({a: _get(exp, a) for a in probe_axes} | {"host": exp.host}, sort_keys=True)
            pair: str | None = None
            if base.name == baseline:
                baseline_by_probe.setdefault(probe_id, name)
            elif baseline is not None:
                pair = baseline_by_probe.get(probe_id)
            out.points.append(Point(name, base.name, values, exp, load.index, pair))
    out.loads = list(by_key.values())
    if campaign.is_fleet:
        _place(campaign, catalog, out)
    return out


def _place(campaign: Campaign, catalog: Catalog, out: Plan) -> None:
    """A fleet's hosts from hosts.toml and each load's first host (``fleet.assign``)."""
    shown = display_path(campaign.path)
    line = locate(campaign.text, ("hosts",))
    for i, name in enumerate(campaign.spec.hosts):
        cfg = catalog.hosts.get(name)
        if cfg is None:
            known = ", ".join(catalog.hosts.names())
            out.problems.append(Problem(shown, line, f"hosts[{i}]", f"no host named {name!r} in hosts.toml (known: {known})"))
        else:
            out.fleet.append(fleet_host(cfg.model_copy(update={"name": name})))
    if not out.fleet:
        return
    out.pins = dict(campaign.spec.pin)
    needs = out.needs()
    out.assignments = assign((needs[ld.index] for ld in out.loads), out.fleet)
    for a in out.assignments:
        if a.host is None:
            out.problems.append(Problem(shown, line, f"load {a.load + 1}", a.reason))


def estimate_text(seconds: float | None) -> str:
    """A load-time estimate as every view says it: ``~33 s`` under a minute, ``~2 min`` from one on."""
    if seconds is None:
        return "unknown"
    return f"~{seconds / 60:.0f} min" if seconds >= 60 else f"~{seconds:.0f} s"


def describe(p: Plan) -> list[str]:
    """The plan as lines for a terminal: loads, their flags, their points, the estimate."""
    lines = [f"campaign {p.campaign}: {len(p.points)} points in {len(p.loads)} loads"]
    if p.fleet:
        lines.append("fleet: " + ", ".join(f"{h.name} ({h.kind}, {h.slots} at a time{f', {h.gpus} GPUs' if h.gpus else ''})" for h in p.fleet))
    names = {pt.name: pt for pt in p.points}
    for load in p.loads:
        est = estimate_text(load.estimate_s) if load.estimate_s is not None else "load time unknown"
        spec = load.experiment.speculative
        k = f"{spec.method} K={spec.num_tokens}" if spec.method != "none" else "no speculation"
        placed = next((a for a in p.assignments if a.load == load.index), None)
        where = f"{placed.host or 'no host'} ({placed.reason})" if placed is not None else load.experiment.host
        lines.append(f"load {load.index + 1}: {load.experiment.engine} on {where}, {k} ({est})")
        if load.speculative_flags:
            lines.append(f"  engine flags: {' '.join(load.speculative_flags)}")
        for name in load.points:
            pt = names[name]
            vs = f"  vs {pt.baseline_point}" if pt.baseline_point else ""
            lines.append(f"  - {pt.label}{vs}")
    total = p.estimate_s
    lines.append(f"estimated loading time: {estimate_text(total)}" if total is not None else "estimated loading time: unknown (no earlier load of these models on these hosts)")
    lines.extend(str(problem) for problem in p.problems)
    return lines
