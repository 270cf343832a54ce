"""The placement protocol and its registry.

A placement is how a run is started on a kind of host, how it is found alive, stopped and reached,
and what the scheduler between servelab and the processes says (its view of the run's job). A host
kind is one class in one module exposing ``PLACEMENT``, plus its line in the kinds' registry,
``engines/hosts/kinds.py`` (the ``kind`` of ``hosts.toml``). The core never branches on the kind: it asks :func:`placement_for`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from servelab.engines.errors import ServelabError
from servelab.engines.hosts.kinds import KINDS

if TYPE_CHECKING:
    from servelab.engines.adapters.exchange import LaunchSpec
    from servelab.engines.catalog.experiment import SourcedExperiment
    from servelab.engines.catalog.folder import Catalog
    from servelab.engines.hosts.base import Host
    from servelab.engines.hosts.hostsfile import HostConfig
    from servelab.engines.runs.records import RunRecord, RunStatus
    from servelab.engines.runs.placed import JobView

#: The module of each host kind's placement (each defines ``PLACEMENT``, its class), from the kinds'
#: registry (``engines/hosts/kinds.py``: one line a kind).
PLACEMENT_MODULES: dict[str, str] = {name: kind.placement for name, kind in KINDS.items()}


@dataclass(frozen=True)
class Preview:
    """What ``show`` adds for a host kind: the file a launch would submit (a batch script)."""

    #: Its key in ``show --json``.
    key: str
    #: The heading ``show`` prints above it (what it is and how it is submitted).
    heading: str
    text: str


@runtime_checkable
class Placement(Protocol):
    """What the run lifecycle needs from a host kind. One instance per ``Runs`` and kind: it may keep
    what it last learnt of each run (a scheduler's view)."""

    #: The ``hosts.toml`` ``kind`` it serves.
    kind: str
    #: Whether a rehearsal gets a free port of its own (it may serve on the same machine beside the
    #: experiment's live run); a scheduler that places the job on a node of its choosing needs none.
    rehearsal_port_of_its_own: bool

    async def start(self, h: Host, rec: RunRecord, exp: SourcedExperiment, catalog: Catalog, *, rehearsal: bool) -> RunRecord:
        """Start the run whose folder and ``run.json`` are written on ``h``; the record as started.
        ``ServelabError`` with the one-line reason when the host refuses."""
        ...

    def may_change(self, rec: RunRecord) -> bool:
        """Whether a listing must ask again about this record (a job whose end the scheduler has not said)."""
        ...

    async def liveness(self, h: Host, rec: RunRecord) -> tuple[bool, int | None]:
        """(alive, exit code) of the run; brings ``rec`` (status, exit code, placement facts) up to date."""
        ...

    def view(self, rec: RunRecord) -> JobView | None:
        """The scheduler's last view of the run's job (None where no scheduler stands between)."""
        ...

    async def stop(self, h: Host, rec: RunRecord, grace: float, *, leader_first: bool, engine_plan: bool) -> RunStatus:
        """Stop only what this run started; the record as stopped."""
        ...

    async def base_url(self, h: Host, rec: RunRecord) -> str:
        """``http://...`` reaching the run's server from this machine (forwarded over SSH where needed)."""
        ...

    def server_address(self, rec: RunRecord) -> str:
        """The address the run's server listens at, as its host reaches it (a helper timing requests there)."""
        ...

    def gpus(self, cfg: HostConfig) -> int | None:
        """GPUs one run may have on the host (None: the host does not say)."""
        ...

    #: Preflight's words for where its checks ran when that is not where the engine will ("": the same place).
    preflight_where: str

    def campaign_refusal(self, host: str, experiment: str) -> str | None:
        """Why a campaign cannot run its loads on this host in place (the host's own queue runs
        them one at a time), or None when it can."""
        ...

    def launch_facts(self, rec: RunRecord) -> dict[str, str]:
        """What ``launch --json`` adds about where the run went (a job id); empty for none."""
        ...

    def launch_note(self, rec: RunRecord) -> str | None:
        """One line for the user after a launch (a job submitted, where to follow its queue state), or None."""
        ...

    def engine_state_in_listing(self, rec: RunRecord) -> bool:
        """Whether a listing reads a live run's engine state from its log (a job's may not be on its node yet)."""
        ...

    def preview(self, cfg: HostConfig, catalog: Catalog, exp: SourcedExperiment, spec: LaunchSpec) -> Preview | None:
        """What ``show`` adds for this host kind (the script a launch would submit); None when a
        launch submits nothing but the command."""
        ...


def placement_for(cfg: HostConfig) -> Placement:
    """A new placement for the host's kind (``ServelabError`` for a kind no module serves)."""
    module = PLACEMENT_MODULES.get(cfg.kind)
    if module is None:
        raise ServelabError(f"host {cfg.name}: no placement for kind {cfg.kind!r} (known: {', '.join(sorted(PLACEMENT_MODULES))})")
    placement: Placement = importlib.import_module(module).PLACEMENT()
    return placement
