"""``experiments/hosts.toml``: where engines run.

A host without ``ssh`` is this machine. The host named ``local`` always exists; hosts.toml may
override its interpreter and work directory. Relative paths of a local host are resolved against
the folder holding hosts.toml, so a checkout can point at its own engine environment.

A host's ``kind`` (``engines/hosts/kinds.py``) may bring a table of its own, ``[hosts.NAME.<kind>]``:
a batch scheduler's host is its cluster reached through a login node (``ssh``, or this machine
without it), the table says where and how jobs are submitted, and ``workdir`` is the shared
filesystem path where run folders live, seen at the same path by the login node and every node.
HostConfig has one optional field per such table, named for its kind and typed by the kind's model;
:attr:`HostConfig.table` is the one its kind uses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, cast

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servelab.engines.hosts.kinds import KindName, KindTable, kind_tables

LOCAL = "local"


def default_workdir() -> str:
    """Where a local host keeps its runs unless hosts.toml says otherwise."""
    return str(Path(platformdirs.user_data_dir("servelab")))


class HostConfig(BaseModel):
    """One ``[hosts.NAME]`` table."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str = LOCAL
    ssh: Annotated[str, Field(min_length=1)] | None = None
    python: Annotated[str, Field(min_length=1)] = "python3"
    workdir: Annotated[str, Field(min_length=1)] = Field(default_factory=default_workdir)
    gpus: list[Annotated[int, Field(ge=0)]] | Annotated[int, Field(ge=0)] | None = None
    connect_timeout: Annotated[float, Field(gt=0, le=600)] = 10.0
    #: The address other nodes of a multi-node experiment reach this host at (default: the host
    #: part of ``ssh``, or 127.0.0.1 for this machine).
    address: Annotated[str, Field(min_length=1)] | None = None
    #: ``plain`` (a machine servelab starts engines on) or a scheduler's kind (a cluster it submits jobs to).
    kind: KindName = "plain"
    #: Loads a fleet campaign runs here at once (``hosts = [...]`` in a campaign; one queue per host).
    campaign_slots: Annotated[int, Field(ge=1, le=64)] = 1

    # one optional ``[hosts.NAME.<kind>]`` table per kind that has one, typed by the kind's model
    __annotations__.update({kind: model | None for kind, model in kind_tables().items()})
    vars().update(dict.fromkeys(kind_tables()))

    @model_validator(mode="after")
    def _kind(self) -> HostConfig:
        for kind, model in kind_tables().items():
            if kind != self.kind and getattr(self, kind) is not None:
                raise ValueError(f'a [hosts.NAME.{kind}] table needs kind = "{kind}"')
            if kind == self.kind and getattr(self, kind) is None:
                needed = ", ".join(f'{name} = "..."' for name, f in model.model_fields.items() if f.is_required())
                raise ValueError(f'kind = "{kind}" needs a [hosts.NAME.{kind}] table' + (f" (at least {needed})" if needed else ""))
        table = self.table
        problem = table.host_problem(self.gpus) if table is not None else None
        if problem is not None:
            raise ValueError(problem)
        return self

    @property
    def table(self) -> KindTable | None:
        """Its kind's own table (None for a kind without one)."""
        return cast("KindTable | None", getattr(self, self.kind, None))

    @property
    def is_local(self) -> bool:
        return self.ssh is None

    @property
    def node_address(self) -> str:
        if self.address:
            return self.address
        if self.ssh is None:
            return "127.0.0.1"
        target = self.ssh.rpartition("@")[2]
        if target.startswith("["):
            return target[1:].partition("]")[0]
        return target.partition(":")[0] if target.count(":") == 1 else target

    @property
    def gpu_ids(self) -> list[int] | None:
        """GPU indices servelab may use on this host (None: whatever the host has)."""
        if self.gpus is None:
            return None
        return list(range(self.gpus)) if isinstance(self.gpus, int) else list(self.gpus)

    def resolved(self, base: Path) -> HostConfig:
        """Resolve relative local paths against ``base`` (the folder holding hosts.toml)."""
        if not self.is_local:
            return self
        updates: dict[str, object] = {}
        table = self.table
        if table is not None and (own := table.resolved(base)) is not table:
            updates[self.kind] = own
        for key in ("python", "workdir"):
            value: str = getattr(self, key)
            p = Path(value).expanduser()
            if "/" in value and not p.is_absolute():
                # Absolute but not symlink-resolved: a venv's bin/python is a symlink to the base
                # interpreter, and resolving it would lose the venv (and the engine with it).
                updates[key] = os.path.normpath(os.path.abspath(base / p))
            elif value.startswith("~"):
                updates[key] = str(p)
        return self.model_copy(update=updates) if updates else self


class HostsFile(BaseModel):
    """The whole hosts.toml."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    hosts: dict[str, HostConfig] = Field(default_factory=dict)

    def get(self, name: str) -> HostConfig | None:
        if name in self.hosts:
            return self.hosts[name]
        if name == LOCAL:
            return HostConfig(name=LOCAL)
        return None

    def names(self) -> list[str]:
        return sorted(set(self.hosts) | {LOCAL})
