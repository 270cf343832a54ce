"""``experiments/hosts.toml``: where engines run.

A host without ``ssh`` is this machine. The host named ``local`` always exists; hosts.toml may
override its interpreter and work directory. Relative paths of a local host are resolved against
the folder holding hosts.toml, so a checkout can point at its own engine environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import platformdirs
from pydantic import BaseModel, ConfigDict, Field

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
        updates: dict[str, str] = {}
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
