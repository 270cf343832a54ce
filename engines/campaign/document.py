"""A campaign's files and its plan document, shared by the host supervisor's side (``control``) and a
fleet's coordinator (``fleetctl``, ``coordinator``).

``plan.json`` holds each load's experiment (and, for one host, its exact run record) and each
point's probe settings and request bodies; ``state.json`` what has happened to each. Both live in
``<workdir>/campaigns/<id>/``: on the campaign's host, or for a fleet on this machine.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import tomlkit

from servelab.engines.adapters.base import get_adapter
from servelab.engines.campaign.plan import Plan, Point, point_name
from servelab.engines.catalog.folder import Catalog
from servelab.engines.catalog.experiment import Experiment, SourcedExperiment
from servelab.engines.hosts.base import Host, host_workdir
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.preflight.checks import run_preflight
from servelab.engines.probe.client import chat_body
from servelab.engines.probe.prompts import load as load_prompts
from servelab.engines.runs.records import RunRecord, runs_root
from servelab.engines.runs.state import RunState

CAMPAIGNS_DIR = "campaigns"
PLAN_JSON = "plan.json"
STATE_JSON = "state.json"
FORMAT = "servelab-campaign/1"
#: How long the supervisor waits for a load to answer before calling it crashed.
READY_TIMEOUT_S = 1800.0
REQUEST_TIMEOUT_S = 300.0
Progress = Callable[[str], None]


def campaigns_root(cfg: HostConfig) -> str:
    return f"{host_workdir(cfg)}/{CAMPAIGNS_DIR}"


def new_campaign_id(name: str, now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now()
    return f"{name}-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"

#: The supervisor's (or a fleet coordinator's) pid, start time and process group.
PID_JSON = "supervisor.pid"


@dataclass(frozen=True)
class Located:
    """A campaign run found on its host."""

    host: Host
    id: str
    dir: str



def load_name(p: Plan, point: Point) -> str:
    """A load's experiment name: the point's name without its probe-only values."""
    values = {k: v for k, v in point.values.items() if not k.startswith("probe.")}
    return point_name(p.campaign, point.base, values)


def _toml(exp: Experiment) -> str:
    return tomlkit.dumps(exp.model_dump(mode="json", exclude_none=True, exclude_defaults=True) | {"engine": exp.engine, "model": exp.model})


def sourced_load(catalog: Catalog, base: str, exp: Experiment) -> SourcedExperiment:
    """A derived experiment as if it were a file beside its base (relative paths resolve the same)."""
    origin = catalog.get(base)
    return SourcedExperiment(experiment=exp, path=origin.path, text=_toml(exp))


def _record(catalog: Catalog, sourced: SourcedExperiment, cfg: HostConfig, patches: dict[str, Any]) -> dict[str, Any]:
    """The run record a load's run starts from (the supervisor adds id, folder and start time)."""
    spec = catalog.launch_spec(sourced, cfg)
    e = sourced.experiment
    rec = RunRecord(
        id="",
        experiment=e.name,
        engine=e.engine,
        host=cfg.name,
        argv=list(spec.argv),
        env=dict(spec.env),
        port=e.port,
        model=catalog.host_path(sourced, e.model, cfg),
        run_dir="",
        log_path="",
        patch_hashes={p.file: d for p, d in sourced.patch_hashes() if d is not None},
        identity=sourced.identity_hash(),
        patches=patches,
        status=RunState.LAUNCHING,
    )
    return rec.to_json()


async def point_doc(catalog: Catalog, pt: Point) -> dict[str, Any]:
    settings = pt.experiment.probe
    prompts = load_prompts(settings.prompts, base=catalog.folder)
    async with httpx.AsyncClient(base_url="http://127.0.0.1") as idle:  # never used: the fields are static
        extra = get_adapter(pt.experiment.engine).read_acceptance(idle, pt.experiment, prompts, settings.max_tokens).request_fields()
    return {
        "name": pt.name,
        "load": pt.load,
        "base": pt.base,
        "engine": pt.experiment.engine,
        "values": pt.values,
        "baseline_point": pt.baseline_point,
        "probe": {"prompts": settings.prompts, "max_tokens": settings.max_tokens, "concurrency": settings.concurrency, "repeats": settings.repeats, "warmup": settings.warmup},
        "prompt_ids": [p.id for p in prompts.prompts],
        "bodies": [chat_body("", p, settings.max_tokens, extra) for p in prompts.prompts],
        "timeout_s": REQUEST_TIMEOUT_S,
    }


async def build_document(
    catalog: Catalog,
    p: Plan,
    cfg: HostConfig,
    camp_id: str,
    scripts: dict[str, str],
    *,
    skip_preflight: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """``plan.json``: loads with their run records (preflight first, unless skipped), points with their bodies."""
    say = progress or (lambda _m: None)
    by_name = {pt.name: pt for pt in p.points}
    loads: list[dict[str, Any]] = []
    for load in p.loads:
        first = by_name[load.points[0]]
        exp = load.experiment.model_copy(update={"name": load_name(p, first)})
        sourced = sourced_load(catalog, first.base, exp)
        skip: str | None = None
        patches: dict[str, Any] = {}
        if not skip_preflight:
            say(f"preflight of load {load.index + 1} ({exp.name})")
            report = await run_preflight(catalog, sourced, cfg, apply=True)
            if report.ok:
                patches = dict(report.patches.record()) if report.patches is not None else {}
            else:
                skip = f"preflight failed: {report.summary()}"
                say(f"load {load.index + 1}: {skip} (its {len(load.points)} point(s) are skipped)")
        record = _record(catalog, sourced, cfg, patches)
        loads.append(
            {
                "index": load.index,
                "key": load.key,
                "experiment": exp.name,
                "experiment_toml": sourced.text,
                "record": record,
                "gpus": record["env"].get("CUDA_VISIBLE_DEVICES"),
                "points": list(load.points),
                "speculative_flags": load.speculative_flags,
                "skip": skip,
            }
        )
    root = campaigns_root(cfg)
    return {
        "format": FORMAT,
        "id": camp_id,
        "campaign": p.campaign,
        "host": cfg.name,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "runs_root": runs_root(cfg),
        "lock_dir": root,
        "helpers": {"runctl": scripts["runctl"], "timed_client": scripts["timed_client"]},
        "ready_timeout_s": READY_TIMEOUT_S,
        "loads": loads,
        "points": [await point_doc(catalog, pt) for pt in p.points],
    }
